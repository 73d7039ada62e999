"""The package layout is the pipeline: every module of exporter/ belongs to one stage, imports go only to
its own stage or a lower one, and no set of modules imports itself round in a loop.

The stages, lowest first (ARCHITECTURE.md draws them). Every import counts: at module level, inside a
function, or under ``TYPE_CHECKING``; an import that is not needed at start-up is still a dependency.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# (stage, the modules it holds: a package's prefix, or one module by its full name)
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("policy", ("exporter", "exporter.policy")),  # the package root holds the version only
    ("config", ("exporter.config",)),
    ("podlogs", ("exporter.podlogs",)),
    ("sources", ("exporter.sources",)),
    ("analysis", ("exporter.analysis",)),
    ("collect", ("exporter.collect",)),
    ("serve", ("exporter.serve",)),
    ("sim", ("exporter.sim",)),
    ("doctor", ("exporter.doctor",)),
    ("app", ("exporter.app",)),
    ("offline", ("exporter.offline",)),
    ("entry", ("exporter.cli", "exporter.__main__")),
)
RANK = {stage: rank for rank, (stage, _) in enumerate(STAGES)}


def modules(root: Path = REPO) -> dict[str, Path]:
    """Every module under exporter/, by its dotted name (a package by its own name)."""
    found = {}
    for path in sorted((root / "exporter").rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def stage_of(module: str) -> str:
    """The stage of a module: the longest prefix that names it."""
    best, length = "", -1
    for stage, prefixes in STAGES:
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > length:
                best, length = stage, len(prefix)
    if not best:
        raise AssertionError(f"{module} belongs to no stage: add it to STAGES (and ARCHITECTURE.md)")
    return best


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The exporter modules ``name`` imports: ``from a.b import c`` is a.b.c when c is a module, else a.b."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *([base] if base else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in known:
                    found.add(full)
                elif base in known:
                    found.add(base)
    found.discard(name)
    return found


def graph(root: Path = REPO) -> dict[str, set[str]]:
    mods = modules(root)
    return {name: imports(name, path, set(mods)) for name, path in mods.items()}


def upward(g: dict[str, set[str]]) -> list[str]:
    """Every import from a module to one of a higher stage."""
    return sorted(
        f"{a} ({stage_of(a)}) imports {b} ({stage_of(b)})"
        for a, targets in g.items()
        for b in targets
        if RANK[stage_of(b)] > RANK[stage_of(a)]
    )


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def test_every_module_has_a_stage():
    for name in modules():
        assert stage_of(name) in RANK


def test_no_import_goes_up_a_stage():
    assert upward(graph()) == []


def test_no_import_loop():
    assert cycles(graph()) == []


def test_the_top_of_the_package_holds_only_the_entry_points():
    """A newcomer reads the flow from the folder names: the flat modules are the commands' entry only."""
    flat = sorted(p.name for p in (REPO / "exporter").glob("*.py"))
    assert flat == ["__init__.py", "__main__.py", "app.py", "cli.py"]


def test_architecture_md_states_the_same_order():
    """The table of stages in ARCHITECTURE.md names the stages above, in this order."""
    text = (REPO / "ARCHITECTURE.md").read_text()
    rows = re.findall(r"^\| \d+ \| `([^`]+)`", text, re.M)
    shown = {"app": "app.py", "entry": "cli.py"}
    assert rows == [shown.get(stage, stage) for stage, _ in STAGES]


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_checks_see_an_upward_import_and_a_loop(tmp_path: Path):
    _write(
        tmp_path,
        {
            "exporter/__init__.py": "",
            "exporter/sources/__init__.py": "",
            "exporter/sources/a.py": "def f():\n    from exporter.serve import b\n",
            "exporter/serve/__init__.py": "",
            "exporter/serve/b.py": "from exporter.sources.a import f\n",
            "exporter/collect/__init__.py": "",
            "exporter/collect/c.py": "from . import d\n",
            "exporter/collect/d.py": "from exporter.collect import c\n",
        },
    )
    g = graph(tmp_path)
    assert upward(g) == ["exporter.sources.a (sources) imports exporter.serve.b (serve)"]
    assert sorted(cycles(g)) == [
        ["exporter.collect.c", "exporter.collect.d"],
        ["exporter.serve.b", "exporter.sources.a"],
    ]


def test_a_module_outside_every_stage_is_named():
    try:
        stage_of("elsewhere.module")
    except AssertionError as exc:
        assert "elsewhere.module" in str(exc)
    else:
        raise AssertionError("a module outside every stage went unnoticed")
