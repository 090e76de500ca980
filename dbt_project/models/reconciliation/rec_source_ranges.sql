-- Per pipeline, topic and partition: the offset range read and one bucket per record.
-- read = accepted + duplicate + stale + quarantined + routed_to_repair must close.
with archive as (
    select * from {{ ref('stg_archive') }}
),

quarantine as (
    select * from {{ ref('stg_quarantine') }}
),

queue as (
    select * from {{ ref('stg_replay_queue') }}
),

positions as (
    select pipeline, topic, partition_no, source_offset, disposition as bucket from archive
    union all
    select pipeline, topic, partition_no, source_offset, 'quarantined' as bucket from quarantine
),

buckets as (
    select
        pipeline,
        topic,
        partition_no,
        min(source_offset) as first_offset,
        max(source_offset) as last_offset,
        count(*) as read,
        count(*) filter (where bucket = 'accepted') as accepted,
        count(*) filter (where bucket = 'duplicate') as duplicates,
        count(*) filter (where bucket = 'stale') as stale,
        count(*) filter (where bucket = 'quarantined') as quarantined,
        count(*) filter (where bucket = 'routed_to_repair') as queued
    from positions
    group by 1, 2, 3
),

settled as (
    select
        pipeline,
        topic,
        partition_no,
        count(*) filter (where status = 'processed') as repaired,
        count(*) filter (where status = 'held') as held,
        count(*) filter (where status = 'pending') as pending
    from queue
    group by 1, 2, 3
)

select
    b.*,
    coalesce(s.repaired, 0) as repaired,
    coalesce(s.held, 0) as held,
    coalesce(s.pending, 0) as pending,
    b.read = b.accepted + b.duplicates + b.stale + b.quarantined + b.queued
        and b.last_offset - b.first_offset + 1 = b.read as closes
from buckets b
left join settled s using (pipeline, topic, partition_no)
