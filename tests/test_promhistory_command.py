"""replay --prometheus's flags: --jobs read into the request, a wrong one refused in one line."""

from __future__ import annotations

import argparse

import pytest

from exporter.offline.promhistory.client import PromError
from exporter.offline.promhistory.command import add_flags, request_from
from exporter.offline.promhistory.history import cores


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_flags(parser)
    return parser.parse_args(["--prometheus", "http://prometheus:9090", *argv])


def test_jobs_default_to_the_cores_and_take_a_number():
    assert request_from(_args(), now=1e9).jobs is None  # None: one per core, when replay starts
    assert request_from(_args("--jobs", "3"), now=1e9).jobs == 3
    assert cores() >= 1


def test_no_jobs_is_refused_naming_the_flag():
    with pytest.raises(PromError, match="--jobs"):
        request_from(_args("--jobs", "0"), now=1e9)
