"""The HTTP server against a second round of hostile clients, through the real command: stalled progress
bodies neither outlive their deadline nor starve scrapes, a flood of idle TLS connections stays under
the chart's memory limit, a burst of TLS handshakes is paced while scrapes are answered, a trailing
slash does not redirect to the client's Host, plain HTTP to the TLS port is answered in plain HTTP, and a
pod name with a newline is refused without being echoed."""

from __future__ import annotations

import asyncio
import ctypes
import json
import socket
import ssl
import time
from collections.abc import Iterator

import httpx
import psutil
import pytest

from exporter.policy.thresholds import (
    HTTP_BODY_TIMEOUT,
    HTTP_MAX_BODY_CONNECTIONS,
    HTTP_TLS_HANDSHAKE_TIMEOUT,
)
from exporter.serve.httpguard import FD_RESERVE, IN_FLIGHT, ConnectionGuard, HandshakePacer, Tracked
from exporter.sources.progress import ProgressError, parse_report
from tests.faults.certs import Authority
from tests.faults.http_command import Command
from tests.timing import HANG_GUARD_S

NOFILE = 256  # the push command's descriptor limit: a couple of hundred stalled bodies fill its bound
BOUND = NOFILE - FD_RESERVE - IN_FLIGHT
CHART_MEMORY_LIMIT = 256 * 2**20  # the Helm chart's resources.limits.memory
FLOOD = 1100
try:  # glibc: freed memory can be handed back to the system
    GLIBC = hasattr(ctypes.CDLL("libc.so.6"), "malloc_trim")
except OSError:
    GLIBC = False
STALLED_PUSH = (
    b"POST /v1/progress HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 1000\r\n\r\n{"
)


def _stop(cmd: Command) -> None:
    status = cmd.stop()
    assert status == 0, cmd.text()
    assert "Traceback" not in cmd.text(), cmd.text()


@pytest.fixture(scope="module")
def pushes(tmp_path_factory) -> Iterator[Command]:
    cmd = Command(tmp_path_factory.mktemp("push") / "log.txt", "--progress-api", "on", nofile=NOFILE)
    try:
        cmd.wait_ready()
        yield cmd
    finally:
        _stop(cmd)


@pytest.fixture(scope="module")
def tls(tmp_path_factory) -> Iterator[tuple[Command, ssl.SSLContext]]:
    folder = tmp_path_factory.mktemp("pki")
    ca = Authority(folder, "round2")
    ca.issue("server")
    config = folder / "web.yml"
    config.write_text("tls_server_config:\n  cert_file: server.pem\n  key_file: server-key.pem\n")
    context = ssl.create_default_context(cafile=str(ca.pem))
    cmd = Command(folder / "log.txt", "--web.config.file", str(config), scheme="https")
    try:
        cmd.wait_ready(lambda url: httpx.get(url, verify=context, timeout=2))
        yield cmd, context
    finally:
        _stop(cmd)


def _closed(sock: socket.socket, within: float) -> bool:
    """Whether the server closes ``sock`` within ``within`` seconds (whatever it answers first)."""
    deadline = time.monotonic() + within
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            if sock.recv(4096) == b"":
                return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
    return False


def _self_metric(cmd: Command, name: str, at_least: float, **client: object) -> float:
    """A sample of the server's own metrics, rendered with each collection: wait for it to reach a value."""
    deadline = time.monotonic() + HANG_GUARD_S
    value = 0.0
    while time.monotonic() < deadline:
        for line in httpx.get(cmd.url + "/metrics", timeout=5, **client).text.splitlines():  # type: ignore[arg-type]
            if line.startswith(name + " "):
                value = float(line.split()[-1])
        if value >= at_least:
            break
        time.sleep(0.2)
    return value


# ---- item 1: stalled request bodies ------------------------------------------------------------------


def test_stalled_push_bodies_never_starve_scrapes(pushes):
    """More stalled progress reports than the connection bound: each holds a body slot at most, the
    oldest are closed for newer ones, and every scrape on a fresh connection is answered."""
    socks = []
    try:
        for _ in range(BOUND + 70):
            sock = socket.create_connection(("127.0.0.1", pushes.port), timeout=5)
            sock.sendall(STALLED_PUSH)
            socks.append(sock)
        for _ in range(10):
            with httpx.Client(timeout=5) as client:  # a new connection each time
                response = client.get(pushes.url + "/metrics")
            assert response.status_code == 200 and "gpu_up" in response.text
        still_open = sum(not _closed(sock, 0.05) for sock in socks)
        assert still_open <= HTTP_MAX_BODY_CONNECTIONS.value
    finally:
        for sock in socks:
            sock.close()
    assert "closing the oldest connection still sending a request body" in pushes.text()


