"""Repair paths shared by the CLI and orchestration."""
