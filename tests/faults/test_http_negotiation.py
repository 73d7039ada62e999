"""Accept and Accept-Encoding parsed by the RFC 9110 grammar (q-values, parameters, wildcards), and the
bound on repeated log lines. Over real HTTP in test_http_hardening.py."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.serve.http_negotiation import parse_accept, parse_accept_encoding, wants_gzip, wants_openmetrics
from exporter.serve.logsafety import RepeatLimit

PROMETHEUS_3 = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)
PROMETHEUS_2 = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


@pytest.mark.parametrize(
    ("accept", "openmetrics"),
    [
        (None, False),
        ("", False),
        ("*/*", False),
        ("text/plain", False),
        (PROMETHEUS_3, True),
        (PROMETHEUS_2, True),
        ("application/openmetrics-text", True),
        ("application/openmetrics-text; version=1.0.0", True),
        ('application/openmetrics-text; version="1.0.0"; charset=UTF-8', True),
        ("application/openmetrics-text;q=0", False),
        ("application/openmetrics-text; q=0.0, */*", False),
        ("application/openmetrics-text;version=2.0.0", False),  # a version not written here
        ("application/openmetrics-text;version=0.0.1", False),
        ("application/openmetrics-text;version=2.0.0, text/plain;q=0.1", False),
        ("application/openmetrics-text;charset=latin-1", False),
        ("application/openmetrics-text;q=0.5, text/plain;q=0.9", False),
        ("application/openmetrics-text;q=0.9, text/plain;q=0.5", True),
        ("application/*;q=0.9, text/plain;q=0.5", True),
        ("application/*, text/*", False),  # equally weighted, equally specific: the text format
        ("text/plain;q=0, application/openmetrics-text;q=0.001", True),
        ("application/openmetrics-text;q=1.5", False),  # not a qvalue: the element is ignored
        ("application/openmetrics-text;q=abc", False),
        ("application/openmetrics-text;unknown=1", False),
        ("APPLICATION/OpenMetrics-Text", True),
        ("application/openmetrics-text;version=1.0.0;q=0.5;ext=1", True),
        ('text/plain;x="a,b", application/openmetrics-text', True),  # the comma is quoted
        ("garbage, ,,;;, application/openmetrics-text", True),
        ("*/json, application/openmetrics-text;q=0.2", True),
    ],
)
def test_accept_chooses_openmetrics_only_when_it_is_wanted(accept, openmetrics):
    assert wants_openmetrics(accept) is openmetrics


@pytest.mark.parametrize(
    ("header", "gzip"),
    [
        (None, False),
        ("", False),
        ("gzip", True),
        ("GZIP", True),
        ("x-gzip", True),
        ("gzip, deflate, br", True),
        ("gzip;q=0", False),
        ("gzip; q=0.000", False),
        ("deflate, br", False),
        ("*", True),
        ("*;q=0", False),
        ("*, gzip;q=0", False),  # the named coding wins over the wildcard
        ("gzip;q=0.5, identity;q=1", False),
        ("gzip;q=1, identity;q=0.5", True),
        ("gzip;q=0.5", True),  # identity not named: acceptable but not preferred
        ("identity", False),
        ("gzip;q=2", False),  # not a qvalue
        ("gzip;level=9", True),
    ],
)
def test_accept_encoding_honours_q_values(header, gzip):
    assert wants_gzip(header) is gzip


def test_parsed_ranges_keep_their_parameters_and_weights():
    ranges = parse_accept(PROMETHEUS_3)
    assert [(r.type, r.subtype, r.q) for r in ranges][:2] == [
        ("application", "openmetrics-text", 0.6),
        ("application", "openmetrics-text", 0.5),
    ]
    assert ranges[0].params == {"version": "1.0.0", "escaping": "allow-utf-8"}
    assert parse_accept_encoding("gzip;q=0.3, BR, x-gzip;q=0.2") == {"gzip": 0.2, "br": 1.0}


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200), st.text(max_size=100))
def test_no_header_makes_the_parser_fail(accept, encoding):
    assert wants_openmetrics(accept) in (True, False)
    assert wants_gzip(encoding) in (True, False)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(["text/plain", "*/*", "application/*", "text/*;q=0.1", "*/*;q=0.9"])), st.data()
)
def test_a_zero_weight_on_openmetrics_always_means_text(ranges, data):
    """Wildcards, however weighted, never outweigh the explicit refusal (the most specific range wins)."""
    position = data.draw(st.integers(0, len(ranges)))
    header = ", ".join([*ranges[:position], "application/openmetrics-text;q=0", *ranges[position:]])
    assert wants_openmetrics(header) is False


# ---- repeated log lines --------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _record(msg: str, *args: object, name: str = "asyncio") -> logging.LogRecord:
    return logging.LogRecord(name, logging.ERROR, __file__, 1, msg, args, None)


def test_a_flood_of_one_line_is_written_a_few_times_then_counted():
    clock = Clock()
    limit = RepeatLimit(burst=5, interval=60.0, clock=clock)
    passed = [limit.filter(_record("socket.accept() out of system resource")) for _ in range(116_000)]
    assert passed.count(True) == 5
    assert limit.filter(_record("another message"))  # other lines are not held back
    clock.now = 61.0
    record = _record("socket.accept() out of system resource")
    assert limit.filter(record)
    assert (
        record.getMessage()
        == "socket.accept() out of system resource (115995 more like it held back in 60 s)"
    )


def test_lines_differing_only_in_their_arguments_are_one_line():
    limit = RepeatLimit(burst=2, interval=60.0, clock=Clock())
    passed = [limit.filter(_record("closing a connection from %s", f"10.0.0.{i}")) for i in range(50)]
    assert passed.count(True) == 2


def test_the_followed_messages_are_bounded():
    limit = RepeatLimit(burst=1, interval=60.0, clock=Clock())
    for i in range(5000):
        assert limit.filter(_record(f"unique line {i}"))
    assert len(limit._seen) <= 512
