"""The checks an operator reads: every asset check has a readable name and a description of
what it protects; exactly the checks that must stop publication (or fail the release gate)
block, the others warn; dbt runs without colour codes; the assets have distinct names and
descriptions without raw SQL."""

from __future__ import annotations

import pytest

from tests.orchestration_helpers import prepared_manifest

pytestmark = pytest.mark.dagster

BLOCKING = {"candidate_pair_ids_unique", "candidate_logical_pairs_unique",
            "changes_only_from_queued_events", "other_merchants_totals_unchanged",
            "release_gates_pass", "release_gates_have_something_to_judge"}


@pytest.fixture(scope="module")
def graph():
    prepared_manifest()
    from orchestration.definitions import defs
    return defs.resolve_asset_graph()


def all_check_specs(graph):
    return {key: graph.get_check_spec(key) for key in graph.asset_check_keys}


def test_every_check_is_named_and_described_and_only_the_gates_block(graph):
    specs = all_check_specs(graph)
    assert len(specs) == 24
    for key, spec in specs.items():
        assert len(key.name) <= 40 and key.name.replace("_", "").isalnum(), key.name
        assert spec.description and "\n" not in spec.description, key
        assert spec.description.startswith(
            ("Blocks publication:", "Fails the reconciliation run:") if spec.blocking
            else "Warns:"), (key.name, spec.description)
    assert {k.name for k, s in specs.items() if s.blocking} == BLOCKING


def test_assets_have_distinct_names_and_descriptions_without_sql(graph):
    names = [k.to_user_string() for k in graph.get_all_asset_keys()]
    leaves = [n.rsplit("/", 1)[-1] for n in names]
    assert len(set(leaves)) == len(leaves), sorted(leaves)  # no two nodes titled alike
    for key in graph.get_all_asset_keys():
        description = graph.get(key).description
        assert description, key
        assert "Raw SQL" not in description and "select" not in description.lower(), key


def test_dbt_runs_without_colour_codes():
    from orchestration.resources import make_dbt_resource
    assert "--no-use-colors" in make_dbt_resource().global_config_flags
