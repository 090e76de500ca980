"""The worker host, one room per concern: `settings` (run settings, the pipeline spec and the
`Operator` / `Source` protocols), `loop` (the read / batch / commit loop), `checkpoints` (write,
verify and decode), `journal` (replay of committed batches), `metrics` (the per-batch snapshot),
`throttle` (the opt-in sink pacer) and `crash` (crash injection for recovery tests)."""
