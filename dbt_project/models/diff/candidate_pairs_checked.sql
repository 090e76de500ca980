-- The candidate generation's pairs (the rebuild's output, named by generation id upstream).
with source as (
    select * from {{ source('rebuild', 'cand_pairs') }}
)

select
    generation_id,
    pair_id,
    rule_version,
    merchant_id,
    payment_id,
    payment_rev,
    signal_id,
    signal_rev,
    payment_time,
    amount_cents
from source
