"""POST /v1/progress authorised apart from scrapes, through the real command: with --progress-token-file a
push needs that bearer token (the scrape users' passwords do not do), a push without it changes nothing,
scrapes keep their basic auth; a bad body is 400 with one line whatever its shape."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import httpx
import pytest

from tests.e2e.test_http import families
from tests.faults.http_command import Command
from tests.timing import HANG_GUARD_S

TOKEN = "push-" + "x7" * 12
PASSWORD = "scrape-secret"
REPORT = {"namespace": "ml", "pod": "llm-train-0", "step": 41}


def _post(cmd: Command, body: object = None, content: bytes | None = None, **headers: str) -> httpx.Response:
    headers = {"Content-Type": "application/json", **headers}
    if content is None:
        return httpx.post(cmd.url + "/v1/progress", json=body, headers=headers, timeout=5)
    return httpx.post(cmd.url + "/v1/progress", content=content, headers=headers, timeout=5)


def _steps(cmd: Command) -> list[float]:
    text = httpx.get(cmd.url + "/metrics", auth=("prometheus", PASSWORD), timeout=5).text
    return [s.value for s in families(text).get("gpu_pod_training_step", [])]


@pytest.fixture(scope="module")
def pushed(tmp_path_factory) -> Iterator[Command]:
    folder = tmp_path_factory.mktemp("push")
    (folder / "token").write_text(TOKEN + "\n")  # a Secret's value often ends in a newline
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
    (folder / "web.yml").write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    cmd = Command(
        folder / "log.txt",
        "--progress-api",
        "on",
        "--progress-token-file",
        str(folder / "token"),
        "--web.config.file",
        str(folder / "web.yml"),
    )
    try:
        cmd.wait_ready()
        deadline = time.monotonic() + HANG_GUARD_S
        while _post(cmd, REPORT, Authorization=f"Bearer {TOKEN}").status_code == 404:
            assert time.monotonic() < deadline, cmd.text()  # until the kubelet said which pods hold GPUs
            time.sleep(0.2)
        yield cmd
    finally:
        assert cmd.stop() == 0, cmd.text()
        assert "Traceback" not in cmd.text(), cmd.text()


def test_a_push_with_the_token_sets_the_step(pushed):
    assert _post(pushed, {**REPORT, "step": 50}, Authorization=f"Bearer {TOKEN}").status_code == 204
    deadline = time.monotonic() + HANG_GUARD_S
    while _steps(pushed) != [50]:
        assert time.monotonic() < deadline, _steps(pushed)
        time.sleep(0.2)


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Bearer wrong-token-of-enough-length",
        f"Bearer {TOKEN}x",
        "Basic cHJvbWV0aGV1czpzY3JhcGUtc2VjcmV0",
    ],
    ids=["none", "wrong", "longer", "scrape-password"],
)
def test_a_push_without_the_token_is_refused_and_changes_nothing(pushed, authorization):
    assert _post(pushed, {**REPORT, "step": 60}, Authorization=f"Bearer {TOKEN}").status_code == 204
    time.sleep(0.6)  # the next snapshot carries 60
    headers = {"Authorization": authorization} if authorization else {}
    r = _post(pushed, {**REPORT, "step": 99}, **headers)
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"
    assert r.text.count("\n") == 1 and "push token" in r.text
    time.sleep(0.6)
    assert _steps(pushed) == [60]
    assert _refused(pushed) >= 1  # counted where an operator can see it


def _refused(pushed) -> float:
    """gpu_exporter_http_push_refused_total, as a scrape with the scrape credentials reads it."""
    text = httpx.get(pushed.url + "/metrics", auth=("prometheus", PASSWORD), timeout=5).text
    return float(re.search(r"^gpu_exporter_http_push_refused_total (\S+)$", text, re.M).group(1))


def test_scrapes_keep_their_own_credentials(pushed):
    assert httpx.get(pushed.url + "/metrics", timeout=5).status_code == 401
    token = {"Authorization": f"Bearer {TOKEN}"}
    assert httpx.get(pushed.url + "/metrics", headers=token, timeout=5).status_code == 401
    assert httpx.get(pushed.url + "/metrics", auth=("prometheus", PASSWORD), timeout=5).status_code == 200


@pytest.mark.parametrize("depth", [200, 1000, 1020])
def test_deeply_nested_json_is_400_with_one_line(pushed, depth):
    r = _post(pushed, content=b"[" * depth, Authorization=f"Bearer {TOKEN}")
    assert r.status_code == 400
    assert r.text.count("\n") == 1 and len(r.text) < 80


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("short\n", "a token of 5 characters; at least 16"),
        ("two words of a token\n", "not one token of printable ASCII"),
        ("\n", "empty: no token"),
    ],
)
def test_a_bad_token_file_is_one_line_naming_the_variable(tmp_path, text, said):
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    (tmp_path / "token").write_text(text)
    env = {**os.environ, "GBE_PROGRESS_TOKEN_FILE": str(tmp_path / "token"), "GBE_PROGRESS_API": "on"}
    done = subprocess.run(
        [sys.executable, "-m", "exporter", "--simulate", "healthy", "--port", "1"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("gpu-bottleneck-exporter: GBE_PROGRESS_TOKEN_FILE: "), done.stderr
    assert said in done.stderr and done.stderr.count("\n") == 1


def test_a_token_file_that_is_a_directory_is_one_line_at_start(tmp_path: Path):
    import subprocess
    import sys

    from tests.conftest import REPO

    flags = ["--port", "1", "--progress-api", "on", "--progress-token-file", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, "-m", "exporter", "--simulate", "healthy", *flags],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.endswith(f"--progress-token-file: {tmp_path}: not a regular file\n")


def test_a_token_without_the_progress_api_is_a_usage_error(tmp_path: Path):
    import subprocess
    import sys

    from tests.conftest import REPO

    (tmp_path / "token").write_text(TOKEN)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "exporter",
            "--simulate",
            "healthy",
            "--progress-token-file",
            str(tmp_path / "token"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "--progress-token-file: " in done.stderr, done.stderr


# ---- a push only from its pod's own address (--progress-check-address on) --------------------------


class FakeApi:
    """The Kubernetes API's GET of one pod, over TLS, answering what ``pods`` says (a status code for a
    refusal); it records the bearer token each ask carried."""

    def __init__(self, folder: Path, pods: dict[tuple[str, str], object]) -> None:
        import http.server
        import json
        import ssl
        import threading

        from tests.faults.certs import Authority

        ca = Authority(folder, "api")
        issued = ca.issue("server")
        self.ca, self.pods, self.tokens = ca.pem, pods, []
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                api.tokens.append(self.headers.get("Authorization"))
                parts = self.path.split("/")  # /api/v1/namespaces/NS/pods/NAME
                answer = api.pods.get((parts[4], parts[6])) if len(parts) == 7 else None
                status = answer if isinstance(answer, int) else 404 if answer is None else 200
                body = json.dumps(answer if status == 200 else {"kind": "Status"}).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(issued.cert, issued.key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


def _pod(*ips: str) -> dict:
    return {"kind": "Pod", "status": {"podIP": ips[0], "podIPs": [{"ip": ip} for ip in ips]}}


def _checked_app(tmp_path: Path, pods: dict) -> Iterator[tuple[object, FakeApi, object]]:
    """The progress API on a simulated node, its store asking ``FakeApi`` for the pods' addresses."""
    from exporter.app import Application
    from exporter.config.settings import Settings
    from exporter.sim import SimulatedNode
    from exporter.sources.kubeapi import InCluster, PodAddresses
    from scripts.stack import free_port
    from tests.e2e.test_http import Served, wait_ready

    (tmp_path / "sa-token").write_text("service-account-token\n")
    api = FakeApi(tmp_path, pods)
    node = SimulatedNode("healthy", n_gpus=2)
    module = node.install()
    node.host.start(period_s=0.2)
    settings = Settings(
        interval_s=0.25,
        collect_timeout_s=0.5,
        listen_address="127.0.0.1",
        pod_resources_socket=node.kubelet_socket,
        pod_resources_interval_s=1.0,
        progress_api=True,
        progress_check_address=True,
    )
    app = Application(settings, module, node.host_options())
    assert app.progress is not None
    app.progress.senders = PodAddresses(InCluster(api.url, tmp_path / "sa-token", api.ca).fetch)
    try:
        with Served(app, free_port()) as s:
            wait_ready(s.url)
            yield s, api, app.progress
    finally:
        api.close()
        node.close()


