"""Incident evidence and release gates read from the store."""
