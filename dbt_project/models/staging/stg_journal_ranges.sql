-- What each committed batch consumed: one row per batch and topic-partition, from the
-- journal's `ranges` ({"topic:partition": [first_offset, last_offset]}).
with source as (
    select * from {{ source('raw', 'journal') }}
),

entries as (
    select pipeline, seq, ranges::json as ranges, unnest(json_keys(ranges::json)) as topic_partition
    from source
)

select
    pipeline,
    seq as batch_seq,
    regexp_replace(topic_partition, ':[^:]*$', '') as topic,
    cast(regexp_extract(topic_partition, ':([0-9]+)$', 1) as integer) as partition_no,
    cast(ranges -> topic_partition ->> 0 as bigint) as first_offset,
    cast(ranges -> topic_partition ->> 1 as bigint) as last_offset
from entries
