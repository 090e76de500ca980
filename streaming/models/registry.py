"""A small versioned model registry for the receipt scorer.

An artifact is one JSON document holding everything that decides a score: the feature list,
the preprocessing of each feature, the logistic weights, the threshold policy and the state
schema it expects. Its revision is the content hash of its canonical JSON, so two artifacts
with the same revision are the same model, and an artifact file that was edited no longer
matches its name (refused on load).

Layout of a model directory:
    <dir>/artifacts/<revision>.json   immutable artifacts
    <dir>/current                     the revision new scorers pin (moved atomically)

The `current` pointer only decides what a scorer pins when it starts with no pin of its own;
a running or restored scorer keeps the revision held in its checkpoint."""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass, field

import orjson

from .logistic import FEATURES, TRANSFORMS, LogisticScorer

DEFAULT_MODEL_DIR = ".riskstream/models"
MODEL_DIR_ENV = "RISKSTREAM_MODEL_DIR"
FEATURE_SCHEMA = "receipt-features/1"  # the features the scorer computes (see operators.receipts)

# The built-in initial revision, written when a model directory is created. The weights were
# set by hand for a receipt-risk policy: many or large receipts of one merchant within seven
# minutes, and large single receipts, raise the score.
INITIAL_ARTIFACT: dict = {
    "name": "receipt-risk-logistic",
    "schema_version": 1,
    "state_schema": FEATURE_SCHEMA,
    "features": ["feature_count_7m", "feature_amount_7m", "amount_cents"],
    "preprocessing": {
        # log1p of dollars for money; then standardise with a fixed centre and scale.
        "feature_count_7m": {"transform": "identity", "center": 2.0, "scale": 2.0},
        "feature_amount_7m": {"transform": "log1p_dollars", "center": 4.5, "scale": 1.5},
        "amount_cents": {"transform": "log1p_dollars", "center": 3.5, "scale": 1.0},
    },
    "weights": {"feature_count_7m": 0.9, "feature_amount_7m": 0.6, "amount_cents": 1.1},
    "intercept": -1.6,
    "threshold_policy": {"review_at": 0.5, "decline_at": 0.85},
    "score_decimals": 6,
}


class ModelError(RuntimeError):
    exit_code = 5


def canonical(artifact: dict) -> bytes:
    return orjson.dumps(artifact, option=orjson.OPT_SORT_KEYS)


def revision_of(artifact: dict) -> str:
    return "m-" + hashlib.sha256(canonical(artifact)).hexdigest()[:16]


def validate_artifact(artifact: dict) -> None:
    """Reject an artifact this scorer cannot apply, with the field that is wrong."""
    need = ("features", "preprocessing", "weights", "intercept", "threshold_policy",
            "state_schema", "schema_version")
    missing = [k for k in need if k not in artifact]
    if missing:
        raise ModelError(f"model artifact lacks {', '.join(missing)}")
    if artifact["state_schema"] != FEATURE_SCHEMA:
        raise ModelError(f"model expects state schema {artifact['state_schema']!r}; the scorer "
                         f"computes {FEATURE_SCHEMA!r}")
    for f in artifact["features"]:
        if f not in FEATURES:
            raise ModelError(f"feature {f!r} is not one the scorer computes "
                             f"({FEATURE_SCHEMA}: {', '.join(FEATURES)})")
        if f not in artifact["preprocessing"] or f not in artifact["weights"]:
            raise ModelError(f"feature {f!r} has no preprocessing or weight")
        if artifact["preprocessing"][f].get("transform") not in TRANSFORMS:
            raise ModelError(f"feature {f!r}: unknown transform "
                             f"{artifact['preprocessing'][f].get('transform')!r}")
    pol = artifact["threshold_policy"]
    if not (0.0 < pol.get("review_at", -1) <= pol.get("decline_at", -1) <= 1.0):
        raise ModelError("threshold_policy needs 0 < review_at <= decline_at <= 1")


