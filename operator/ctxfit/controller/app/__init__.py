"""kopf wiring: handler registration, start-up and clean-up, kopf settings."""
