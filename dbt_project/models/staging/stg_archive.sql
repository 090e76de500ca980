with source as (
    select * from {{ source('raw', 'archive') }}
),

renamed as (
    select
        pipeline,
        topic,
        "partition" as partition_no,
        "offset" as source_offset,
        event_id,
        revision,
        key as record_key,
        event_us,
        arrival_us,
        disposition
    from source
)

select * from renamed
