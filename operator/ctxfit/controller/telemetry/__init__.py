"""Prometheus metrics of the operator and its per-decision log lines."""
