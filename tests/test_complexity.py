"""No function of the project above radon's grade D: cyclomatic complexity at most 30.

A function past that has more paths than a reviewer can hold at once, and more than its tests walk; it
is split into small named steps instead (see docs/development.md). Every Python file of the code trees
counts, methods, nested functions and benches included: nothing is excluded.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from radon.complexity import cc_rank
from radon.visitors import Class, ComplexityVisitor, Function

REPO = Path(__file__).resolve().parents[1]
TREES = ("exporter", "scripts", "devtools", "bench")
MAX_COMPLEXITY = 30  # the top of grade D; grade E starts at 31


def _blocks(blocks: list, prefix: str = "") -> Iterator[tuple[str, Function]]:
    """Every function in ``blocks`` by its dotted name: methods of classes, nested classes and closures."""
    for block in blocks:
        if isinstance(block, Class):
            yield from _blocks([*block.methods, *block.inner_classes], f"{prefix}{block.name}.")
        else:
            yield f"{prefix}{block.name}", block
            yield from _blocks(block.closures, f"{prefix}{block.name}.")


def functions() -> Iterator[tuple[str, Function]]:
    """(path:line name, block) of every function in the code trees."""
    for tree in TREES:
        for path in sorted((REPO / tree).rglob("*.py")):
            visitor = ComplexityVisitor.from_code(path.read_text(encoding="utf-8"))
            for name, block in _blocks([*visitor.functions, *visitor.classes]):
                yield f"{path.relative_to(REPO)}:{block.lineno} {name}", block


def test_the_scan_sees_every_tree():
    found = {where.split("/", 1)[0] for where, _ in functions()}
    assert found == set(TREES)


def test_no_function_is_above_grade_d():
    over = [
        f"{where}: {block.complexity} (grade {cc_rank(block.complexity)})"
        for where, block in functions()
        if block.complexity > MAX_COMPLEXITY
    ]
    assert not over, (
        f"cyclomatic complexity above {MAX_COMPLEXITY} (radon grade E or F); split these into small "
        "named functions:\n  " + "\n  ".join(over)
    )
