-- Per merchant: payment count, matched payments and matched amount, now and with the
-- candidate published (its outcomes inside its pieces, current outcomes elsewhere).
-- Current outcomes straight from the ingested facts (as fresh as the rebuild's own ingest;
-- the staging models belong to the hourly reconciliation and may be older).
with outcome_facts as (
    select
        logical_key as payment_id,
        payload::json ->> '$.merchant_id' as merchant_id,
        payload::json ->> '$.payment_time' as payment_time,
        cast(payload::json ->> '$.amount_cents' as bigint) as amount_cents,
        cast(payload::json ->> '$.match_count' as integer) as match_count,
        row_number() over (partition by logical_key order by id desc) as recency
    from {{ source('raw', 'facts') }}
    where pipeline = 'join' and kind = 'outcome'
),

current_outcomes as (
    select * from outcome_facts where recency = 1
),

pieces as (
    select * from {{ source('rebuild', 'cand_pieces') }}
),

candidate as (
    select * from {{ source('rebuild', 'cand_outcomes') }}
),

current_timed as (
    select *, epoch_us(cast(payment_time as timestamptz)) as payment_us
    from current_outcomes
),

replaced as (
    select o.payment_id
    from current_timed o
    join pieces p
        on o.merchant_id = p.merchant
        and o.payment_us between p.start_us and p.end_us
    union
    select payment_id from candidate
),

projected as (
    select merchant_id, payment_id, amount_cents, match_count
    from current_timed
    where payment_id not in (select payment_id from replaced)
    union all
    select merchant_id, payment_id, amount_cents, match_count
    from candidate
),

current_totals as (
    select
        merchant_id,
        count(*) as payments,
        count(*) filter (where match_count > 0) as matched_payments,
        coalesce(sum(amount_cents) filter (where match_count > 0), 0) as matched_amount
    from current_timed
    group by 1
),

candidate_totals as (
    select
        merchant_id,
        count(*) as payments,
        count(*) filter (where match_count > 0) as matched_payments,
        coalesce(sum(amount_cents) filter (where match_count > 0), 0) as matched_amount
    from projected
    group by 1
)

select
    coalesce(c.merchant_id, n.merchant_id) as merchant_id,
    coalesce(c.payments, 0) as current_payments,
    coalesce(c.matched_payments, 0) as current_matched_payments,
    coalesce(c.matched_amount, 0) as current_matched_amount,
    coalesce(n.payments, 0) as candidate_payments,
    coalesce(n.matched_payments, 0) as candidate_matched_payments,
    coalesce(n.matched_amount, 0) as candidate_matched_amount,
    coalesce(n.payments, 0) - coalesce(c.payments, 0) as delta_payments,
    coalesce(n.matched_payments, 0) - coalesce(c.matched_payments, 0) as delta_matched_payments,
    coalesce(n.matched_amount, 0) - coalesce(c.matched_amount, 0) as delta_matched_amount,
    coalesce(c.merchant_id, n.merchant_id) in (select merchant from pieces) as affected
from current_totals c
full outer join candidate_totals n on c.merchant_id = n.merchant_id
