-- Per pipeline, topic and partition: what was read and the bucket each record landed in, the
-- definition of `streaming/store/accounting.py`:
--   read    = the offset range the journal says was consumed (lowest first .. highest last);
--   buckets = the archive's dispositions, plus quarantined from the quarantine;
--   closes  : read = accepted + duplicate + stale + quarantined + routed_to_repair.
-- repaired / held / pending split routed_to_repair by the replay queue's status.
with journal as (
    select * from {{ ref('stg_journal_ranges') }}
),

archive as (
    select * from {{ ref('stg_archive') }}
),

quarantine as (
    select * from {{ ref('stg_quarantine') }}
),

queue as (
    select * from {{ ref('stg_replay_queue') }}
),

read_ranges as (
    -- scaled-out workers journal under `<pipeline>@I/N`; their partition ranges are disjoint
    select split_part(pipeline, '@', 1) as pipeline, topic, partition_no,
           min(first_offset) as first_offset, max(last_offset) as last_offset
    from journal
    group by 1, 2, 3
),

positions as (
    select pipeline, topic, partition_no, disposition as bucket from archive
    union all
    select pipeline, topic, partition_no, 'quarantined' as bucket from quarantine
),

buckets as (
    select
        pipeline,
        topic,
        partition_no,
        count(*) filter (where bucket = 'accepted') as accepted,
        count(*) filter (where bucket = 'duplicate') as duplicate,
        count(*) filter (where bucket = 'stale') as stale,
        count(*) filter (where bucket = 'quarantined') as quarantined,
        count(*) filter (where bucket = 'routed_to_repair') as routed_to_repair
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
),

keys as (
    select pipeline, topic, partition_no from read_ranges
    union
    select pipeline, topic, partition_no from buckets
),

accounted as (
    select
        k.pipeline,
        k.topic,
        k.partition_no,
        coalesce(r.first_offset, 0) as first_offset,
        coalesce(r.last_offset, -1) as last_offset,
        coalesce(r.last_offset - r.first_offset + 1, 0) as read,
        coalesce(b.accepted, 0) as accepted,
        coalesce(b.duplicate, 0) as duplicate,
        coalesce(b.stale, 0) as stale,
        coalesce(b.quarantined, 0) as quarantined,
        coalesce(b.routed_to_repair, 0) as routed_to_repair
    from keys k
    left join read_ranges r using (pipeline, topic, partition_no)
    left join buckets b using (pipeline, topic, partition_no)
)

select
    a.*,
    coalesce(s.repaired, 0) as repaired,
    coalesce(s.held, 0) as held,
    coalesce(s.pending, 0) as pending,
    a.read = a.accepted + a.duplicate + a.stale + a.quarantined + a.routed_to_repair as closes
from accounted a
left join settled s using (pipeline, topic, partition_no)
