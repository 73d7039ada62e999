"""Policy numbers live in the threshold table, shape numbers in named constants: no bare float literal in
the analysis code. 0.0 and 1.0 (nothing, everything) are not numbers anyone tunes."""

from __future__ import annotations

import ast
from pathlib import Path

ANALYSIS = Path(__file__).resolve().parents[2] / "exporter" / "analysis"
IDENTITIES = {0.0, 1.0}


def _named(tree: ast.Module) -> set[int]:
    """Literals of module-level constant assignments (``NAME = 0.3  # why``)."""
    ids: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [n for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
            if names and all(n.id.isupper() for n in names):
                ids.update(id(n) for n in ast.walk(node) if isinstance(n, ast.Constant))
    return ids


def bare_floats(source: str) -> list[tuple[int, float]]:
    tree = ast.parse(source)
    named = _named(tree)
    return sorted(
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, float)
        and n.value not in IDENTITIES
        and id(n) not in named
    )


def test_no_bare_float_literal_in_analysis():
    found = {
        path.name: hits for path in sorted(ANALYSIS.glob("*.py")) if (hits := bare_floats(path.read_text()))
    }
    assert found == {}, f"move these into exporter/policy/thresholds.py or a named constant: {found}"


def test_the_check_sees_a_bare_float_and_accepts_a_named_one():
    assert bare_floats("def f(x):\n    return x > 0.45\n") == [(2, 0.45)]
    assert bare_floats("LINE = 0.45  # why\n\ndef f(x):\n    return x > LINE and x < 1.0\n") == []
