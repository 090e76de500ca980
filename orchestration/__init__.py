"""Dagster orchestration of riskstream: ingest, dbt reconciliation, candidate rebuilds, blocking
checks and atomic publication of generations. Loaded by `dagster dev` through workspace.yaml."""
