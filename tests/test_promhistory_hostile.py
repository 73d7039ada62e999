"""replay --prometheus against servers, proxies and query frontends the user does not control: a small
fake server per case (real HTTP on loopback), each case one of the attack report's reproductions.
Deadlines are asserted with a wide margin (the machine may be busy), never to the second."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from exporter.offline.promhistory import client as promclient
from exporter.offline.promhistory.client import Auth, PromClient, PromError
from tests.conftest import default_signals

REPO = Path(__file__).resolve().parents[1]


def _series_list(self: PromClient, match: str, start: float, end: float) -> list[dict[str, str]]:
    return list(self.series(match, start, end))


PromClient.series_list = _series_list  # type: ignore[attr-defined]

Handler = Callable[[BaseHTTPRequestHandler, str], None]  # (request, method) -> answers it


class Fake:
    """A loopback HTTP server answering every request with ``handle``; it records each request's path
    and Authorization header."""

    def __init__(self, handle: Handler) -> None:
        seen = self.seen = []  # (method, path, Authorization)

        class H(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _any(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.form = self.rfile.read(length).decode() if length else ""
                seen.append((method, self.path, self.headers.get("Authorization")))
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    handle(self, method)

            def do_GET(self) -> None:
                self._any("GET")

            def do_POST(self) -> None:
                self._any("POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[[Handler], Fake]]:
    made: list[Fake] = []

    def start(handle: Handler) -> Fake:
        made.append(Fake(handle))
        return made[-1]

    yield start
    for fake in made:
        fake.close()


@pytest.fixture(params=["whole", "streamed"])
def parser(request, monkeypatch) -> str:
    """Each answer read both ways: parsed whole (a small one) and element by element (a large one)."""
    if request.param == "streamed":
        monkeypatch.setattr(promclient, "WHOLE_PARSE_BYTES", 0)
    return request.param


def _send(h: BaseHTTPRequestHandler, status: int, body: bytes | str, **headers: str) -> None:
    data = body.encode() if isinstance(body, str) else body
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(data)))
    for name, value in headers.items():
        h.send_header(name.replace("_", "-"), value)
    h.end_headers()
    h.wfile.write(data)


def _ok(data: object) -> str:
    return json.dumps({"status": "success", "data": data})


# ---- N2: redirects never carry credentials ----------------------------------------------------------


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("auth", [Auth(token="s3cr3t-token"), Auth(user="u", password="pw-BBBB")])
def test_a_redirect_is_refused_in_one_line_and_the_credentials_go_nowhere(serve, status, auth):
    other = serve(lambda h, m: _send(h, 200, _ok([])))
    first = serve(lambda h, m: _send(h, status, "", Location=other.url + h.path))
    with pytest.raises(PromError) as caught:
        PromClient(first.url, auth, timeout_s=10).series_list("up", 0, 1)
    message = str(caught.value)
    assert f"HTTP {status}" in message and other.url in message and "\n" not in message
    assert other.seen == []  # never asked, so never given the token
    assert first.seen[0][2] == auth.headers()["Authorization"]  # the server named was asked, with it


# ---- N3: one deadline for the whole request ---------------------------------------------------------


def _drip_body(h: BaseHTTPRequestHandler, method: str) -> None:
    h.send_response(200)
    h.send_header("Content-Length", "100000")
    h.end_headers()
    for _ in range(300):
        h.wfile.write(b" ")
        h.wfile.flush()
        time.sleep(0.5)


def _drip_headers(h: BaseHTTPRequestHandler, method: str) -> None:
    h.wfile.write(b"HTTP/1.1 200 OK\r\n")
    for i in range(300):
        h.wfile.write(f"X-{i}: y\r\n".encode())
        h.wfile.flush()
        time.sleep(0.5)


@pytest.mark.parametrize("drip", [_drip_body, _drip_headers])
def test_a_dripping_server_is_cut_at_the_timeout_whatever_it_keeps_sending(serve, drip):
    fake = serve(drip)
    # only the deadline says this: the drip would end after 150 s with an answer that is not JSON
    with pytest.raises(PromError, match=r"no complete answer within 2 s$"):
        PromClient(fake.url, timeout_s=2).series_list("up", 0, 1)


# ---- N4: bounded answers, read element by element ---------------------------------------------------


def test_an_answer_past_the_bound_is_asked_again_in_halves_then_refused(serve, monkeypatch):
    monkeypatch.setattr(promclient, "RAW_BODY_BYTES", 4096)  # raw samples' answers have their own bound
    spans = []

    def big(h: BaseHTTPRequestHandler, method: str) -> None:
        spans.append(h.form)
        _send(h, 200, _ok({"resultType": "matrix", "result": []}) + " " * 5000)

    fake = serve(big)
    with pytest.raises(PromError, match=r"exceeds 0\.00390625 MiB"):
        PromClient(fake.url, timeout_s=10).raw("up", 0, 86400, 86400)
    assert len(spans) > 2  # halved down to the smallest chunk before giving up


def test_a_large_series_index_is_read_without_a_whole_document_parse(serve, monkeypatch):
    """Each label set is parsed as it is reached and the caller keeps what it needs of it (a node's
    name): the memory is the body's few copies, not the 17-40 times of a whole-document parse."""
    sets = [{"Hostname": f"n{i // 8}", "gpu": str(i % 8)} for i in range(100_000)]
    body = json.dumps({"status": "success", "data": sets}, separators=(",", ":"))
    assert len(body) > promclient.WHOLE_PARSE_BYTES / 2
    monkeypatch.setattr(promclient, "WHOLE_PARSE_BYTES", len(body) - 1)  # read element by element
    fake = serve(lambda h, m: _send(h, 200, body))
    c = PromClient(fake.url, timeout_s=30)
    tracemalloc.start()
    try:
        nodes = {labels["Hostname"] for labels in c.series("up", 0, 1)}
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(nodes) == 12_500
    tracemalloc.start()
    try:
        json.loads(body)
        _, whole = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    print(f"streamed peak {peak / len(body):.1f}x the body, a whole parse {whole / len(body):.1f}x")
    assert peak < 5 * len(body) < whole


