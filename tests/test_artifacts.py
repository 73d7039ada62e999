"""Generated files match what the code generates now."""

from __future__ import annotations

from devtools.artifacts import ARTIFACTS, generate, stale
from tests.conftest import REPO


def test_no_generated_file_is_stale():
    assert stale(REPO) == [], "run `make artifacts` and commit the result"


def test_generation_is_deterministic(tmp_path):
    assert sorted(generate(tmp_path)) == sorted(ARTIFACTS)
    assert generate(tmp_path) == []  # a second run changes nothing
