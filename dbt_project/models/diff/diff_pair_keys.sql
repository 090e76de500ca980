-- Candidate vs the published rows it replaces, by logical pair (payment, signal, rule version).
with candidate as (
    select * from {{ ref('candidate_pairs_checked') }}
),

base as (
    select * from {{ source('rebuild', 'base_pairs') }}
),

joined as (
    select
        coalesce(c.merchant_id, b.merchant_id) as merchant_id,
        coalesce(c.payment_id, b.payment_id) as payment_id,
        coalesce(c.signal_id, b.signal_id) as signal_id,
        coalesce(c.rule_version, b.rule_version) as rule_version,
        b.pair_id as current_pair_id,
        c.pair_id as candidate_pair_id,
        case
            when b.pair_id is null then 'added'
            when c.pair_id is null then 'retired'
            when b.pair_id <> c.pair_id then 'revised'
            else 'unchanged'
        end as change
    from candidate c
    full outer join base b
        on c.payment_id = b.payment_id
        and c.signal_id = b.signal_id
        and c.rule_version = b.rule_version
)

select * from joined