def test_a_stalled_body_is_cut_at_its_deadline_and_whole_reports_still_work(pushes):
    """One byte of a 1,000-byte body, then nothing: the connection is closed once the body deadline
    passes (the wait is a hang guard, not a measurement); a whole report is still answered."""
    with socket.create_connection(("127.0.0.1", pushes.port), timeout=5) as sock:
        sock.sendall(STALLED_PUSH)
        assert _closed(sock, HTTP_BODY_TIMEOUT.value * 4)
    name = 'gpu_exporter_http_connections_closed_total{reason="body_timeout"}'
    assert _self_metric(pushes, name, at_least=1) >= 1
    report = {"namespace": "ml", "pod": "llm-train-0", "step": 3}
    assert httpx.post(pushes.url + "/v1/progress", json=report, timeout=5).status_code in (204, 404)


# ---- item 5: names matched whole, input never echoed -------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"), [("pod", "llm-train-0\n"), ("namespace", "ml\n"), ("pod", "llm-train-0\n<b>x</b>")]
)
def test_a_name_ending_in_a_newline_is_refused_without_being_echoed(pushes, field, value):
    report = {"namespace": "ml", "pod": "llm-train-0", "step": 1, field: value}
    with pytest.raises(ProgressError) as refused:
        parse_report(json.dumps(report).encode())
    assert refused.value.status == 400
    response = httpx.post(pushes.url + "/v1/progress", json=report, timeout=5)
    assert response.status_code == 400
    assert value.strip() not in response.text and response.text.count("\n") == 1


# ---- item 3: no redirect built from the Host header --------------------------------------------------


@pytest.mark.parametrize("path", ["/metrics/", "/healthz/", "/v1/progress/"])
def test_a_trailing_slash_does_not_redirect_to_the_clients_host(pushes, path):
    response = httpx.get(pushes.url + path, headers={"Host": "attacker.example"}, timeout=5)
    assert response.status_code == 404
    assert "location" not in response.headers
    assert "attacker" not in response.text and "attacker" not in str(response.headers)


# ---- item 4: plain HTTP to the TLS port --------------------------------------------------------------


def test_plain_http_to_the_tls_port_is_answered_400_in_plain_http(tls):
    cmd, context = tls
    with socket.create_connection(("127.0.0.1", cmd.port), timeout=5) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    assert b"Client sent an HTTP request to an HTTPS server." in answer
    assert httpx.get(cmd.url + "/metrics", verify=context, timeout=5).status_code == 200


# ---- item 2: TLS connection floods -------------------------------------------------------------------


def _rss(pid: int) -> int:
    return psutil.Process(pid).memory_info().rss


def test_a_flood_of_idle_tls_connections_stays_under_the_charts_memory_limit(tls):
    """1,100 idle TLS connections, each past its handshake: the command's RSS stays under the chart's
    256 MiB limit throughout and scrapes go on; once they close, memory goes back to the system."""
    cmd, context = tls
    base = _rss(cmd.proc.pid)
    peak, socks = base, []
    with httpx.Client(verify=context, timeout=5) as scraper:
        assert scraper.get(cmd.url + "/metrics").status_code == 200
        try:
            for n in range(FLOOD):
                raw = socket.create_connection(("127.0.0.1", cmd.port), timeout=5)
                try:
                    socks.append(context.wrap_socket(raw, server_hostname="127.0.0.1"))
                except OSError:
                    raw.close()  # closed by the server while its handshake was queued: the bound at work
                if n % 100 == 0:
                    peak = max(peak, _rss(cmd.proc.pid))
                    assert scraper.get(cmd.url + "/metrics").status_code == 200
            peak = max(peak, _rss(cmd.proc.pid))
            assert scraper.get(cmd.url + "/metrics").status_code == 200
        finally:
            for sock in socks:
                sock.close()
    assert peak < CHART_MEMORY_LIMIT, f"RSS peaked at {peak / 2**20:.0f} MiB"
    if GLIBC:  # the heap's free memory is returned
        deadline, after = time.monotonic() + 10, peak
        while time.monotonic() < deadline and (after := _rss(cmd.proc.pid)) > peak - (peak - base) / 4:
            time.sleep(0.2)
        assert after <= peak - (peak - base) / 4, (base / 2**20, peak / 2**20, after / 2**20)
    assert cmd.proc.poll() is None