@dataclass(frozen=True)
class Model:
    """A loaded, pinned artifact. `score` is pure and deterministic."""

    revision: str
    artifact: dict
    # What `score` reads of the artifact, taken out once (compiled: models/logistic.py).
    # Derived from `artifact`, so not compared.
    scorer: LogisticScorer = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        a = self.artifact
        pre = a["preprocessing"]
        # Numbers as floats: an artifact may spell one as an integer (`"center": 2`), and the
        # arithmetic would convert it the same way at every use.
        terms = [(f, pre[f]["transform"], float(a["weights"][f]), float(pre[f]["center"]),
                  float(pre[f]["scale"])) for f in a["features"]]
        pol = a["threshold_policy"]
        object.__setattr__(self, "scorer", LogisticScorer(
            terms, float(a["intercept"]), a.get("score_decimals", 6), float(pol["decline_at"]),
            float(pol["review_at"]), self.revision))

    @classmethod
    def from_artifact(cls, artifact: dict, expect_revision: str | None = None) -> Model:
        validate_artifact(artifact)
        rev = revision_of(artifact)
        if expect_revision is not None and rev != expect_revision:
            raise ModelError(f"artifact content hashes to {rev}, not {expect_revision}: "
                             f"it was altered after registration")
        return cls(rev, artifact)

    def score(self, features: dict[str, int]) -> tuple[float, str]:
        """(score, decision) of the features named by the artifact."""
        return self.scorer.score(features)



def resolve_model_dir(model_dir: str | None) -> str:
    return model_dir or os.environ.get(MODEL_DIR_ENV) or DEFAULT_MODEL_DIR


class Registry:
    def __init__(self, model_dir: str | None = None, create: bool = True):
        self.root = resolve_model_dir(model_dir)
        self.artifacts_dir = os.path.join(self.root, "artifacts")
        self.pointer_path = os.path.join(self.root, "current")
        if create and not os.path.exists(self.pointer_path):
            os.makedirs(self.artifacts_dir, exist_ok=True)
            rev = self.register(INITIAL_ARTIFACT)
            self.promote(rev)

    def register(self, artifact: dict) -> str:
        """Store an artifact under its content hash (idempotent) and return the revision."""
        validate_artifact(artifact)
        rev = revision_of(artifact)
        path = os.path.join(self.artifacts_dir, f"{rev}.json")
        if not os.path.exists(path):
            os.makedirs(self.artifacts_dir, exist_ok=True)
            _atomic_write(path, orjson.dumps(artifact, option=orjson.OPT_SORT_KEYS
                                             | orjson.OPT_INDENT_2))
        return rev

    def revisions(self) -> list[str]:
        if not os.path.isdir(self.artifacts_dir):
            return []
        return sorted(n[:-5] for n in os.listdir(self.artifacts_dir) if n.endswith(".json"))

    def load(self, revision: str) -> Model:
        path = os.path.join(self.artifacts_dir, f"{revision}.json")
        if not os.path.exists(path):
            raise ModelError(f"model revision {revision} is not in {self.root} "
                             f"(known: {', '.join(self.revisions()) or 'none'})")
        with open(path, "rb") as fh:
            return Model.from_artifact(orjson.loads(fh.read()), expect_revision=revision)

    def current_revision(self) -> str:
        if not os.path.exists(self.pointer_path):
            raise ModelError(f"model directory {self.root} has no current pointer")
        with open(self.pointer_path, encoding="utf-8") as fh:
            return fh.read().strip()

    def current(self) -> Model:
        return self.load(self.current_revision())

    def promote(self, revision: str) -> str | None:
        """Move the pointer (atomic rename). Returns the previous revision."""
        self.load(revision)  # refuses an unknown or altered artifact
        previous = self.current_revision() if os.path.exists(self.pointer_path) else None
        _atomic_write(self.pointer_path, (revision + "\n").encode())
        return previous


def _atomic_write(path: str, data: bytes) -> None:
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
