"""The quarantine table cannot drift from the code: every reason a line can be quarantined or
routed to repair with, collected from the source (the contract reasons' registry, and the
reason argument of every call that quarantines or routes a record), appears in
docs/quarantine.md. Reasons built at run time (`late_payment:<blocker>`) must match a
documented spelling."""

from __future__ import annotations

import ast
import pathlib
import re

from streaming.contracts.reasons import CONTRACT_REASONS

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "quarantine.md"

# Callee name -> position of its reason argument. These are every way a record leaves the
# accepted path with a reason: quarantine entries, contract refusals, category refusals and the
# operators' routes to the replay queue or to repair.
REASON_ARG = {"Quarantined": 3, "InvalidRecord": 0, "VersionRejected": 0, "QueueEntry": 7,
              "_queue": 1, "_route": 5, "_request": 4}
# Functions that return a (reason, detail) pair or a reason part.
REASON_RETURNS = {"_undecodable", "jump_fault", "_blocker"}


def _modules():
    for path in sorted((ROOT / "streaming").rglob("*.py")):
        yield path, ast.parse(path.read_text(), str(path))


def _constants(trees) -> dict[str, str]:
    """Module-level NAME = "text" constants of the package (AGGREGATE_OVERFLOW, ...), annotated
    (`NAME: Final = "text"`, as the compiled modules declare theirs) or not."""
    out = {}
    for _, tree in trees:
        for node in tree.body:
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                for target in targets:
                    if isinstance(target, ast.Name) and target.id.isupper():
                        out[target.id] = value.value
    return out


def _pattern(node: ast.JoinedStr) -> str:
    parts = [re.escape(v.value) if isinstance(v, ast.Constant) else r"[a-z_<>]+"
             for v in node.values]
    return "".join(parts)


def _values(node, func, consts, seen=()):
    """The reason spellings an argument expression can take: ('text', str) or ('re', regex)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield "text", node.value
    elif isinstance(node, ast.JoinedStr):
        yield "re", _pattern(node)
    elif isinstance(node, ast.IfExp):
        for branch in (node.body, node.orelse):
            yield from _values(branch, func, consts, seen)
    elif isinstance(node, ast.Attribute) and node.attr in consts:
        yield "text", consts[node.attr]
    elif isinstance(node, ast.Name):
        if node.id in consts:
            yield "text", consts[node.id]
            return
        # A local: every value assigned to it in the function (a parameter is covered by the
        # function's own call sites).
        for sub in ast.walk(func) if func is not None else ():
            if isinstance(sub, ast.Assign) and node.id not in seen and any(
                    isinstance(t, ast.Name) and t.id == node.id for t in sub.targets):
                yield from _values(sub.value, func, consts, seen + (node.id,))


def collected_reasons():
    trees = list(_modules())
    consts = _constants(trees)
    found = {("text", r) for r in CONTRACT_REASONS}
    for _path, tree in trees:
        funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef,
                                                              ast.AsyncFunctionDef))]
        for func in funcs:
            for node in ast.walk(func):
                if isinstance(node, ast.Call):
                    name = node.func.attr if isinstance(node.func, ast.Attribute) else \
                        getattr(node.func, "id", None)
                    i = REASON_ARG.get(name)
                    if i is not None and i < len(node.args) and \
                            not isinstance(node.args[i], ast.Starred) and \
                            not any(isinstance(a, ast.Starred) for a in node.args[:i]):
                        found.update(_values(node.args[i], func, consts))
                if func.name in REASON_RETURNS and isinstance(node, ast.Return) and \
                        node.value is not None:
                    value = node.value.elts[0] if isinstance(node.value, ast.Tuple) else \
                        node.value
                    found.update(_values(value, func, consts))
    return found


def documented_spellings() -> set[str]:
    return set(re.findall(r"`([^`\s]+)`", DOC.read_text()))


def test_the_collector_sees_every_kind_of_reason():
    got = {v for kind, v in collected_reasons() if kind == "text"}
    # One of each source: contract, host, source, operator quarantine, category, routes.
    assert {"bad_id", "invalid_utf8", "arrival_time_jump", "conflicting_duplicate",
            "overlapping_versions", "beyond_allowed_delay", "beyond_retention",
            "aggregate_overflow", "correction:key_changed", "counterpart_queued",
            "category_change_for_final_window"} <= got


def test_every_reason_is_in_the_quarantine_table():
    documented = documented_spellings()
    missing = []
    for kind, value in sorted(collected_reasons()):
        if kind == "text" and value not in documented:
            missing.append(value)
        if kind == "re" and not any(re.fullmatch(value, d) for d in documented):
            missing.append(f"pattern {value}")
    assert missing == [], f"reasons missing from {DOC.name}: {missing}"
