"""Web config reloads off the event loop: files are read on a worker thread with a deadline, a FIFO or a
device is refused unread, the old settings stay in force on any failure with one log line; YAML tags are
refused; a bad file named by the variable it came from."""

from __future__ import annotations

import logging
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from exporter.serve import webconfig
from exporter.serve.webconfig import WebConfigError, WebState, load, parse
from tests.conftest import REPO
from tests.faults.certs import Authority
from tests.faults.http_command import Command
from tests.timing import HANG_GUARD_S, returns


def _tls_config(folder: Path, cert: str, key: str, name: str = "web.yml") -> Path:
    path = folder / name
    path.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n")
    return path


def test_a_fifo_in_place_of_the_file_or_a_certificate_is_refused_unread(tmp_path):
    """Opened, a FIFO no one writes to blocks for ever, and /dev/zero never ends: refused unread."""
    os.mkfifo(tmp_path / "fifo")
    issued = Authority(tmp_path, "ca").issue("server")

    def refused(path: Path, words: str) -> None:
        with pytest.raises(WebConfigError, match=words):
            load(path)

    returns(lambda: refused(tmp_path / "fifo", "not a regular file"), "a FIFO web config")
    returns(
        lambda: refused(_tls_config(tmp_path, "fifo", str(issued.key)), "fifo is not a regular file"),
        "a FIFO cert",
    )
    returns(
        lambda: refused(_tls_config(tmp_path, str(issued.cert), "/dev/zero"), "not a regular file"),
        "/dev/zero",
    )


def test_a_read_that_hangs_is_abandoned_at_the_deadline_and_the_old_config_stays(
    tmp_path, monkeypatch, caplog
):
    issued = Authority(tmp_path, "ca").issue("server")
    state = WebState(_tls_config(tmp_path, str(issued.cert), str(issued.key)))
    before = state.current
    release = threading.Event()
    finished = threading.Event()

    def hung(*args: object, **kwargs: object) -> None:  # a hung mount: it returns when the test says
        release.wait()
        finished.set()

    monkeypatch.setattr(webconfig, "READ_DEADLINE_S", 0.3)
    monkeypatch.setattr(webconfig, "load", hung)
    with caplog.at_level(logging.ERROR, logger="exporter.serve.webconfig"):
        assert returns(state.reload, "a reload whose read hangs") is False
    assert not finished.is_set()  # given up on at the deadline, not waited for
    assert state.current is before and state.reload_errors == 1
    assert [r.getMessage() for r in caplog.records] == [
        f"SIGHUP: keeping the web config in force: {state.path}: not read within 0.3 s (a hung mount?)"
    ]
    reads = threading.active_count()
    assert state.reload() is False  # the stuck read is not joined by another: no thread per SIGHUP
    assert threading.active_count() == reads and state.reload_errors == 2
    assert "still stuck" in caplog.records[-1].getMessage()
    release.set()


def test_sighup_returns_at_once_and_one_more_read_follows_signals_during_a_read(tmp_path, monkeypatch):
    state = WebState(_tls_config(tmp_path, *map(str, _pair(tmp_path))))
    calls, gate = [], threading.Event()
    real = webconfig.load

    def slow(*args, **kwargs):
        calls.append(time.monotonic())
        gate.wait()  # a bcrypt dummy hash of a high cost, a slow disk: until the test opens the gate
        return real(*args, **kwargs)

    monkeypatch.setattr(webconfig, "load", slow)

    def signals() -> None:
        for _ in range(20):
            state.reload_soon()

    returns(signals, "20 SIGHUPs while a read is held")  # the handler only starts a thread
    gate.set()
    deadline = time.monotonic() + HANG_GUARD_S
    while state.reloads < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.3)
    assert len(calls) == 2 and state.reloads == 2  # the one running, and one for all that came during it


def _pair(folder: Path) -> tuple[Path, Path]:
    issued = Authority(folder, "ca").issue("server")
    return issued.cert, issued.key


def test_sighup_with_a_fifo_certificate_keeps_serving_and_the_old_certificate(tmp_path):
    ca = Authority(tmp_path, "ca")
    issued = ca.issue("server")
    config = _tls_config(tmp_path, str(issued.cert), str(issued.key))
    cmd = Command(tmp_path / "log.txt", "--web.config.file", str(config), scheme="https")
    # the timeout is a guard against a hang; no speed is claimed
    client = httpx.Client(verify=ssl.create_default_context(cafile=str(ca.pem)), timeout=60)
    try:
        cmd.wait_ready(client.get)
        os.mkfifo(tmp_path / "hung.pem")
        _tls_config(tmp_path, str(tmp_path / "hung.pem"), str(issued.key))
        cmd.proc.send_signal(signal.SIGHUP)
        for _ in range(10):  # the FIFO never ends: a server that read it would never answer
            scraped = returns(lambda: client.get(cmd.url + "/metrics"), "a scrape after SIGHUP")
            assert scraped.status_code == 200
        deadline = time.monotonic() + HANG_GUARD_S
        while "keeping the web config in force" not in cmd.text():
            assert time.monotonic() < deadline, cmd.text()
            time.sleep(0.1)
        assert "hung.pem is not a regular file" in cmd.text()
        assert (
            httpx.Client(verify=ssl.create_default_context(cafile=str(ca.pem)), timeout=5)
            .get(cmd.url + "/healthz")
            .status_code
            == 200
        )
    finally:
        client.close()
        assert cmd.stop() == 0, cmd.text()
    assert "Traceback" not in cmd.text()


@pytest.mark.parametrize(
    "text",
    [
        "basic_auth_users: !!python/object:os.system {}\n",
        "tls_server_config: !custom\n  cert_file: a\n  key_file: b\n",
        "http_server_config:\n  headers: !!omap []\n",
        "basic_auth_users:\n  me: !!binary JDJ5JDEw\n",
    ],
)
def test_yaml_tags_are_refused_at_their_line(text):
    with pytest.raises(WebConfigError, match=r"line \d+: a YAML tag \(.+\): a web config uses none"):
        parse(text, Path("."))


def test_plain_tags_of_plain_values_are_read():
    assert parse("http_server_config:\n  http2: !!bool true\n", Path(".")).headers == {}


def _serve_with(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "exporter", "--simulate", "healthy", "--port", "1", *args],
        cwd=REPO,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_bad_web_config_is_named_by_the_variable_or_the_flag_it_came_from(tmp_path):
    (tmp_path / "web.yml").write_text("nonsense: 1\n")
    done = _serve_with({"GBE_WEB_CONFIG_FILE": str(tmp_path / "web.yml")})
    assert done.returncode == 2
    assert done.stderr.startswith("gpu-bottleneck-exporter: GBE_WEB_CONFIG_FILE: "), done.stderr
    done = _serve_with(
        {"GBE_WEB_CONFIG_FILE": "/nonexistent"}, "--web.config.file", str(tmp_path / "web.yml")
    )
    assert done.returncode == 2
    assert done.stderr.startswith("gpu-bottleneck-exporter: --web.config.file: "), done.stderr
