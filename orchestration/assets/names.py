"""Asset keys shared across modules."""

from dagster import AssetKey

# The candidate generation's tables, as the dbt sources of schema `rebuild` name them.
CANDIDATE_TABLES = ("cand_pairs", "base_pairs", "cand_outcomes", "cand_pieces", "cand_entries")
CANDIDATE_KEYS = [AssetKey(["rebuild", t]) for t in CANDIDATE_TABLES]
PUBLISHED_KEY = AssetKey(["published_generation"])
DIFF_KEYS = [AssetKey(["cand_pairs"]), AssetKey(["diff_pair_keys"]),
             AssetKey(["diff_merchant_totals"])]
