"""Asset keys shared across modules, and what each candidate table is."""

from dagster import AssetKey

# The candidate generation's tables: the dbt source name (a view in warehouse schema `rebuild`)
# -> (asset name under `candidate/`, what the table holds).
CANDIDATE_TABLES = {
    "cand_pairs": ("pairs", "Pairs the rebuild found for its interval (the candidate "
                            "generation), before validation."),
    "base_pairs": ("replaced_pairs", "The published pairs inside the rebuilt interval: what "
                                     "the candidate would replace."),
    "cand_outcomes": ("payment_outcomes", "Per payment of the interval: its revision and how "
                                          "many signals it matches in the candidate."),
    "cand_pieces": ("interval_pieces", "The (merchant, day, payment-time range) pieces the "
                                       "candidate rebuilds and would publish."),
    "cand_entries": ("queue_events", "The replay-queue events the candidate was built for; "
                                     "only pairs involving them may change."),
}
CANDIDATE_KEYS = {source: AssetKey(["candidate", name])
                  for source, (name, _) in CANDIDATE_TABLES.items()}
PUBLISHED_KEY = AssetKey(["published_generation"])
GENERATIONS_KEY = AssetKey(["live_generations"])
DIFF_KEYS = [AssetKey(["candidate_pairs_checked"]), AssetKey(["diff_pair_keys"]),
             AssetKey(["diff_merchant_totals"])]
