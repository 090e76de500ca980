with source as (
    select * from {{ source('raw', 'replay_queue') }}
),

renamed as (
    select
        id as entry_id,
        pipeline,
        queue_date,
        topic,
        "partition" as partition_no,
        "offset" as source_offset,
        event_id,
        revision,
        key as record_key,
        event_us,
        reason,
        status,
        status_reason,
        generation_id
    from source
)

select * from renamed
