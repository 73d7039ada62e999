"""--web.config.file against an attacker on loopback, through the real command (uvicorn, real HTTP and
TLS clients): a file that is nested to no end, a bcrypt cost no login can pay, secrets pasted in the
wrong place, passwords over bcrypt's 72 bytes, and a flood of wrong passwords around a SIGHUP. Every
bad file is one line (exit 2 at start; the old settings kept, and the failure counted, on a re-read)
and never echoes what the file says."""

from __future__ import annotations

import asyncio
import base64
import re
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import bcrypt
import h11
import httpx
import pytest

from exporter.policy.thresholds import table
from exporter.serve.webconfig import Authenticator, TlsSettings, WebConfigError, parse, ssl_context
from tests.conftest import REPO
from tests.faults.certs import Authority
from tests.faults.http_command import Command
from tests.timing import assert_within, pace, timed

PASSWORD = "s3cret-scrape"
FIRST = "first-login-password"
LONG = "p" + "ü" * 40  # 81 bytes: bcrypt reads the first 72, the last one cut inside a character
SECRET = "S3CRET-d0e5b1f4"
# syntactically a bcrypt hash; its 22nd salt character ('O') carries no stray bits
COST_31 = "$2b$31$" + "a" * 21 + "O" + "b" * 31


def _hash(password: str | bytes, cost: int) -> str:
    raw = password.encode() if isinstance(password, str) else password
    return bcrypt.hashpw(raw, bcrypt.gensalt(cost)).decode()


def _wait(what: Callable[[], object], timeout: float, said: Callable[[], str]) -> object:
    deadline = time.monotonic() + timeout
    while not (result := what()):
        assert time.monotonic() < deadline, said()
        time.sleep(0.1)
    return result


def _reload_failures(text: str) -> int:
    match = re.search(r'gpu_exporter_web_config_reloads_total\{result="failure"\} (\d+)', text)
    return int(match.group(1)) if match else -1


# bad files: (id, content, what the one line says); SECRET must never be printed
BAD_FILES = [
    ("nested", "[" * 10_000, "nested more than 10 levels deep"),
    ("nested-mapping", "a:\n" + "".join(" " * i + "b:\n" for i in range(1, 1000)), "nested more than"),
    ("cost-31", f"basic_auth_users:\n  prometheus: '{COST_31}'\n", "bcrypt cost 31 is above 14"),
    ("secret-as-key", f"{SECRET}: 1\nbasic_auth_users: {{}}\n", "unknown key at line 1"),
    (
        "hash-as-user",
        f"basic_auth_users:\n  '$2y$10${SECRET}': prometheus\n",
        "basic_auth_users: line 2: not a bcrypt hash",
    ),
    ("password-in-name", f"basic_auth_users:\n  'admin:{SECRET}': x\n", "line 2: not a user name"),
    (
        "key-pasted",
        f"tls_server_config:\n  cert_file: |\n    -----BEGIN PRIVATE KEY-----\n    {SECRET}\n"
        "    -----END PRIVATE KEY-----\n  key_file: key.pem\n",
        "cert_file: line 2: not a file path",
    ),
    (
        "secret-as-version",
        f"tls_server_config:\n  cert_file: a.pem\n  key_file: b.pem\n  min_version: {SECRET}\n",
        "min_version: line 4: not one of",
    ),
]


# ---- at start: one line, exit 2, in bounded time ---------------------------------------------------


def _start(config: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "exporter", "--simulate", "healthy", "--web.config.file", str(config)],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,  # only keeps a regression from hanging the suite (a cost-31 hash hung here)
    )


@pytest.fixture(scope="module")
def refused_start_s(tmp_path_factory) -> float:
    """How long a start refused at once takes here (a web config that is not there): the baseline."""
    missing = tmp_path_factory.mktemp("baseline") / "no-such-web.yml"
    return pace(lambda: _start(missing), repeat=2)


@pytest.mark.parametrize(
    ("content", "said"), [(c, s) for _, c, s in BAD_FILES], ids=[i for i, _, _ in BAD_FILES]
)
def test_a_bad_web_config_stops_the_start_in_one_line_without_its_contents(
    tmp_path, content, said, refused_start_s
):
    path = tmp_path / "web.yml"
    path.write_text(content)
    result, took = timed(lambda: _start(path))
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-2000:]
    assert lines[0].startswith("gpu-bottleneck-exporter: --web.config.file: ") and said in lines[0], lines
    assert SECRET not in result.stderr
    # as quick as a start refused for a missing file, give or take a busy machine: a cost-31 hash or a
    # file nested without end would take hours
    assert_within(took, refused_start_s, 10, "a start refused for its web config")


