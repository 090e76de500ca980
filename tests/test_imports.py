"""Import rules, read from every import statement (module level, inside functions, under
TYPE_CHECKING, relative or absolute):

- the runtime (`streaming/`) never imports the tooling, the orchestration layer or what only
  they need (Dagster, dbt, matplotlib);
- no package has an import cycle between its modules."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("streaming", "riskstream_tools", "orchestration")
# Top-level names the runtime must not import. DuckDB is not here: the join rebuild imports it
# inside `build_candidate`, which only orchestration and the tooling call.
FORBIDDEN_IN_RUNTIME = {"orchestration", "riskstream_tools", "dagster", "dagster_dbt",
                        "dagster_postgres", "dagster_webserver", "dbt", "matplotlib"}


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules(package: str) -> dict[str, pathlib.Path]:
    return {module_name(p): p for p in sorted((REPO / package).rglob("*.py"))}


def imported_names(path: pathlib.Path, module: str,
                   modules: set[str] | frozenset[str] = frozenset()) -> list[tuple[int, str]]:
    """(line, absolute dotted name) for every import statement in the file. `from X import a`
    names X.a when that is one of `modules` (a submodule), else X."""
    is_package = path.name == "__init__.py"
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base if is_package else base[:-1]
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out += [(node.lineno, f"{target}.{a.name}" if f"{target}.{a.name}" in modules
                     else target) for a in node.names]
    return out


def test_the_resolver_reads_function_level_and_relative_imports(tmp_path):
    src = tmp_path / "pkg" / "sub" / "mod.py"
    src.parent.mkdir(parents=True)
    src.write_text("def f():\n    from ..other import thing\n    import dagster.core\n"
                   "    from . import sibling, helper\n")
    names = [n for _, n in imported_names(src, "pkg.sub.mod", {"pkg.sub.sibling"})]
    assert names == ["pkg.other", "dagster.core", "pkg.sub.sibling", "pkg.sub"]


def test_runtime_never_imports_tooling_orchestration_or_their_dependencies():
    offenders = []
    for module, path in package_modules("streaming").items():
        for line, name in imported_names(path, module):
            if name.split(".")[0] in FORBIDDEN_IN_RUNTIME:
                offenders.append(f"{path.relative_to(REPO)}:{line} imports {name}")
    assert offenders == [], "\n".join(offenders)


def import_graph(package: str) -> dict[str, set[str]]:
    modules = package_modules(package)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = {name for _, name in imported_names(path, module, set(modules))
                   if name in modules}
        graph[module] = targets - {module}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle (as a closed path of module names), or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def test_find_cycle_names_the_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_cycles_in_any_package():
    cycles = {}
    for package in PACKAGES:
        cycle = find_cycle(import_graph(package))
        if cycle:
            cycles[package] = " -> ".join(cycle)
    assert cycles == {}, f"import cycles: {cycles}"


def test_importing_the_worker_and_cli_loads_no_dagster_or_tooling_dependencies():
    code = ("import sys, streaming.host.loop, streaming.cli.main, streaming.pipelines.join; "
            "print(sorted(m.split('.')[0] for m in sys.modules "
            "if m.split('.')[0] in ('dagster', 'dbt', 'matplotlib', 'duckdb')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=REPO)
    assert out.stdout.strip() == "[]"
