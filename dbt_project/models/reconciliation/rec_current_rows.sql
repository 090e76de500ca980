-- One current row per logical key: the latest fact of each key, live or published.
with facts as (
    select * from {{ ref('stg_facts') }}
),

ranked as (
    select
        *,
        row_number() over (
            partition by pipeline, kind, logical_key order by fact_id desc
        ) as recency
    from facts
    where generation_id is null or kind <> 'pair'
)

select
    pipeline,
    kind,
    logical_key,
    fact_key,
    status,
    generation_id,
    merchant_id,
    payment_id,
    payment_time,
    amount_cents,
    match_count
from ranked
where recency = 1
