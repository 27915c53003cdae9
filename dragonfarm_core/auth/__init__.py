"""Who may use a served app, and how it is deployed: the deployment profiles (laptop, lab,
Spaces), the Host/Origin guard, logins and users, upload caps, Space visitors."""