# ---- N6: busy answers retried, a failing node reported, the others kept -----------------------------


def test_a_busy_answer_is_asked_again_honouring_retry_after(serve, monkeypatch, parser):
    monkeypatch.setattr(promclient, "RETRY_FIRST_WAIT_S", 0.01)
    answers = iter([(503, "0"), (429, "0"), (502, ""), (504, "0")])

    def flaky(h: BaseHTTPRequestHandler, method: str) -> None:
        status, after = next(answers, (200, ""))
        if status == 200:
            _send(h, 200, _ok([{"a": "b"}]))
        else:
            _send(
                h, status, '{"status":"error","error":"storm"}', **({"Retry-After": after} if after else {})
            )

    fake = serve(flaky)
    assert PromClient(fake.url, timeout_s=10).series_list("up", 0, 1) == [{"a": "b"}]
    assert len(fake.seen) == 5


def test_a_server_busy_for_good_is_one_line_after_a_bounded_number_of_tries(serve, monkeypatch):
    monkeypatch.setattr(promclient, "RETRY_FIRST_WAIT_S", 0.01)
    fake = serve(lambda h, m: _send(h, 503, '{"status":"error","error":"storm"}', Retry_After="0"))
    with pytest.raises(PromError, match=r"HTTP 503 \(Service Unavailable\) \(after 5 tries\): storm$"):
        PromClient(fake.url, timeout_s=10).series_list("up", 0, 1)
    assert len(fake.seen) == promclient.RETRIES + 1
    assert promclient._retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 1.0) == 0.0  # a date gone by
    assert promclient._retry_after("soon", 1.5) == 1.5


# ---- N8: every wrong-shaped answer is one line ------------------------------------------------------

