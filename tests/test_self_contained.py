"""The project runs and tests from its own checkout: nothing in the code, tests, benches, scripts or the
Makefile reaches for files beside or above the repository."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO

SCANNED = ("tests", "bench", "scripts", "exporter")
OUTSIDE = re.compile(
    r"\.\./+shared"  # the shared folder beside the checkout
    r"|/work/"  # this machine's absolute paths
    r"|\b(?:REPO|ROOT)\.parent\b"  # the folder above the repository
    r"|/\s*[\"']shared[\"']"  # a path joined with "shared"
    r"|\bSHARED\b|GBE_SHARED_DIR"  # the old conftest constant for it
)
SKIPPED_SUFFIXES = {".pyc", ".so", ".gz", ".png"}


def _texts() -> list[Path]:
    this = Path(__file__).resolve()
    files = [
        p
        for folder in SCANNED
        for p in sorted((REPO / folder).rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in SKIPPED_SUFFIXES
    ]
    return [p for p in files if p.resolve() != this]


def _hits(name: str, text: str) -> list[str]:
    return [
        f"{name}:{i}: {line.strip()}" for i, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)
    ]


def test_the_pattern_catches_paths_outside_the_repository():
    for line in (
        'SHARED = Path(os.environ.get("GBE_SHARED_DIR", REPO.parent / "shared"))',
        'folder = REPO.parent / "shared" / "traces"',
        "python bench/detection.py ../shared/traces",
        'open("/work/shared/METRICS.md")',
        'TRACES = sorted((SHARED / "traces").glob("*.csv"))',
    ):
        assert OUTSIDE.search(line), line
    for line in ('EXAMPLES = REPO / "examples" / "traces"', "[runbook](../../docs/runbooks/GpuCommHang.md)"):
        assert not OUTSIDE.search(line), line


def test_no_code_test_bench_or_script_reads_outside_the_repository():
    hits = []
    for path in _texts():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        hits += _hits(str(path.relative_to(REPO)), text)
    assert hits == []


def test_the_makefile_reads_nothing_outside_the_repository():
    assert _hits("Makefile", (REPO / "Makefile").read_text()) == []
