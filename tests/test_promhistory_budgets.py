"""replay --prometheus's budgets against hostile servers and proxies (real HTTP on loopback, a fake
server per case, each case one of the attack report's reproductions): memory by steps whatever the
samples a server sends, the range checked before any sample is asked, one time budget for the run, the
proxy's tunnel under the request's deadline, a malformed proxy variable named. Deadlines are asserted
with a wide margin (the machine may be busy), never to the second."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

import pytest

from exporter.offline.promhistory import client as promclient
from exporter.offline.promhistory import history
from exporter.offline.promhistory.client import PromClient, PromError
from exporter.offline.promhistory.history import Request, discover, read_node
from exporter.offline.promhistory.names import PERCENT
from tests.test_promhistory_hostile import REPO, Fake, _code, _ok, _send

_DCGM = "DCGM_FI_DEV_GPU_UTIL"
_NAME = "gpu-bottleneck-exporter"
_WINDOW = re.compile(r"\[(\d+)(ms|s)\]")
Handler = Callable[[BaseHTTPRequestHandler, str], None]


def _value(t_ms: int) -> float:
    """A sample's value (a utilisation, 0-100), from its time: a step's value says which sample it took."""
    return (t_ms % 100_000) / 1000


@pytest.fixture
def serve() -> Iterator[Callable[[Handler], Fake]]:
    made: list[Fake] = []

    def start(handle: Handler) -> Fake:
        made.append(Fake(handle))
        return made[-1]

    yield start
    for fake in made:
        fake.close()


asked: list[str] = []  # the sample queries the latest server was asked


def _dense(
    spacing_ms: int, nodes: int = 1, index_gpus: int = 1, answer_gpus: int = 1, delay_s: float = 0.0
) -> tuple[Handler, list[int]]:
    """A Prometheus of ``nodes`` nodes whose series index names ``index_gpus`` GPUs each, answering raw
    samples ``spacing_ms`` apart for ``answer_gpus`` GPUs (streamed as they are made, the connection's
    end ending the answer: a dense answer costs the server nothing until it is read). Each answer of
    samples comes ``delay_s`` late, its status line first (a drip just under the deadline). The list
    holds each raw answer's samples (``asked``: every sample query)."""
    served: list[int] = []
    asked.clear()

    def handle(h: BaseHTTPRequestHandler, method: str) -> None:
        split = urlsplit(h.path)
        form = parse_qs(h.form or split.query)
        path = split.path
        if path == "/api/v1/query":
            asked.append(form["query"][0])
        if delay_s and path == "/api/v1/query":
            h.wfile.write(b"HTTP/1.0 200 OK\r\n")
            h.wfile.flush()
            time.sleep(delay_s)
            h.wfile.write(b"Content-Type: application/json\r\n\r\n")
            h.wfile.write(_answer(path, form, nodes, index_gpus, answer_gpus, spacing_ms, served).encode())
            return
        if path == "/api/v1/query":
            _stream(h, form, answer_gpus, spacing_ms, served)
        else:
            _send(h, 200, _answer(path, form, nodes, index_gpus, answer_gpus, spacing_ms, served))

    return handle, served


def _answer(
    path: str,
    form: dict[str, list[str]],
    nodes: int,
    index_gpus: int,
    answer_gpus: int,
    spacing_ms: int,
    served: list[int],
) -> str:
    if path == "/api/v1/series":
        if _DCGM not in form["match[]"][0]:
            return _ok([])
        return _ok(
            [
                {"__name__": _DCGM, "Hostname": f"n{n}", "gpu": str(g)}
                for n in range(nodes)
                for g in range(index_gpus)
            ]
        )
    if path.startswith("/api/v1/label/"):
        return _ok([_DCGM])
    if path == "/api/v1/query":
        return "".join(_matrix(form, answer_gpus, spacing_ms, served))
    return '{"status":"error","error":"not found"}'


