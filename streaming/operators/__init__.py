"""Operators: pure state machines. `on_record` / `on_watermark` / `on_clock` append facts,
dispositions, queue entries and quarantine rows to an `Emit`; they never touch I/O."""
