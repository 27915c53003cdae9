"""Training elsewhere: the bundle zip and notebook, remote providers, results import."""
