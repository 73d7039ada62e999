"""Policy numbers live in the threshold table, shape numbers in named constants: no bare number literal in
the analysis code, float or integer. 0 and 1 (nothing, everything, the first) are not numbers anyone
tunes, nor is 2 as arithmetic (halves, doubles, squares, a pair)."""

from __future__ import annotations

import ast
from pathlib import Path

ANALYSIS = Path(__file__).resolve().parents[2] / "exporter" / "analysis"
IDENTITIES = {0.0, 1.0}
ARITHMETIC = {0, 1, 2}


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


def _bare(value: object) -> bool:
    if type(value) is float:
        return value not in IDENTITIES
    return type(value) is int and value not in ARITHMETIC  # a bool is no number here


def bare_numbers(source: str) -> list[tuple[int, float]]:
    tree = ast.parse(source)
    named = _named(tree)
    return sorted(
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and _bare(n.value) and id(n) not in named
    )


def test_no_bare_number_literal_in_analysis():
    found = {
        path.name: hits for path in sorted(ANALYSIS.glob("*.py")) if (hits := bare_numbers(path.read_text()))
    }
    assert found == {}, f"move these into exporter/policy/thresholds/ or a named constant: {found}"


def test_the_check_sees_a_bare_float_and_accepts_a_named_one():
    assert bare_numbers("def f(x):\n    return x > 0.45\n") == [(2, 0.45)]
    assert bare_numbers("LINE = 0.45  # why\n\ndef f(x):\n    return x > LINE and x < 1.0\n") == []


def test_the_check_sees_a_bare_integer_and_accepts_arithmetic_and_flags():
    assert bare_numbers("def f(t, s):\n    return t >= 80 and s - 3 > 0\n") == [(2, 3), (2, 80)]
    assert bare_numbers("HOT = 80  # why\n\ndef f(t, xs):\n    return t >= HOT and len(xs) // 2 > 1\n") == []
    assert bare_numbers("def f(x=True):\n    return x[0] + x[-1] ** 2\n") == []
