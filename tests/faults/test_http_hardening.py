"""The HTTP server under hostile clients, through the real command: half-open and slow connections
neither exhaust file descriptors nor block scrapes, repeated log lines are bounded, HEAD answers as GET,
and content negotiation follows the q-values."""

from __future__ import annotations

import collections
import gzip
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from exporter.policy.thresholds import HTTP_HEADER_TIMEOUT, LOG_REPEAT_BURST
from exporter.serve.httpguard import FD_RESERVE, IN_FLIGHT
from tests.faults.http_command import Command
from tests.timing import HANG_GUARD_S

NOFILE = 256  # the command's descriptor limit: 300 connections would exhaust it without a bound
BOUND = NOFILE - FD_RESERVE - IN_FLIGHT


@pytest.fixture(scope="module")
def command(tmp_path_factory) -> Iterator[Command]:
    cmd = Command(tmp_path_factory.mktemp("http") / "log.txt", nofile=NOFILE)
    try:
        cmd.wait_ready()
        yield cmd
    finally:
        status = cmd.stop()
        assert status == 0, cmd.text()
        assert "Traceback" not in cmd.text(), cmd.text()


def _connections(port: int, count: int, send: bytes = b"") -> list[socket.socket]:
    socks = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        if send:
            sock.sendall(send)
        socks.append(sock)
    return socks


def _scrape(url: str) -> httpx.Response:
    with httpx.Client(timeout=5) as client:  # a new connection each time, as a scraper after a restart
        return client.get(url + "/metrics")


def _self_metric(command: Command, name: str, at_least: float = 1.0) -> float:
    """A sample of the server's own metrics; they are rendered with each collection, so wait for one."""
    deadline = time.monotonic() + HANG_GUARD_S
    value = 0.0
    while time.monotonic() < deadline:
        for line in _scrape(command.url).text.splitlines():
            if line.startswith(name + " "):
                value = float(line.split()[-1])
        if value >= at_least:
            break
        time.sleep(0.2)
    return value


def _repeats(log: str) -> int:
    """How often the most repeated message (timestamp stripped) was written."""
    messages = [re.sub(r"^\S+ \S+ ", "", line) for line in log.splitlines()]
    messages = [re.sub(r"\d+ are open", "N are open", m) for m in messages]
    return max(collections.Counter(messages).values(), default=0)


def test_half_open_connections_neither_exhaust_descriptors_nor_block_scrapes(command):
    """300 connections that never send a byte, with 256 descriptors: the oldest waiting ones are closed
    for new ones, every scrape is answered and the log says so a few times, not 116,000."""
    socks = _connections(command.port, 300)
    try:
        for _ in range(20):
            response = _scrape(command.url)
            assert response.status_code == 200 and "gpu_up" in response.text
        assert command.fds() < NOFILE
    finally:
        for sock in socks:
            sock.close()
    log = command.text()
    assert "closing the oldest connection without a request" in log
    assert _self_metric(command, 'gpu_exporter_http_connections_closed_total{reason="evicted"}') > 0
    assert "out of system resource" not in log
    assert _repeats(log) <= LOG_REPEAT_BURST.value


def test_slow_clients_are_cut_at_the_header_deadline(command):
    """Slowloris: request lines sent, headers never finished. Scrapes go on; each slow connection is
    closed once the header deadline passes (the wait below is a hang guard, not a measurement)."""
    socks = _connections(command.port, 100, b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    try:
        assert _scrape(command.url).status_code == 200
        closed = 0
        for sock in socks:
            sock.settimeout(HTTP_HEADER_TIMEOUT.value * 4)
            try:
                closed += sock.recv(1024) == b""
            except ConnectionResetError:
                closed += 1
        assert closed == len(socks)
        name = 'gpu_exporter_http_connections_closed_total{reason="header_timeout"}'
        assert _self_metric(command, name) >= len(socks)
    finally:
        for sock in socks:
            sock.close()
    assert _scrape(command.url).status_code == 200


def test_a_flood_of_connections_past_the_bound_keeps_kept_alive_scrapes_served(command):
    """A scraper on a kept-alive connection is busy or idle, never the oldest waiting one."""
    with httpx.Client(timeout=5) as scraper:
        assert scraper.get(command.url + "/metrics").status_code == 200
        socks = _connections(command.port, BOUND + 50)
        try:
            for _ in range(5):
                assert scraper.get(command.url + "/metrics").status_code == 200
        finally:
            for sock in socks:
                sock.close()


def test_head_answers_as_get_without_a_body(command):
    get = httpx.get(command.url + "/metrics", timeout=5)
    head = httpx.head(command.url + "/metrics", timeout=5)
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-type"] == get.headers["content-type"]
    assert int(head.headers["content-length"]) > 0
    for path in ("/healthz", "/readyz", "/"):
        assert httpx.head(command.url + path, timeout=5).status_code == 200, path


@pytest.mark.parametrize(
    ("headers", "openmetrics", "gzipped"),
    [
        ({"Accept-Encoding": "gzip;q=0"}, False, False),
        ({"Accept-Encoding": "gzip"}, False, True),
        ({"Accept-Encoding": "br, gzip;q=0.5, identity;q=1"}, False, False),
        ({"Accept": "application/openmetrics-text;q=0"}, False, False),
        ({"Accept": "application/openmetrics-text;version=2.0.0"}, False, False),
        ({"Accept": "application/openmetrics-text;version=1.0.0;q=0.6,text/plain;q=0.3"}, True, False),
        ({"Accept": "application/openmetrics-text", "Accept-Encoding": "gzip"}, True, True),
    ],
)
def test_content_negotiation_over_http(command, headers, openmetrics, gzipped):
    with httpx.Client(timeout=5) as client:
        headers = {"Accept-Encoding": "identity", **headers}  # httpx would ask for gzip itself
        request = client.build_request("GET", command.url + "/metrics", headers=headers)
        response = client.send(request, stream=True)
        raw = b"".join(response.iter_raw())
    assert response.status_code == 200
    assert (response.headers.get("content-encoding") == "gzip") is gzipped
    body = (gzip.decompress(raw) if gzipped else raw).decode()
    kind = "application/openmetrics-text" if openmetrics else "text/plain"
    assert response.headers["content-type"].startswith(kind)
    assert body.rstrip().endswith("# EOF") is openmetrics
    assert "Accept-Encoding" in response.headers["vary"]


def test_an_oversized_request_header_is_refused(command):
    response = httpx.get(command.url + "/metrics", headers={"X-Big": "a" * 20000}, timeout=5)
    assert response.status_code in (400, 431)
    assert _scrape(command.url).status_code == 200
    assert _self_metric(command, 'gpu_exporter_http_connections_closed_total{reason="header_too_large"}') == 1


def test_the_log_of_a_fresh_command_has_no_repeated_floods(tmp_path: Path):
    """A command whose descriptors run out: a few lines, then counts."""
    cmd = Command(tmp_path / "log.txt", nofile=96)
    try:
        cmd.wait_ready()
        socks = _connections(cmd.port, 400)
        for sock in socks:
            sock.close()
        assert _scrape(cmd.url).status_code == 200
    finally:
        assert cmd.stop() == 0
    assert _repeats(cmd.text()) <= LOG_REPEAT_BURST.value
