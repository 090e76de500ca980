with source as (
    select * from {{ source('raw', 'quarantine') }}
),

renamed as (
    select
        pipeline,
        topic,
        "partition" as partition_no,
        "offset" as source_offset,
        reason
    from source
)

select * from renamed
