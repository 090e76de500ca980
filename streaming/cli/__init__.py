"""The `riskstream` command line."""
