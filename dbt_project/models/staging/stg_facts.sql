with source as (
    select * from {{ source('raw', 'facts') }}
),

renamed as (
    select
        id as fact_id,
        pipeline,
        fact_key,
        kind,
        logical_key,
        status,
        payload_hash,
        predecessor_key,
        batch_seq,
        generation_id,
        payload::json ->> '$.merchant_id' as merchant_id,
        payload::json ->> '$.payment_id' as payment_id,
        payload::json ->> '$.signal_id' as signal_id,
        payload::json ->> '$.pair_id' as pair_id,
        payload::json ->> '$.payment_time' as payment_time,
        cast(payload::json ->> '$.amount_cents' as bigint) as amount_cents,
        cast(payload::json ->> '$.match_count' as integer) as match_count,
        payload
    from source
)

select * from renamed
