"""The pod-log flags' mistakes: one line naming the flag or variable, exit status 2, before anything
starts."""

from __future__ import annotations

import pytest

from tests.test_cli import _one_line_error, _run


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (None, "cannot read"),
        ('[{"regex": "(x"}]', "bad regex"),
        ('[{"regex": "x", "step": "n"}]', "no group named 'n'"),
        ("- regex: x", "not JSON"),
        # backtracking that one log line could make take minutes: refused before anything starts
        ('[{"name": "nested", "regex": "(a+)+$"}]', "nested: nested quantifiers"),
        (
            r'[{"name": "blanks", "regex": "step\\s*\\s*\\s*(?P<n>\\d+)", "step": "n"}]',
            "blanks: quantifiers that can match the same run of characters",
        ),
        (  # after a literal and a digit, the runs of blanks a tenant's line may hold
            r'[{"name": "mine", "regex": "step\\s*(?P<step>\\d+)\\s*.*\\s*loss", "step": "step"}]',
            "mine: quantifiers that can match the same run of characters",
        ),
        ('[{"name": "all", "regex": ".*"}]', "all: matches an empty line"),
        # a valid file past the bound: said to be too large, not misread as broken JSON
        pytest.param(
            '[{"regex": "x"}' + ', {"regex": "x"}' * 80_000 + "]", "too large (over 1 MiB)", id="too-large"
        ),
    ],
)
def test_bad_patterns_file(tmp_path, content, words):
    path = tmp_path / "patterns.json"
    if content is not None:
        path.write_text(content)
    result = _run("--simulate", "healthy", "--pod-logs", "on", "--log-patterns", str(path), "--port", "1")
    _one_line_error(result, 2, "--log-patterns", words)


def test_bad_switch_from_the_environment():
    result = _run("--simulate", "healthy", env={"GBE_PROGRESS_API": "maybe"})
    _one_line_error(result, 2, "GBE_PROGRESS_API", "on or off")