_QUERY_SHAPES = [
    {"result": {"a": 1}},
    {"result": "abc"},
    {"result": ["abc"]},
    {"result": [{"metric": {}, "values": {"a": 1}}]},
    {"result": [{"metric": {}, "values": [[1]]}]},
    {"result": [{"metric": {}, "values": [[1, "2", 3]]}]},
    {"result": [{"metric": {}, "values": [[1, "abc"]]}]},
    {"result": [{"metric": {}, "values": [[1, "0x10"]]}]},
    {"result": [{"metric": {}, "values": [["1", "2"]]}]},
    {"result": [{"metric": {}, "values": [[None, "2"]]}]},
    {"result": [{"metric": [], "values": [[1, "2"]]}]},
    {"result": [{"metric": None, "values": [[1, "2"]]}]},
    {"result": [{"metric": {"a": {"b": 1}}, "values": [[1, "2"]]}]},
]


@pytest.mark.parametrize("data", _QUERY_SHAPES)
def test_a_wrong_shaped_query_answer_is_one_line(serve, data, parser):
    fake = serve(lambda h, m: _send(h, 200, _ok(data)))
    c = PromClient(fake.url, timeout_s=10)
    for read in (lambda: c.raw("up", 0, 60, 60), lambda: c.query_range("up", 0, 60, 15)):
        with pytest.raises(PromError, match=r"wrong shape|did not answer JSON") as caught:
            read()
        assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "body",
    [
        '{"status":"success","data":{"result":[{"metric":{},"values":[[Infinity,"1"]]}]}}',
        '{"status":"success","data":{"result":[{"metric":{},"values":[[NaN,"1"]]}]}}',
        "[" * 100_000,
        '{"status":"success","data":' + "[" * 100_000,
        '{"status":"success","data":{"result":[]}} trailing',
    ],
)
def test_a_broken_body_is_one_line(serve, body, parser):
    fake = serve(lambda h, m: _send(h, 200, body))
    with pytest.raises(PromError):
        PromClient(fake.url, timeout_s=10).raw("up", 0, 60, 60)


@pytest.mark.parametrize("data", [["abc"], [["a"]], [{"a": {"b": 1}}], [{"a": 1}], {"a": 1}])
def test_a_wrong_shaped_series_answer_is_one_line(serve, data, parser):
    fake = serve(lambda h, m: _send(h, 200, _ok(data)))
    with pytest.raises(PromError, match=r"wrong shape|did not answer JSON"):
        PromClient(fake.url, timeout_s=10).series_list("up", 0, 1)


@pytest.mark.parametrize(
    "line",
    [
        {"metric": {}, "timestamps": [1, 2], "values": [1]},
        {"metric": {}, "timestamps": [1.5], "values": [1]},
        {"metric": {}, "timestamps": ["1"], "values": [1]},
        {"metric": "x", "timestamps": [1], "values": [1]},
        {"metric": {}, "timestamps": [1], "values": [None]},
        ["not", "an", "object"],
    ],
)
def test_a_wrong_shaped_export_line_is_one_line(serve, line):
    fake = serve(lambda h, m: _send(h, 200, json.dumps(line) + "\n"))
    with pytest.raises(PromError, match=r"wrong shape|did not answer JSON"):
        PromClient(fake.url, timeout_s=10).raw("up", 0, 60, 60, export=True)


def test_samples_in_reverse_order_are_put_in_order(serve, parser):
    values = [[60 - i, str(i)] for i in range(0, 60, 15)]
    fake = serve(lambda h, m: _send(h, 200, _ok({"result": [{"metric": {"g": "0"}, "values": values}]})))
    (series,) = PromClient(fake.url, timeout_s=10).query_range("up", 0, 60, 15)
    assert series.times == sorted(series.times) and len(series.times) == 4
    (raw,) = PromClient(fake.url, timeout_s=10).raw("up", 0, 60, 60)
    assert raw.times_ms == [15_000, 30_000, 45_000, 60_000] and raw.values == [45.0, 30.0, 15.0, 0.0]