def _client_hello(context: ssl.SSLContext) -> bytes:
    """A TLS client's first flight, made in memory so hundreds can be sent at once."""
    tls = context.wrap_bio(ssl.MemoryBIO(), out := ssl.MemoryBIO(), server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return out.read()


def test_a_burst_of_handshakes_is_paced_while_scrapes_are_answered(tls):
    """Hundreds of client hellos land at once, and some clients stall inside theirs: a scrape on a
    kept-alive connection and one on a new connection are answered within Prometheus' 10 s scrape
    timeout, and every complete hello is still answered before the handshake deadline."""
    cmd, context = tls
    hello = _client_hello(context)
    with httpx.Client(verify=context, timeout=10) as kept:
        assert kept.get(cmd.url + "/metrics").status_code == 200  # the connection is established
        socks = [socket.create_connection(("127.0.0.1", cmd.port), timeout=5) for _ in range(400)]
        try:
            for n, sock in enumerate(socks):
                sock.sendall(hello if n % 4 else hello[:20])  # every fourth stalls inside its hello
            assert kept.get(cmd.url + "/metrics").status_code == 200
            assert httpx.get(cmd.url + "/metrics", verify=context, timeout=10).status_code == 200
            answered = 0
            for sock in socks[1::4] + socks[2::4] + socks[3::4]:
                sock.settimeout(HTTP_TLS_HANDSHAKE_TIMEOUT.value)
                answered += len(sock.recv(1)) == 1  # the server's hello: its step ran
            assert answered == 300
        finally:
            for sock in socks:
                sock.close()
    assert cmd.proc.poll() is None


class _Handshake:
    def __init__(self, steps: list[int], n: int) -> None:
        self.steps, self.n = steps, n

    def step(self) -> None:
        self.steps.append(self.n)


def test_handshake_steps_past_the_turns_budget_wait_for_later_turns_newest_first():
    async def run() -> None:
        pacer, steps = HandshakePacer(per_turn=2), []
        waiting = [_Handshake(steps, n) for n in range(6)]
        assert pacer.take() and pacer.take()
        assert not pacer.take()  # the third step of this turn
        for handshake in waiting[:5]:
            pacer.wait(handshake)  # type: ignore[arg-type]
        pacer.forget(waiting[3])  # closed while it waited
        await asyncio.sleep(0)
        assert steps == [4, 2] and not pacer.take()  # the waiting go first, and fill the turn
        pacer.wait(waiting[5])  # type: ignore[arg-type]  # a client that just connected
        await asyncio.sleep(0)
        assert steps == [4, 2, 5, 1]
        await asyncio.sleep(0)
        assert steps == [4, 2, 5, 1, 0] and pacer.waiting == 0 and pacer.deferred == 6
        await asyncio.sleep(0)
        assert pacer.take() and pacer.take() and not pacer.take()  # a new turn, a new budget

    asyncio.run(run())


# ---- the guard's bounds, directly ----------------------------------------------------------------------


class _Transport:
    def __init__(self) -> None:
        self.closed = False

    def abort(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


def test_the_tls_bound_and_the_body_slots_close_the_oldest_first():
    async def run() -> None:
        guard = ConnectionGuard(max_connections=10, max_tls=2, max_bodies=2)
        plain, first, second, third = (Tracked() for _ in range(4))
        transports = [_Transport() for _ in range(4)]
        assert guard.admit(plain, transports[0])
        assert guard.admit(first, transports[1], tls=True) and guard.admit(second, transports[2], tls=True)
        assert guard.admit(third, transports[3], tls=True)  # past the TLS bound: the oldest TLS one goes
        assert [t.closed for t in transports] == [False, True, False, False] and guard.open == 3
        senders = [Tracked() for _ in range(3)]
        for tracked in senders:
            assert guard.admit(tracked, _Transport())
            guard.receiving(tracked)
        assert senders[0].transport.is_closing() and not senders[1].transport.is_closing()  # type: ignore[union-attr]
        guard.busy(senders[1])  # its body arrived: the slot is free again
        extra = Tracked()
        assert guard.admit(extra, _Transport())
        guard.receiving(extra)
        assert not senders[2].transport.is_closing()  # type: ignore[union-attr]
        assert guard.stats.evicted == 2

    asyncio.run(run())