def _matrix(form: dict[str, list[str]], gpus: int, spacing_ms: int, served: list[int]):  # type: ignore[no-untyped-def]
    """A range selector's answer, in pieces: every sample ``spacing_ms`` apart in the window."""
    query = form["query"][0]
    at_ms = round(float(form["time"][0]) * 1000)
    size, unit = _WINDOW.search(query).groups()  # type: ignore[union-attr]
    window = int(size) * (1 if unit == "ms" else 1000)
    node = query.split('Hostname="', 1)[1].split('"', 1)[0] if "Hostname" in query else "n0"
    last = at_ms // spacing_ms * spacing_ms
    first = (at_ms - window) // spacing_ms * spacing_ms + spacing_ms
    served.append(gpus * max(0, (last - first) // spacing_ms + 1))
    yield '{"status":"success","data":{"resultType":"matrix","result":['
    for g in range(gpus):
        yield (
            ("," if g else "")
            + json.dumps({"metric": {"Hostname": node, "gpu": str(g)}})[:-1]
            + ',"values":['
        )
        for lo in range(first, last + 1, 10_000 * spacing_ms):
            hi = min(last, lo + 10_000 * spacing_ms - spacing_ms)
            piece = ",".join(f'[{t / 1000:.3f},"{_value(t):g}"]' for t in range(lo, hi + 1, spacing_ms))
            yield ("," if lo != first else "") + piece
        yield "]}"
    yield "]}}"


def _stream(
    h: BaseHTTPRequestHandler, form: dict[str, list[str]], gpus: int, spacing_ms: int, served: list[int]
) -> None:
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.end_headers()  # no length: the answer ends with the connection (HTTP/1.0)
    for piece in _matrix(form, gpus, spacing_ms, served):
        h.wfile.write(piece.encode())


# ---- P1: what a node holds is its steps, whatever the samples' spacing --------------------------------


def _read(url: str, start: float, end: float, step: float) -> tuple[dict[str, history.Gpu], PromClient]:
    request = Request(url, start, end, step=step, export=False, jobs=1)
    c = PromClient(url, timeout_s=30)
    found = discover(c, request)
    gpus, _ = read_node(c, request, found, "n0", step)
    return gpus, c


def test_samples_10_ms_apart_hold_a_value_a_step_and_one_bounded_answer_at_a_time(serve, monkeypatch):
    """An hour of one GPU's samples 10 ms apart (360,000; the report's server sent them 4 ms apart):
    each answer is bounded (RAW_BODY_BYTES, here 256 KiB), the range asked in as many parts as that
    takes, and each answer is placed on the step's clock as it comes. What is held is 241 values (the
    steps, as at 15 s samples), each the latest sample at its step; the memory is one answer's, not
    the hour's samples (about 71 bytes each when they were all kept: 26 MB)."""
    monkeypatch.setattr(promclient, "RAW_BODY_BYTES", 256 * 1024)
    handle, served = _dense(10)
    fake = serve(handle)
    end = float(int(time.time()) // 60 * 60)
    start = end - 3600
    tracemalloc.start()
    try:
        gpus, c = _read(fake.url, start, end, 15.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    util = gpus["0"].values["util"]
    assert sorted(util) == [start + 15 * k for k in range(241)]  # held: the steps, not the samples
    assert all(
        v == pytest.approx(_value(round(t * 1000)) * PERCENT) for t, v in util.items()
    )  # each the latest sample at its step
    assert c.counts.samples >= 360_000  # every sample was read... (# not a duration)
    assert peak < 12 * 2**20, f"{peak / 2**20:.1f} MiB"  # ...a bounded answer at a time (26 MB kept whole)
    assert len(served) >= 360_000 * 28 // (256 * 1024)  # the hour asked in parts that each fit the bound


def test_the_per_node_cap_counts_the_gpu_steps_held_not_those_the_index_named(serve, monkeypatch):
    """The index names one GPU, the answers carry 40: the node is refused as it is read, once what it
    holds passes the cap (one GPU's range alone is well under it)."""
    handle, _ = _dense(15_000, index_gpus=1, answer_gpus=40)
    fake = serve(handle)
    monkeypatch.setattr(history, "MAX_GPU_STEPS", 241 * 10)
    end = float(int(time.time()) // 60 * 60)
    with pytest.raises(PromError, match=r"node n0: 40 GPU\(s\) answered, 9,600 GPU-steps held") as caught:
        _read(fake.url, end - 3600, end, 15.0)
    assert "\n" not in str(caught.value) and "--selector" in str(caught.value)


# ---- P3: every budget checked before the work --------------------------------------------------------


def _cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _code(), "replay", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def test_a_far_future_to_is_refused_before_any_query(serve):
    handle, _ = _dense(15_000)
    fake = serve(handle)
    for to in ("2099-01-01T00:00:00Z", "-1h"):  # a year ahead; a relative time is never ahead
        run = _cli("--prometheus", fake.url, "--from", "-2h", "--to", to)
        if to == "-1h":
            assert run.returncode == 0, run.stderr
            continue
        assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
        assert "--to: '2099-01-01T00:00:00Z' is" in run.stderr and "past now" in run.stderr
        assert fake.seen == []  # refused before asking


@pytest.mark.parametrize(
    ("args", "gpus"),
    [
        (("--from", "-3650d", "--step", "15"), 1),  # the report's 10-year range
        (("--from", "-3650d", "--step", "0.1"), 1),  # ...at the finest step (15,000 queries in 20 s)
        (("--from", "1970-01-01T00:00:00Z", "--step", "300"), 1),
        (("--from", "-3650d"), 8),  # no step: even the coarsest the interval could be is too much
    ],
)
def test_a_range_past_the_cap_is_refused_before_any_sample_query(serve, args, gpus):
    handle, served = _dense(15_000, index_gpus=gpus, answer_gpus=gpus)
    fake = serve(handle)
    run = _cli("--prometheus", fake.url, *args)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert "GPU-steps" in run.stderr and "a coarser --step" in run.stderr
    assert {urlsplit(path).path for _, path, _ in fake.seen} == {"/api/v1/series"}  # the index only
    assert served == []


def test_a_ten_year_range_whose_step_is_probed_reads_no_sample_past_the_probe(serve):
    """One GPU over ten years fits at a 300 s step, so the scrape interval is probed (600 s of samples
    at a few points); at the 15 s it finds, the range is refused before its samples are asked."""
    handle, served = _dense(15_000)
    fake = serve(handle)
    run = _cli("--prometheus", fake.url, "--from", "-3650d")
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert "GPU-steps" in run.stderr
    assert asked and all(q.endswith("[600s]") for q in asked), asked  # the probe's windows only
    assert sum(served) <= 41 * len(asked)


# ---- P4: one time budget for the run ----------------------------------------------------------------


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_server_that_answers_just_under_the_deadline_is_given_up_on_within_the_budget(serve, jobs):
    """Every answer of samples comes in 1.2 s of a 2 s deadline: without a budget twenty nodes' hour
    takes 25 s at --jobs 1; with --max-duration 6 the run ends after the answers 6 s hold (counted), in
    one line naming the flag (the report's fleet of 20 nodes over a week: 35 hours at the 60 s default
    deadline)."""
    handle, _ = _dense(15_000, nodes=20, delay_s=1.2)
    fake = serve(handle)
    run = _cli(
        "--prometheus",
        fake.url,
        "--from",
        "-1h",
        "--jobs",
        jobs,
        "--prometheus-timeout",
        "2",
        "--max-duration",
        "6",
    )
    errors = [line for line in run.stderr.splitlines() if not line.startswith(f"{_NAME}: read ")]
    assert run.returncode == 2 and len(errors) == 1, run.stderr  # one line, and the progress lines
    assert "the run's budget of 6 s (--max-duration) is spent" in errors[0]
    assert len(asked) <= 6 / 1.2 * int(jobs) + 2, asked


def test_the_budget_flag_is_checked():
    for bad in ("0", "-5", "abc", "1e9"):
        run = _cli("--prometheus", "http://127.0.0.1:9", "--max-duration", bad)
        assert run.returncode == 2 and "--max-duration" in run.stderr and run.stderr.count("\n") == 1


# ---- P5: the proxy's tunnel under the request's deadline --------------------------------------------


class DripProxy:
    """A proxy that answers CONNECT's status line, then its headers a byte every half second. It is
    ended before its socket is closed: a thread still waiting in accept() on a closed descriptor would
    take the connections of the next server given that descriptor's number."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)  # the accept loop looks at ``stop`` this often
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._serve, daemon=True)]
        self.threads[0].start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(5)
            drip = threading.Thread(target=self._drip, args=(conn,), daemon=True)
            self.threads.append(drip)
            drip.start()

    def _drip(self, conn: socket.socket) -> None:
        try:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n")
            while not self.stop.is_set():
                conn.sendall(b"X")
                time.sleep(0.5)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=10)
        self.sock.close()


def _no_proxies(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for scheme in ("http", "https", "no", "all"):
        monkeypatch.delenv(f"{scheme}_proxy", raising=False)
        monkeypatch.delenv(f"{scheme.upper()}_PROXY", raising=False)


def test_a_proxy_that_drips_its_connect_reply_is_cut_at_the_deadline(monkeypatch):
    proxy = DripProxy()
    try:
        _no_proxies(monkeypatch)
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        # the deadline's own message, not a read of the drip (its header line alone would take 9 hours)
        with pytest.raises(PromError, match=r"no complete answer within 2 s$"):
            list(PromClient("https://prom.example:9090", timeout_s=2).series("up", 0, 1))
    finally:
        proxy.close()


# ---- P11: a malformed proxy variable is named --------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("HTTP_PROXY", "http://[::1", "Invalid IPv6 URL"),
        ("HTTP_PROXY", "http://u:SECRETPW@127.0.0.1:99999", "Port out of range"),
        ("http_proxy", "u:SECRETPW@127.0.0.1:99999", "Port out of range"),
        ("HTTPS_PROXY", "http://:8080", "no host"),
    ],
)
def test_a_malformed_proxy_variable_is_blamed_on_the_variable(monkeypatch, name, value, why):
    _no_proxies(monkeypatch)
    monkeypatch.setenv(name, value)
    scheme = "https" if "HTTPS" in name else "http"
    with pytest.raises(PromError) as caught:
        PromClient(f"{scheme}://prom.invalid:9090", timeout_s=2)
    message = str(caught.value)
    assert message.startswith(f"{name}: ") and "is not a proxy URL" in message and why in message
    assert "SECRETPW" not in message and "prom.invalid" not in message and "\n" not in message


def test_a_malformed_proxy_variable_through_the_command_is_one_line(serve, monkeypatch):
    import os

    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    run = _cli("--prometheus", "http://prom.invalid:9090", env={**env, "HTTP_PROXY": "http://[::1"})
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert "HTTP_PROXY: 'http://[::1' is not a proxy URL" in run.stderr


def test_placing_an_answer_at_a_time_gives_what_placing_the_range_at_once_gives():
    """Samples split into chunks at random places (each chunk's first sample may repeat the last one
    held, as the chunks' shared edge does): the steps and their values are the whole range's."""
    import random

    rng = random.Random(7)
    for _ in range(200):
        grid = history.Grid.of(1000.0, 1000.0 + rng.choice([60, 600, 3600]), rng.choice([1.0, 15.0, 30.0]))
        times = sorted(rng.sample(range(900_000, 4_700_000, rng.choice([1, 7, 1000, 15_000])), 60))
        values = [float(rng.randrange(100)) for _ in times]
        cuts = sorted(rng.sample(range(1, len(times)), rng.randrange(0, 10)))
        placer, got_t, got_v = history.Placer(grid), [], []
        for lo, hi in zip([0, *cuts], [*cuts, len(times)], strict=True):
            lo = max(0, lo - rng.randrange(2))  # the edge sample asked again
            t, v = placer.add(times[lo:hi], values[lo:hi])
            got_t += t
            got_v += v
        t, v = placer.finish()
        assert (got_t + t, got_v + v) == grid.place(times, values)


def test_this_exporters_counters_read_back_are_thinned_to_two_samples_a_step(serve):
    """A node this exporter watched has its ledger counters read back raw: a dense server's samples
    are kept at most two a step (the latest of each half step; a counter's increases are the same)."""
    handle, _ = _dense(10)
    fake = serve(handle)
    end = float(int(time.time()) // 60 * 60)
    (raw,) = PromClient(fake.url, timeout_s=30).raw("gpu_time_seconds_total", end - 600, end, 600, thin_s=7.5)
    assert len(raw.times_ms) <= 600 / 7.5 + 1 and raw.times_ms[-1] == end * 1000  # not a duration
    assert len({t // 7500 for t in raw.times_ms}) == len(raw.times_ms)  # one a half step
