"""The package's layout holds: imports only go down the layers, and nothing imports itself
round a loop (two modules, or two folders). Read from the source with ``ast``, so a change
that breaks the layering fails here, not in a newcomer's head."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "lib" / "kappa_ingest"

# Bottom to top, as kappa_ingest/__init__.py draws them. A module may import its own
# folder and anything on a lower line; a line with several names holds peers that may not
# import each other round a loop.
LAYERS = (
    ("errors", "paths", "processes", "failpoints", "settling", "datagen"),
    ("native",),
    ("kafka", "s3"),
    ("source",),
    ("config",),
    ("delivery",),
    ("sinks",),
    ("spark",),
    ("report",),
    ("quality",),
    ("preflight", "reprocess"),
    ("pipeline",),
    ("ingest",),
    ("watch",),
    ("setup_jars",),
    ("lab",),
    ("bench",),
    ("cli",),
)
RANK = {unit: i for i, line in enumerate(LAYERS) for unit in line}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(name: str) -> set[str]:
    """The package modules ``name`` imports anywhere (functions and TYPE_CHECKING included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("kappa_ingest.")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kappa_ingest"):
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                found.add(sub if sub in MODULES else node.module)
    found.discard("kappa_ingest")
    return {m for m in found if m != name}


GRAPH = {name: _imports(name) for name in MODULES}


def _unit(module: str) -> str:
    return module.split(".")[1]


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One loop in ``graph``, as the path round it, or None."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        path.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return [*path[path.index(m) :], m]
            if m not in state and (found := visit(m)):
                return found
        state[n] = 2
        path.pop()
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def test_every_folder_and_top_level_module_has_a_layer():
    units = {_unit(m) for m in MODULES if m != "kappa_ingest"}
    assert units - RANK.keys() == set(), "place the new module or folder in LAYERS (and in kappa_ingest/__init__.py)"
    assert RANK.keys() - units == set(), "LAYERS names a module or folder that is gone"


def test_imports_only_go_down():
    upward = [
        f"{m} imports {t}"
        for m, targets in GRAPH.items()
        if m != "kappa_ingest"
        for t in targets
        if RANK[_unit(t)] > RANK[_unit(m)]
    ]
    assert upward == []


def test_no_two_modules_import_each_other_round_a_loop():
    assert _cycle(GRAPH) is None


def test_no_two_folders_import_each_other_round_a_loop():
    units: dict[str, set[str]] = {}
    for m, targets in GRAPH.items():
        if m != "kappa_ingest":
            units.setdefault(_unit(m), set()).update(_unit(t) for t in targets if _unit(t) != _unit(m))
    assert _cycle(units) is None


@pytest.mark.parametrize(
    "graph, loop",
    [
        ({"a": {"b"}, "b": {"a"}}, ["a", "b", "a"]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
        ({"a": {"b"}, "b": {"c"}, "c": set()}, None),
    ],
)
def test_the_loop_finder_finds_loops(graph, loop):
    assert _cycle(graph) == loop


def test_each_folder_says_what_it_is_for():
    for init in PACKAGE.glob("*/__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc.split()) >= 12, f"{init.parent.name}/__init__.py: say what the folder offers"
