"""Who may use a served app: Host/Origin guard, logins and users, upload caps, visitors."""
