"""Model registry: content-hashed revisions, the movable pointer, altered artifacts refused."""

from __future__ import annotations

import os

import pytest

from streaming.models.registry import (INITIAL_ARTIFACT, Model, ModelError, Registry,
                                       revision_of)

from .receiptsutil import stricter_artifact


def test_new_directory_gets_the_initial_revision_as_current(tmp_path):
    reg = Registry(str(tmp_path / "models"))
    assert reg.current_revision() == revision_of(INITIAL_ARTIFACT)
    assert reg.revisions() == [revision_of(INITIAL_ARTIFACT)]


def test_revision_is_the_content_hash_and_register_is_idempotent(tmp_path):
    reg = Registry(str(tmp_path))
    a = stricter_artifact()
    rev = reg.register(a)
    assert rev == reg.register(stricter_artifact()) != revision_of(INITIAL_ARTIFACT)
    assert reg.load(rev).artifact["threshold_policy"] == {"review_at": 0.3, "decline_at": 0.6}


def test_promote_moves_the_pointer_and_refuses_unknown_revisions(tmp_path):
    reg = Registry(str(tmp_path))
    first = reg.current_revision()
    rev = reg.register(stricter_artifact())
    assert reg.promote(rev) == first
    assert Registry(str(tmp_path)).current_revision() == rev
    with pytest.raises(ModelError, match="not in"):
        reg.promote("m-0000000000000000")
    assert reg.current_revision() == rev


def test_altered_artifact_is_refused(tmp_path):
    reg = Registry(str(tmp_path))
    rev = reg.current_revision()
    path = os.path.join(str(tmp_path), "artifacts", f"{rev}.json")
    text = open(path).read().replace('"decline_at": 0.85', '"decline_at": 0.95')
    open(path, "w").write(text)
    with pytest.raises(ModelError, match="altered"):
        reg.load(rev)


def test_threshold_policy_decides():
    m = Model.from_artifact(INITIAL_ARTIFACT)
    quiet = m.score({"feature_count_7m": 0, "feature_amount_7m": 0, "amount_cents": 500})
    busy = m.score({"feature_count_7m": 9, "feature_amount_7m": 300_000, "amount_cents": 90_000})
    assert quiet[1] == "approve" and quiet[0] < 0.5
    assert busy[1] == "decline" and busy[0] >= 0.85
    bad = dict(INITIAL_ARTIFACT, state_schema="receipt-features/0")
    with pytest.raises(ModelError, match="state schema"):
        Model.from_artifact(bad)


def test_a_feature_the_scorer_does_not_compute_is_refused_on_load():
    """Refused when the artifact is loaded, naming the feature, not when a receipt is first
    scored."""
    bad = {**INITIAL_ARTIFACT, "features": [*INITIAL_ARTIFACT["features"], "feature_count_1h"],
           "preprocessing": {**INITIAL_ARTIFACT["preprocessing"],
                             "feature_count_1h": {"transform": "identity", "center": 0.0,
                                                  "scale": 1.0}},
           "weights": {**INITIAL_ARTIFACT["weights"], "feature_count_1h": 0.1}}
    with pytest.raises(ModelError, match="'feature_count_1h' is not one the scorer computes"):
        Model.from_artifact(bad)
