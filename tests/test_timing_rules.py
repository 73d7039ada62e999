"""No test bounds a duration by a fixed number of seconds: on a busy machine any such figure fails some day.

A duration is bounded as a multiple of a baseline measured beside it (tests/timing.py), or the test proves
what it means without a clock (a call that returns while the test still holds what it would block on);
speed itself is measured in bench/. Waiting for something to happen is no claim on speed: a wait's
deadline is a guard against a hang, and compares two clock readings, never a reading and a figure."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

CLOCKS = {"monotonic", "perf_counter", "time", "monotonic_ns", "perf_counter_ns", "process_time"}
TIMERS = {"timed", "_timed_login"}  # tests/timing.py's and the tests' own: they return (value, seconds)
NOT_A_DURATION = "# not a duration"  # a line comparing a clock reading with a time, not a duration


def _clock_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in CLOCKS
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "time"
    )


def _timer_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in TIMERS


def _names(target: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


def _timed_names(fn: ast.AST) -> set[str]:
    """Names that hold a clock reading or a duration in this function (assigned from one, twice over)."""
    found: set[str] = set()
    for _ in range(2):
        for node in ast.walk(fn):
            if not isinstance(node, ast.Assign):
                continue
            value = node.value
            if any(_clock_call(n) or _timer_call(n) for n in ast.walk(value)) or (_names(value) & found):
                for target in node.targets:
                    found |= _names(target)
    return found


def _figure(node: ast.AST) -> bool:
    """A fixed number: literals, and names in capitals (module constants), with arithmetic between."""
    leaves = [n for n in ast.walk(node) if isinstance(n, ast.Name | ast.Constant | ast.Attribute | ast.Call)]
    return all(
        (isinstance(n, ast.Constant) and isinstance(n.value, int | float))
        or (isinstance(n, ast.Name) and n.id.isupper())
        for n in leaves
    )


def absolute_bounds(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    found = []
    for fn in ast.walk(ast.parse(text)):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        timed = _timed_names(fn)
        for node in ast.walk(fn):
            if not isinstance(node, ast.Assert) or NOT_A_DURATION in lines[node.lineno - 1]:
                continue
            for cmp in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
                sides = [cmp.left, *cmp.comparators]
                if not any(isinstance(op, ast.Lt | ast.LtE | ast.Gt | ast.GtE) for op in cmp.ops):
                    continue
                clocked = [
                    s for s in sides if any(_clock_call(n) for n in ast.walk(s)) or (_names(s) & timed)
                ]
                if clocked and any(_figure(s) for s in sides if s not in clocked):
                    where = path.relative_to(REPO) if path.is_relative_to(REPO) else path.name
                    found.append(f"{where}:{node.lineno}: {ast.unparse(cmp)}")
    return found


def test_no_test_bounds_a_duration_by_a_fixed_figure():
    found = [hit for path in sorted((REPO / "tests").rglob("*.py")) for hit in absolute_bounds(path)]
    assert not found, "durations bounded by a fixed number of seconds (see tests/timing.py):\n" + "\n".join(
        found
    )


def test_the_rule_sees_the_shapes_it_forbids(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import time\n"
        "def test_a():\n"
        "    started = time.monotonic()\n"
        "    work()\n"
        "    assert time.monotonic() - started < 2.0\n"
        "def test_b():\n"
        "    _, took = timed(work)\n"
        "    assert took < 3 * QUICK_S\n"
        "def test_c():\n"
        "    deadline = time.monotonic() + 60\n"
        "    assert time.monotonic() < deadline\n"
        "    _, took = timed(work)\n"
        "    assert_within(took, baseline, 10, 'work')\n"
    )
    hits = absolute_bounds(sample)
    assert [h.split(":")[1] for h in hits] == ["5", "8"], hits
