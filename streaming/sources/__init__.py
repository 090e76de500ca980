"""Sources: partitioned logs with positions. The embedded default is the file log; NATS
JetStream is the production source. Both present records as (topic, partition, offset)."""