# ---- on SIGHUP: the old settings stay, the failure is counted, one line --------------------------------


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory) -> Iterator[dict]:
    folder = tmp_path_factory.mktemp("pki2")
    ca = Authority(folder, "round2")
    ca.issue("server")
    config = folder / "web.yml"
    config.write_text(
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server-key.pem\n"
        f"basic_auth_users:\n  prometheus: '{_hash(PASSWORD, 4)}'\n"
    )
    cmd = Command(folder / "log.txt", "--web.config.file", str(config), scheme="https")
    context = ssl.create_default_context(cafile=str(ca.pem))
    try:
        cmd.wait_ready(lambda url: httpx.get(url, verify=context, timeout=5))
        yield {"cmd": cmd, "config": config, "context": context}
    finally:
        assert cmd.stop() == 0, cmd.text()[-3000:]
        assert "Traceback" not in cmd.text(), cmd.text()[-3000:]


@pytest.mark.parametrize(
    ("content", "said"), [(c, s) for _, c, s in BAD_FILES], ids=[i for i, _, _ in BAD_FILES]
)
def test_a_bad_web_config_on_sighup_keeps_tls_and_auth_in_force(tls_server, content, said):
    cmd, context = tls_server["cmd"], tls_server["context"]

    def scrape(auth: tuple[str, str] | None = ("prometheus", PASSWORD)) -> httpx.Response:
        return httpx.get(cmd.url + "/metrics", verify=context, auth=auth, timeout=10)

    before = _reload_failures(scrape().text)
    tls_server["config"].write_text(content)
    cmd.proc.send_signal(signal.SIGHUP)
    _wait(lambda: cmd.proc.poll() is None and _reload_failures(scrape().text) == before + 1, 20, cmd.text)
    kept = [line for line in cmd.text().splitlines() if "keeping the web config in force" in line]
    assert said in kept[-1], kept[-1]
    assert SECRET not in cmd.text() and "Traceback" not in cmd.text()
    assert scrape(("prometheus", "wrong")).status_code == 401  # the old users, over the old certificate
    assert scrape(None).status_code == 401


# ---- passwords over 72 bytes ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory) -> Iterator[dict]:
    """Plain HTTP with basic authentication at cost 10 (60 ms a check): what a flood costs shows."""
    folder = tmp_path_factory.mktemp("auth2")
    config = folder / "web.yml"
    config.write_text(
        "basic_auth_users:\n"
        f"  prometheus: '{_hash(PASSWORD, 10)}'\n"
        f"  firsttime: '{_hash(FIRST, 10)}'\n"
        f"  longpass: '{_hash(LONG.encode()[:72], 4)}'\n"  # what Go's or htpasswd's bcrypt hashes
    )
    cmd = Command(folder / "log.txt", "--web.config.file", str(config))
    try:
        cmd.wait_ready()
        yield {"cmd": cmd, "config": config}
    finally:
        assert cmd.stop() == 0, cmd.text()[-3000:]
        assert "Traceback" not in cmd.text(), cmd.text()[-3000:]


def test_a_password_over_72_bytes_is_checked_by_its_first_72_as_go_does(auth_server):
    cmd = auth_server["cmd"]

    def status(user: str, password: str) -> int:
        return httpx.get(cmd.url + "/metrics", auth=(user, password), timeout=10).status_code

    assert status("longpass", LONG) == 200  # a configured long password logs in
    assert status("longpass", LONG + "x" * 50) == 200  # bytes past the 72nd are not read, as in Go
    assert status("longpass", "q" + LONG[1:]) == 401  # wrong within the 72 bytes: 401, never 500
    assert status("prometheus", "w" * 500) == 401
    assert status("nobody", "w" * 500) == 401
    assert cmd.proc.poll() is None and "Traceback" not in cmd.text()


# ---- a flood of wrong passwords ------------------------------------------------------------------------