@pytest.mark.parametrize(
    "url", ["http://[::1", "http://127.0.0.1:9090/a b", "http://h/\r\nX-a: b", "http://h:99999"]
)
def test_a_malformed_url_is_one_line(url):
    with pytest.raises(PromError, match="--prometheus"):
        PromClient(url)


# ---- N13: credentials in the URL --------------------------------------------------------------------


def test_credentials_in_the_url_are_used_and_never_shown(serve):
    fake = serve(lambda h, m: _send(h, 404, "{}"))
    host = fake.url.removeprefix("http://")
    c = PromClient(f"http://alice:S3CRETPW@{host}", timeout_s=10)
    with pytest.raises(PromError) as caught:
        c.series_list("up", 0, 1)
    assert "S3CRETPW" not in str(caught.value) and c.url == fake.url
    assert fake.seen[0][2] == Auth(user="alice", password="S3CRETPW").headers()["Authorization"]
    moved = serve(lambda h, m: _send(h, 302, "", Location="http://bob:0THERPW@elsewhere.invalid/x"))
    with pytest.raises(PromError, match=r"a redirect to http://elsewhere\.invalid/x") as caught:
        PromClient(moved.url, timeout_s=10).series_list("up", 0, 1)
    assert "0THERPW" not in str(caught.value)
    down = PromClient("http://alice:S3CRETPW@no-such-host.invalid:9", timeout_s=10)
    with pytest.raises(PromError) as caught:
        down.series_list("up", 0, 1)
    assert "S3CRETPW" not in str(caught.value)


# ---- through the command line: one line, exit 2; a failing node reported, the others written ---------

_DCGM = "DCGM_FI_DEV_GPU_UTIL"


def _fleet(nodes: int, failing: set[str], shape_error: bool = False) -> Handler:
    """A Prometheus of ``nodes`` nodes of one GPU each (dcgm-exporter's utilisation at 15 s); the
    nodes in ``failing`` answer 503 to every query of their samples."""
    from urllib.parse import parse_qs, urlsplit

    def handle(h: BaseHTTPRequestHandler, method: str) -> None:
        split = urlsplit(h.path)
        form = parse_qs(h.form or split.query)
        path = split.path
        if path == "/api/v1/series":
            match = form["match[]"][0]
            if _DCGM in match:
                _send(
                    h, 200, _ok([{"__name__": _DCGM, "Hostname": f"n{i}", "gpu": "0"} for i in range(nodes)])
                )
            else:
                _send(h, 200, _ok([]))
        elif path.startswith("/api/v1/label/"):
            _send(h, 200, _ok([_DCGM]))
        elif path == "/api/v1/export":
            _send(h, 404, "{}")
        elif path == "/api/v1/query":
            query = form["query"][0]
            if shape_error:
                _send(h, 200, _ok({"result": ["abc"]}))
                return
            if any(f'"{n}"' in query for n in failing):
                _send(h, 503, '{"status":"error","error":"storm"}', Retry_After="0")
                return
            at = float(form["time"][0])
            values = [[at - k * 15, "50"] for k in range(40, -1, -1)]
            node = query.split('Hostname="', 1)[1].split('"', 1)[0] if "Hostname" in query else "n0"
            _send(h, 200, _ok({"result": [{"metric": {"Hostname": node, "gpu": "0"}, "values": values}]}))
        else:
            _send(h, 404, "{}")

    return handle


def _code(preamble: str = "") -> str:
    """The command line's main, with the retries' first wait short (and ``preamble`` run first)."""
    code = "import sys; from exporter.offline.promhistory import client, history; "
    code += "client.RETRY_FIRST_WAIT_S = 0.01; " + (preamble + "; " if preamble else "")
    return code + "from exporter.cli import main; sys.exit(main(sys.argv[1:]))"


