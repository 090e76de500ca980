"""Asset groups: ingest (store -> warehouse), dbt (reconciliation and diff models), rebuild
(candidate generation and its publication)."""