def _push(s: object, step: int) -> httpx.Response:
    deadline = time.monotonic() + HANG_GUARD_S
    while True:
        r = httpx.post(s.url + "/v1/progress", json={**REPORT, "step": step}, timeout=10)
        if r.status_code != 404 or time.monotonic() > deadline:
            return r
        time.sleep(0.2)  # until the kubelet said which pods hold GPUs


def test_a_push_from_the_pods_own_address_is_kept(tmp_path):
    for s, api, store in _checked_app(tmp_path, {("ml", "llm-train-0"): _pod("10.1.2.3", "127.0.0.1")}):
        assert _push(s, 7).status_code == 204
        assert store.view()[("ml", "llm-train-0")].step == 7
        assert api.tokens[0] == "Bearer service-account-token"
        assert _push(s, 8).status_code == 204
        assert len(api.tokens) == 1  # the answer is kept: one ask per pod, not per push


def test_a_push_from_another_address_is_403_and_changes_nothing(tmp_path):
    for s, api, store in _checked_app(tmp_path, {("ml", "llm-train-0"): _pod("10.1.2.3")}):
        r = _push(s, 7)
        assert r.status_code == 403 and r.text == "ml/llm-train-0 is not at the sender's address\n"
        assert ("ml", "llm-train-0") not in store.view()
        assert _push(s, 9).status_code == 403
        assert len(api.tokens) == 1  # a mismatch asks again only after a few seconds


