"""Fixture Hub repos (tests/fixtures/hub/models.yaml) and the local HTTP server that serves them."""
