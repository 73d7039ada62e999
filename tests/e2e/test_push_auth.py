"""POST /v1/progress authorised apart from scrapes, through the real command: with --progress-token-file a
push needs that bearer token (the scrape users' passwords do not do), a push without it changes nothing,
scrapes keep their basic auth; a bad body is 400 with one line whatever its shape."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import httpx
import pytest

from tests.e2e.test_http import families
from tests.faults.http_command import Command

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
        deadline = time.monotonic() + 20
        while _post(cmd, REPORT, Authorization=f"Bearer {TOKEN}").status_code == 404:
            assert time.monotonic() < deadline, cmd.text()  # until the kubelet said which pods hold GPUs
            time.sleep(0.2)
        yield cmd
    finally:
        assert cmd.stop() == 0, cmd.text()
        assert "Traceback" not in cmd.text(), cmd.text()


def test_a_push_with_the_token_sets_the_step(pushed):
    assert _post(pushed, {**REPORT, "step": 50}, Authorization=f"Bearer {TOKEN}").status_code == 204
    deadline = time.monotonic() + 10
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