class Flood:
    """``clients`` kept-alive connections sending wrong passwords as fast as they are answered."""

    def __init__(self, port: int, clients: int, user: str, password: Callable[[int, int], str]) -> None:
        self.port, self.clients, self.user, self.password = port, clients, user, password
        self.statuses: Counter[int] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    def __enter__(self) -> Flood:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)

    async def _main(self) -> None:
        tasks = [asyncio.create_task(self._client(n)) for n in range(self.clients)]
        while not self._stop.is_set():
            await asyncio.sleep(0.05)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _client(self, n: int) -> None:
        i = 0
        while True:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                await asyncio.sleep(0.1)
                continue
            conn = h11.Connection(h11.CLIENT)
            try:
                while True:
                    i += 1
                    token = base64.b64encode(f"{self.user}:{self.password(n, i)}".encode()).decode()
                    headers = [("host", "127.0.0.1"), ("authorization", f"Basic {token}")]
                    writer.write(conn.send(h11.Request(method="GET", target="/metrics", headers=headers)))
                    writer.write(conn.send(h11.EndOfMessage()))
                    await writer.drain()
                    while not isinstance(event := conn.next_event(), h11.EndOfMessage):
                        if event is h11.NEED_DATA:
                            conn.receive_data(await reader.read(65536))
                        elif isinstance(event, h11.Response):
                            self.statuses[event.status_code] += 1
                        elif isinstance(event, h11.ConnectionClosed):
                            raise ConnectionError
                    conn.start_next_cycle()
            except (OSError, h11.ProtocolError):
                writer.close()


CLIENTS = 200  # the flood's connections, each sending its next guess as soon as it is answered


def _timed_login(url: str, user: str, password: str) -> tuple[int, float]:
    # the timeout only keeps a regression from hanging the test; the bound is _behind_the_flood's
    response, took = timed(lambda: httpx.get(url + "/metrics", auth=(user, password), timeout=120))
    return response.status_code, took


def _check_cost(password: str) -> float:
    """One bcrypt check at the server's cost (10), measured here and now: on a busy machine the server's
    checks slow as much as this one."""
    hashed = _hash(password, 10).encode()
    return pace(lambda: bcrypt.checkpw(password.encode(), hashed))


def _assert_not_queued(took: float, check_s: float) -> None:
    """Queued behind the flood, a login waits for the checks of the clients ahead of it (CLIENTS of
    them); answered at once, for its own check at most. A quarter of the queue is far from both."""
    assert_within(took, check_s, CLIENTS / 4, f"a login while {CLIENTS} clients guess")


def test_a_flood_repeating_one_wrong_password_costs_one_check(auth_server):
    """200 clients sending the same wrong password: remembered as refused after its first check, so
    a user's first login (one bcrypt check) is not queued behind 200 of them."""
    cmd = auth_server["cmd"]
    with Flood(cmd.port, CLIENTS, "firsttime", lambda n, i: "the-same-wrong-one") as flood:
        _wait(lambda: flood.statuses[401] >= 400, 60, lambda: f"{flood.statuses} {cmd.text()[-2000:]}")
        status, took = _timed_login(cmd.url, "firsttime", FIRST)
        check_s = _check_cost(FIRST)
        assert status == 200, status
        _assert_not_queued(took, check_s)
    assert cmd.proc.poll() is None


def test_after_sighup_a_verified_login_is_answered_at_once_while_200_clients_guess(auth_server):
    cmd = auth_server["cmd"]
    assert httpx.get(cmd.url + "/metrics", auth=("prometheus", PASSWORD), timeout=10).status_code == 200
    with Flood(cmd.port, CLIENTS, "prometheus", lambda n, i: f"guess-{n}-{i}") as flood:
        _wait(lambda: flood.statuses[401] >= 10, 60, lambda: f"{flood.statuses} {cmd.text()[-2000:]}")
        reread = cmd.text().count("SIGHUP: re-read")
        auth_server["config"].touch()  # the same users, the same hashes
        cmd.proc.send_signal(signal.SIGHUP)
        _wait(lambda: cmd.text().count("SIGHUP: re-read") > reread, 20, cmd.text)
        status, took = _timed_login(cmd.url, "prometheus", PASSWORD)
        check_s = _check_cost(PASSWORD)
        assert status == 200, status
        _assert_not_queued(took, check_s)
        assert set(flood.statuses) == {401}, flood.statuses
    assert cmd.proc.poll() is None


# ---- the authenticator across a re-read ---------------------------------------------------------------


