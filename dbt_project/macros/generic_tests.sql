{#- Generic tests kept in the project (no package download): each returns the failing rows. -#}

{% test unique_combination(model, columns) %}
select {{ columns | join(', ') }}, count(*) as n
from {{ model }}
group by {{ columns | join(', ') }}
having count(*) > 1
{% endtest %}

{% test expression_is_true(model, expression) %}
select * from {{ model }} where not ({{ expression }})
{% endtest %}

{% test changed_pairs_involve_entry_set(model, entries) %}
-- A rebuild may only change pairs that involve an event of the entry set it was built for.
select d.*
from {{ model }} d
where d.change <> 'unchanged'
  and d.payment_id not in (select event_id from {{ entries }} where topic = 'payments')
  and d.signal_id not in (select event_id from {{ entries }} where topic = 'risk_signals')
{% endtest %}

{% test unaffected_totals_unchanged(model) %}
-- Merchants outside the rebuilt pieces keep their payment count, matches and matched amount.
select *
from {{ model }}
where not affected
  and (delta_payments <> 0 or delta_matched_payments <> 0 or delta_matched_amount <> 0)
{% endtest %}

{% test not_empty(model) %}
-- Fail closed: a gate with nothing to judge (no pipeline has read anything) does not pass.
select 'nothing to judge: the model has no rows' as reason
where not exists (select 1 from {{ model }})
{% endtest %}