def _cli(*args: str, preamble: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _code(preamble), "replay", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_node_that_keeps_failing_is_reported_and_the_others_written(serve):
    fake = serve(_fleet(3, {"n1"}))
    run = _cli("--prometheus", fake.url, "--from=-10m", "--jobs", "1", "--json")
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout.splitlines()[-1])
    assert set(doc["fleet"]["failed"]) == {"n1"} and "HTTP 503" in doc["fleet"]["failed"]["n1"]
    assert doc["gpus"] == 2 and {g.split("/")[0] for g in doc["ledger"]} == {"n0", "n2"}
    text = _cli("--prometheus", fake.url, "--from=-10m", "--jobs", "2")
    assert text.returncode == 0, text.stderr
    assert "node n1: NOT READ" in text.stdout and "after 5 tries" in text.stdout


def test_a_wrong_shaped_answer_through_the_command_is_one_line_and_exit_2(serve):
    fake = serve(_fleet(1, set(), shape_error=True))
    for jobs in ("1", "2"):
        run = _cli("--prometheus", fake.url, "--from=-10m", "--step", "15", "--jobs", jobs)
        assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
        assert "wrong shape" in run.stderr and "Traceback" not in run.stderr


def _over_tls(fake: Fake, issued: object) -> str:
    """The fake's URL, its listening socket now speaking TLS with ``issued``'s certificate (for 127.0.0.1)."""
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(issued.cert, issued.key)  # type: ignore[attr-defined]
    fake.server.socket = context.wrap_socket(fake.server.socket, server_side=True)
    return fake.url.replace("http://", "https://")


def test_the_ca_and_secret_files_are_read_as_inputs(serve, tmp_path):
    """--prometheus-ca-file is the trust a TLS Prometheus is checked against; it and the secret files are
    read as replay reads any input: a FIFO (no writer) or a device is one line at once, never a wait."""
    import os

    from tests.faults.certs import Authority

    ours, theirs = Authority(tmp_path, "ours"), Authority(tmp_path, "theirs")
    fake = serve(_fleet(1, set()))
    url = _over_tls(fake, ours.issue("server"))
    args = ("--prometheus", url, "--from=-10m", "--step", "15", "--jobs", "1")
    trusted = _cli(*args, "--prometheus-ca-file", str(ours.pem))
    assert trusted.returncode == 0 and "n0" in trusted.stdout, trusted.stderr
    other = _cli(*args, "--prometheus-ca-file", str(theirs.pem))
    assert other.returncode == 2 and other.stderr.count("\n") == 1, other.stderr
    assert "CERTIFICATE_VERIFY_FAILED" in other.stderr or "certificate verify failed" in other.stderr
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for flag, path, said in (
        ("--prometheus-ca-file", fifo, "not a regular file"),
        ("--prometheus-ca-file", Path("/dev/zero"), "not a regular file"),
        ("--prometheus-bearer-token-file", fifo, "not a regular file"),
        ("--prometheus-bearer-token-file", Path("/dev/zero"), "not a regular file"),
    ):
        run = _cli(*args, flag, str(path))
        assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
        assert f"{flag}: cannot read {path} ({said})" in run.stderr, run.stderr
    big = tmp_path / "token"
    big.write_text("x" * (promclient.MAX_SECRET_BYTES + 1))
    run = _cli(*args, "--prometheus-bearer-token-file", str(big))
    said = f"larger than {promclient.MAX_SECRET_BYTES} bytes"
    assert run.returncode == 2 and said in run.stderr, run.stderr


def test_a_range_before_1970_and_a_step_too_fine_are_refused_in_one_line(serve):
    fake = serve(_fleet(1, set()))
    far = _cli("--prometheus", fake.url, "--from=-99999999w")
    assert far.returncode == 2 and "before 1970" in far.stderr and far.stderr.count("\n") == 1
    fine = _cli("--prometheus", fake.url, "--from=-1h", "--step", "1e-9")
    assert fine.returncode == 2 and "--step" in fine.stderr and fine.stderr.count("\n") == 1
    assert fake.seen == []  # refused before asking


