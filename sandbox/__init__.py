"""Where untrusted code runs. Imports no other Cambrian package."""
