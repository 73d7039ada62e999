"""Settings that cannot work are refused before anything starts: non-finite or out-of-range durations,
from a flag, a variable or code, are one line naming their origin and exit status 2."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest

from exporter.config.settings import DURATION_RANGES, Settings, SettingsError
from tests.conftest import REPO

FLAGS = ("--interval", "--window", "--collect-timeout", "--slow-interval", "--p2p-interval")


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "exporter", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=60,
    )


def _one_line(result: subprocess.CompletedProcess, *words: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-bottleneck-exporter: "), result.stderr
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize("flag", FLAGS)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN"])
def test_a_non_finite_duration_flag_is_refused(flag, value):
    _one_line(_run("--simulate", "healthy", f"{flag}={value}"), f"{flag}: must be a finite number")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--interval", "1e9"], "--interval: interval must be at least 0.05 and at most 3600 seconds"),
        (["--interval", "0.001"], "--interval: interval must be at least 0.05"),
        (["--window", "1e300"], "--window: window must be at least 0.05 and at most 3600 seconds"),
        (["--collect-timeout", "0"], "--collect-timeout: collect-timeout must be positive"),
        (
            ["--collect-timeout", "1e6"],
            "--collect-timeout: collect-timeout must be more than 0 and at most 600",
        ),
        (["--p2p-interval", "1e12"], "--p2p-interval: p2p-interval must be more than 0 and at most 86400"),
        (["--pod-resources-interval", "0"], "--pod-resources-interval: pod-resources-interval must be more"),
    ],
)
def test_an_out_of_range_duration_flag_is_refused(args, said):
    _one_line(_run("--simulate", "healthy", *args), said)


def test_a_variable_is_named_when_its_value_is_refused():
    _one_line(_run("--simulate", "healthy", env={"GBE_WINDOW": "nan"}), "GBE_WINDOW: must be a finite number")
    _one_line(_run("--simulate", "healthy", env={"GBE_INTERVAL": "86400"}), "GBE_INTERVAL: interval must be")


def test_record_refuses_them_too(tmp_path):
    _one_line(
        _run("record", "-o", str(tmp_path / "x.csv"), "--interval", "nan"), "--interval: must be a finite"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", sorted(DURATION_RANGES))
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 1e12, -1.0])
def test_settings_built_in_code_refuse_them(name, value):
    with pytest.raises(SettingsError) as caught:
        Settings(**{name: value})
    assert name in [field for field, _ in caught.value.problems]


@pytest.mark.parametrize("name", sorted(DURATION_RANGES))
def test_every_bound_itself_is_accepted_where_it_is_inclusive(name):
    low, low_allowed, high, _ = DURATION_RANGES[name]
    window = {"window_s": max(high, 1.0)} if name == "interval_s" else {}
    Settings(**{name: high, **window})
    if low_allowed:
        Settings(**{name: low, **({"window_s": 1.0} if name != "window_s" else {"interval_s": low})})


@pytest.mark.parametrize("gpus", ["0", "100000"])
def test_replay_gpus_out_of_range_is_refused(gpus):
    _one_line(
        _run("replay", str(REPO / "pyproject.toml"), "--gpus", gpus), f"--gpus must be 1-1024, not {gpus}"
    )