# ---- N9: values from the server checked -------------------------------------------------------------


def _back(prices=None):
    from exporter.offline.promhistory import own

    where = own.Where(None, "", 0.0, 3600.0, 15.0, set(), lambda m: [])  # type: ignore[arg-type]
    return own._Back("n", where, 0.0, prices, {"n/0": "H100"}, lambda node, labels: "job", False)


def test_a_ledger_read_back_is_bounded_by_the_time_it_covers():
    """Two counters merged (every other sample lower) or a counter gone negative: never years of GPU
    time, never a negative count or cost."""
    from exporter.policy.cost import DEFAULT

    back = _back(DEFAULT)
    times = [k * 15_000 for k in range(241)]  # an hour at 15 s
    merged = [1e9 + k * 15 if k % 2 else 5e8 + k * 15 for k in range(241)]
    back.ledger({"gpu": "0", "state": "computing"}, times, merged, share=False)
    back.ledger({"gpu": "0", "state": "idle"}, times, [-1e6 * k for k in range(241)], share=False)
    r = back.done().results["job"]
    assert 0 < r.ledger["n/0"]["computing"] <= 3600 + 240 * 2  # the jitter allowed a sample, at most
    assert r.ledger["n/0"]["idle"] == 0 and min(r.cost["n/0"].values()) >= 0


def test_impossible_gpu_values_are_read_as_missing():
    from exporter.offline.promhistory import history, names

    gpus: dict = {}
    util = next(s for s in names.GPU_SERIES if s.attr == "util" and s.scheme == names.DCGM_LEGACY)
    history._keep(gpus, util.scheme, util, "n", {"gpu": "0"}, [0.0, 15.0, 30.0], [50.0, -1e6, 1e308])
    assert gpus["0"].values["util"] == {0.0: 50 * util.scale}


