"""The threshold table is a package of one module per concern: each short enough to read at once, every
name re-exported by the package, and the modules imported in the table's order."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from exporter.policy import thresholds

PACKAGE = Path(thresholds.__file__).parent
MAX_LINES = 500


def _concerns() -> list[str]:
    """The modules ``__init__.py`` re-exports, in the order it imports them."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    return [
        node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.level == 1 and [a.name for a in node.names] == ["*"]
    ]


def test_every_module_is_short_enough_to_read_at_once():
    long = {p.name: n for p in PACKAGE.glob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_the_package_imports_every_module_and_reexports_every_name():
    concerns = _concerns()
    assert sorted([*concerns, "registry", "__init__"]) == sorted(p.stem for p in PACKAGE.glob("*.py"))
    for name in concerns:
        module = importlib.import_module(f"{thresholds.__name__}.{name}")
        public = [n for n in vars(module) if not n.startswith("_") and n != "annotations"]
        assert public, name
        assert all(getattr(thresholds, n) is getattr(module, n) for n in public), name


def test_the_table_follows_the_modules_order():
    """Each module's own entries (the ones its names hold) come after every earlier module's."""
    where: dict[str, int] = {}
    for index, name in enumerate(_concerns()):
        module = importlib.import_module(f"{thresholds.__name__}.{name}")
        for value in vars(module).values():
            found = value.values() if isinstance(value, dict) else [value]
            for entry in found:
                if isinstance(entry, thresholds.Threshold | thresholds.Choice):
                    where.setdefault(entry.key, index)
    order = [where[key] for key in thresholds.table() if key in where]
    assert len(order) > len(thresholds.table()) // 2
    assert order == sorted(order)