def test_a_reread_keeps_what_it_knows_only_of_users_whose_hash_is_unchanged():
    first = {"kept": _hash("a", 4).encode(), "changed": _hash("b", 4).encode()}
    auth = Authenticator(first)
    assert auth.check("kept", "a") and auth.check("changed", "b")
    assert not auth.check("kept", "wrong") and not auth.check("nobody", "x")
    again = Authenticator({**first, "changed": _hash("c", 4).encode()}, previous=auth)
    assert again.remembered("kept", "a") is True and again.remembered("kept", "wrong") is False
    assert again.remembered("changed", "b") is None  # a new hash: the old password is checked again
    assert again.check("changed", "b") is False and again.check("changed", "c") is True
    assert again.remembered("nobody", "x") is False
    added = Authenticator({**first, "nobody": _hash("x", 4).encode()}, previous=auth)
    assert added.remembered("nobody", "x") is None and added.check("nobody", "x") is True


def test_an_encrypted_key_is_one_line_not_a_passphrase_prompt(tmp_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    issued = Authority(tmp_path, "enc").issue("server")
    key = ec.generate_private_key(ec.SECP256R1())
    issued.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"passphrase"),
        )
    )
    with pytest.raises(WebConfigError, match="is encrypted"):
        ssl_context(TlsSettings(issued.cert, issued.key), "web.yml")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("a: &x [1]\nb: *x\n", "line 2: an alias"),
        ("basic_auth_users: {}\nbasic_auth_users: {}\n", "line 2: a key given twice (line 1 has it)"),
        ("tls_sever_config: {}\n", "did you mean tls_server_config?"),
        ("basic_auth_users:\n  bob: '$2y$10$" + "a" * 53 + "'\n", "a bcrypt hash this exporter cannot check"),
        ("x: !!int abc\n", "line 1: a value that does not read as its tag says"),
    ],
)
def test_the_parser_names_lines(tmp_path, text, said):
    with pytest.raises(WebConfigError) as caught:
        parse(text, tmp_path, "web.yml")
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_a_check_that_cannot_start_in_time_is_503_unchecked(tmp_path, monkeypatch):
    """Behind web.auth_wait_seconds of queued checks the asker has given up: it is not checked."""
    from exporter.serve import webconfig

    path = tmp_path / "web.yml"
    path.write_text(f"basic_auth_users:\n  prometheus: '{_hash(PASSWORD, 4)}'\n")
    monkeypatch.setattr(webconfig, "AUTH_WAIT", 0.2)
    header = "Basic " + base64.b64encode(f"prometheus:{PASSWORD}".encode()).decode()

    async def run() -> tuple[bool | None, bool | None]:
        state = webconfig.WebState(path)
        held = [await state._checks.acquire() for _ in range(int(webconfig.WEB_AUTH_CHECKS.value))]
        busy = await state.allowed("/metrics", header)
        for _ in held:
            state._checks.release()
        return busy, await state.allowed("/metrics", header)

    assert asyncio.run(run()) == (None, True)


def test_a_flood_of_guesses_for_one_user_does_not_hold_another_users_first_login(tmp_path):
    """Guesses queue in their user's lane: another user's first login waits for at most one check of
    each other lane, not for the whole flood (the order is asserted, not a time)."""
    from exporter.serve import webconfig

    path = tmp_path / "web.yml"
    path.write_text(f"basic_auth_users:\n  a: '{_hash(PASSWORD, 6)}'\n  b: '{_hash(PASSWORD, 6)}'\n")

    def header(user: str, password: str) -> str:
        return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    async def run() -> tuple[list[str], list[bool | None]]:
        state = webconfig.WebState(path)
        done: list[str] = []

        async def login(user: str, password: str) -> bool | None:
            ok = await state.allowed("/metrics", header(user, password))
            done.append(user)
            return ok

        flood = [asyncio.create_task(login("b", f"wrong-{i}")) for i in range(30)]
        flood += [asyncio.create_task(login(f"nobody-{i}", "x")) for i in range(10)]
        await asyncio.sleep(0)  # every guess is queued before the first login arrives
        first = await login("a", PASSWORD)
        results = await asyncio.gather(*flood)
        assert first is True
        return done, results

    done, results = asyncio.run(run())
    assert done.index("a") <= 4, done  # behind at most the checks already running and one per lane
    assert results.count(False) == 40


# ---- the docs say every limit ---------------------------------------------------------------------------


def test_the_web_config_page_names_every_limit_and_the_long_password_rule():
    page = (REPO / "docs" / "web-config.md").read_text()
    for key, entry in table().items():
        if key.startswith("web."):
            assert f"`{key}`" in page, key
            shown = f"{entry.value / (1 << 20):g} MiB" if entry.unit == "bytes" else f"{entry.value:g}"
            assert shown in page, (key, shown)
    assert "72 bytes" in page
    assert "(docs/web-config.md)" in (REPO / "README.md").read_text()