def test_a_node_name_with_a_line_break_is_a_valid_promql_string():
    from exporter.offline.promhistory.history import _quote

    assert _quote('no\nde"\\') == '"no\\nde\\"\\\\"'
    promtool = __import__("shutil").which("promtool")
    if promtool:
        expr = f"up{{Hostname={_quote(chr(10).join(['a', 'b']))}}}"
        done = subprocess.run(
            [promtool, "check", "rules", "/dev/stdin"], input=_rule(expr), capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr


def _rule(expr: str) -> str:
    return "groups:\n- name: g\n  rules:\n  - record: r\n    expr: " + json.dumps(expr) + "\n"


# ---- N5: one node's range bounded; N12: workers end with their parent ------------------------------


def test_a_node_past_the_memory_bound_is_refused_naming_the_fix(serve):
    fake = serve(_fleet(2, set()))
    run = _cli("--prometheus", fake.url, "--from=-10m", "--jobs", "1", preamble="history.MAX_GPU_STEPS = 10")
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert "GPU-steps" in run.stderr and "a coarser --step" in run.stderr


def test_workers_end_with_their_parent(serve):
    """SIGTERM reaches the parent only (``timeout``, a CI's cancel): its workers, stuck on a slow
    server, end with it rather than run on."""
    import os
    import signal

    import psutil

    slow = _fleet(4, set())

    def handle(h: BaseHTTPRequestHandler, method: str) -> None:
        if h.path.startswith("/api/v1/query"):
            time.sleep(60)  # every node's read waits
        slow(h, method)

    fake = serve(handle)
    argv = ["replay", "--prometheus", fake.url, "--from=-10m", "--step", "15", "--jobs", "2"]
    parent = subprocess.Popen(
        [sys.executable, "-c", _code(), *argv], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 60
        workers: list[psutil.Process] = []
        while time.monotonic() < deadline and len(workers) < 2:
            workers = psutil.Process(parent.pid).children()
            time.sleep(0.2)
        assert len(workers) >= 2, workers
        time.sleep(1)  # each has started on its node
        os.kill(parent.pid, signal.SIGTERM)
        parent.wait(timeout=30)
        _, alive = psutil.wait_procs(workers, timeout=30)
        assert not alive, alive
    finally:
        if parent.poll() is None:
            parent.kill()


def test_a_node_name_no_url_can_carry_is_one_line(serve):
    fake = serve(lambda h, m: _send(h, 200, _ok({"result": []})))
    c = PromClient(fake.url, timeout_s=10)
    for read in (
        lambda: c.raw('up{Hostname="\ud800"}', 0, 60, 60),
        lambda: c.query_range("\ud800", 0, 60, 15),
    ):
        with pytest.raises(PromError, match="wrong shape"):
            read()


def test_ctrl_c_with_workers_is_one_line(serve):
    """Ctrl-C signals the whole process group: the workers leave it to the parent, which says one line
    (no worker's traceback) and ends them."""
    import os
    import signal

    import psutil

    slow = _fleet(4, set())

    def handle(h: BaseHTTPRequestHandler, method: str) -> None:
        if h.path.startswith("/api/v1/query"):
            time.sleep(60)
        slow(h, method)

    fake = serve(handle)
    argv = ["replay", "--prometheus", fake.url, "--from=-10m", "--step", "15", "--jobs", "2"]
    parent = subprocess.Popen(
        [sys.executable, "-c", _code(), *argv],
        cwd=REPO,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=default_signals,  # Ctrl-C's default, however the suite was started
    )
    try:
        deadline = time.monotonic() + 60
        workers: list[psutil.Process] = []
        while time.monotonic() < deadline and len(workers) < 2:
            workers = psutil.Process(parent.pid).children()
            time.sleep(0.2)
        time.sleep(1)
        os.killpg(parent.pid, signal.SIGINT)
        _, err = parent.communicate(timeout=60)
        assert (
            parent.returncode == 2 and err == "gpu-bottleneck-exporter: interrupted: no summary written\n"
        ), err
        _, alive = psutil.wait_procs(workers, timeout=30)
        assert not alive
    finally:
        if parent.poll() is None:
            parent.kill()


def test_a_progress_line_comes_while_workers_read_a_long_node(serve):
    """No node finishes for a while (each read is slow): the progress line still comes."""
    slow = _fleet(2, set())

    def handle(h: BaseHTTPRequestHandler, method: str) -> None:
        if h.path.startswith("/api/v1/query"):
            time.sleep(8)  # past the line's 5 s
        slow(h, method)

    fake = serve(handle)
    run = _cli("--prometheus", fake.url, "--from=-10m", "--step", "15", "--jobs", "2")
    assert run.returncode == 0, run.stderr
    assert "read 0/2 node(s)" in run.stderr, run.stderr


def test_the_environments_proxy_is_used_as_urllib_used_it(serve, monkeypatch):
    """HTTP_PROXY (and NO_PROXY) as urllib and curl read them: the request goes to the proxy, in
    absolute form; the proxy's credentials to it alone, the server's Authorization as before."""
    fake = serve(lambda h, m: _send(h, 200, _ok([{"a": "b"}])))
    proxy = serve(lambda h, m: _send(h, 200, _ok([{"via": "proxy"}])))
    for name in ("no_proxy", "NO_PROXY", "http_proxy", "HTTP_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("http_proxy", proxy.url.replace("http://", "http://pu:pp@"))
    got = PromClient(fake.url, Auth(token="s3cr3t-token"), timeout_s=10).series_list("up", 0, 1)
    assert got == [{"via": "proxy"}] and fake.seen == []
    _, path, authorization = proxy.seen[0]
    assert path.startswith(fake.url + "/api/v1/series") and authorization == "Bearer s3cr3t-token"
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    assert PromClient(fake.url, timeout_s=10).series_list("up", 0, 1) == [{"a": "b"}]
