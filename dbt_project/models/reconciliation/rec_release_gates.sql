-- Release gates per pipeline: a release reviewer reads one row per gate.
with ranges as (
    select * from {{ ref('rec_source_ranges') }}
),

current_rows as (
    select * from {{ ref('rec_current_rows') }}
),

pipelines as (
    select distinct pipeline from ranges
),

accounting as (
    select pipeline, bool_and(closes) as passed,
           count(*) filter (where not closes) as failing
    from ranges group by 1
),

queue_settled as (
    select pipeline, sum(routed_to_repair) = sum(repaired + held + pending) as passed,
           sum(routed_to_repair) - sum(repaired + held + pending) as failing
    from ranges group by 1
),

one_current as (
    select p.pipeline,
           coalesce(count(c.logical_key) = count(distinct c.kind || '|' || c.logical_key), true)
               as passed,
           count(c.logical_key) - count(distinct c.kind || '|' || c.logical_key) as failing
    from pipelines p left join current_rows c using (pipeline)
    group by 1
),

open_sink_exceptions as (
    -- An open sink exception holds every gate of its pipeline until a decision resolves it.
    select p.pipeline,
           count(e.id) filter (where d.blocker_id is null) = 0 as passed,
           count(e.id) filter (where d.blocker_id is null) as failing
    from pipelines p
    left join {{ source('raw', 'sink_exceptions') }} e using (pipeline)
    left join {{ source('raw', 'gate_decisions') }} d
        on d.pipeline = e.pipeline and d.blocker_id = 'sx-' || cast(e.id as varchar)
    group by 1
)

select pipeline, 'accounting_closes' as gate, passed, failing from accounting
union all
select pipeline, 'queued_records_accounted' as gate, passed, failing from queue_settled
union all
select pipeline, 'one_current_row_per_key' as gate, passed, failing from one_current
union all
select pipeline, 'no_open_sink_exceptions' as gate, passed, failing from open_sink_exceptions
