"""The dated replay queue as partitions: one dynamic partition per queue (event) date, added by
the replay-queue sensor (or by `riskstream repair run`) when a date first has pending entries."""

from dagster import DynamicPartitionsDefinition

replay_dates = DynamicPartitionsDefinition(name="replay_dates")