@pytest.mark.parametrize(
    ("answer", "said"), [(403, "answered 403 no RBAC to get pods"), (500, "answered 500")]
)
def test_without_the_apis_answer_a_push_is_503_in_one_line(tmp_path, answer, said):
    for s, _, store in _checked_app(tmp_path, {("ml", "llm-train-0"): answer}):
        r = _push(s, 7)
        assert r.status_code == 503 and r.text.count("\n") == 1, r.text
        assert r.text.startswith("cannot check the sender's address: the Kubernetes API") and said in r.text
        assert store.view() == {}


def test_a_forwarded_for_header_does_not_stand_for_the_senders_address(tmp_path):
    """uvicorn trusts X-Forwarded-For from 127.0.0.1 unless told not to: a node process (hostNetwork)
    could then push for any pod by naming its address. The served app sees the TCP peer only."""
    import asyncio
    import json

    from exporter.app import Application
    from exporter.config.settings import Settings
    from exporter.serve.server import server_config
    from exporter.sim import SimulatedNode
    from exporter.sources.kubeapi import PodAddresses

    node = SimulatedNode("healthy", n_gpus=1)
    try:
        settings = Settings(listen_address="127.0.0.1", progress_api=True, progress_check_address=True)
        app = Application(settings, node.install(), node.host_options())
        assert app.progress is not None
        app.progress.senders = PodAddresses(lambda ns, pod: frozenset({"10.1.2.3"}))
        config = server_config(app)
        config.load()
        body = json.dumps(REPORT).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"x-forwarded-for", b"10.1.2.3"),
        ]
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/progress",
            "raw_path": b"/v1/progress",
            "query_string": b"",
            "root_path": "",
            "headers": headers,
            "client": ("127.0.0.1", 40000),
            "server": ("127.0.0.1", 9612),
        }
        statuses: list[int] = []

        async def receive() -> dict:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict) -> None:
            if message["type"] == "http.response.start":
                statuses.append(message["status"])

        asyncio.run(config.loaded_app(scope, receive, send))
        assert statuses == [403]
        assert app.progress.view() == {}
    finally:
        node.close()
