"""The real command's rough edges: what a new user sees when a pipe closes, a port is taken, a value is
wrong or a flag is missing from help. Each test runs ``python -m exporter`` as a user would."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from scripts.stack import free_port
from tests.conftest import EXAMPLES, REPO, real_nvml_present
from tests.timing import HANG_GUARD_S

PROG = "gpu-bottleneck-exporter"
STARVATION = EXAMPLES / "starvation_h100x8.csv.gz"
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) \S+: ")


def _run(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "exporter", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )


def _one_line_error(result: subprocess.CompletedProcess, status: int, *words: str) -> None:
    assert result.returncode == status, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gpu-bottleneck-exporter: ") and "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_replay_into_a_closed_pipe_exits_quietly():
    """`replay TRACE --json | head -1`: the reader goes away after one line; no traceback, status 0."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "replay", str(STARVATION), "--json"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # what head does after its line
    stderr = proc.stderr.read()
    assert proc.wait(timeout=120) == 0, stderr
    assert first.startswith('{"event": "verdict"')
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr and "Exception ignored" not in stderr


@pytest.mark.skipif(real_nvml_present(), reason="this machine has a real NVIDIA driver")
@pytest.mark.parametrize(
    "args", [("replay", str(STARVATION)), ("replay", str(STARVATION), "--json"), ("scenarios",)]
)
def test_output_to_a_full_disk_is_one_line(args):
    """stdout on a full disk (/dev/full): one line naming stdout and its reason, status 1, no traceback."""
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, "-m", "exporter", *args],
            cwd=REPO,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last == "gpu-bottleneck-exporter: cannot write to stdout (No space left on device)", result.stderr
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("--expected-gpus", "4", "doctor", "--simulate", "healthy", "--json"),
        ("--expected-gpus=4", "doctor", "--simulate", "healthy", "--json"),
        ("doctor", "--expected-gpus", "4", "--simulate", "healthy", "--json"),
    ],
)
def test_a_commands_flags_may_come_before_it(args):
    """The top-level help lists the flags before any command: typed there, they are the command's."""
    result = _run(*args, timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr  # 1: warn
    assert "NVML lists 8 GPU(s); expected 4 (--expected-gpus)" in json.dumps(json.loads(result.stdout))


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--port", "9400", "replay", "x.csv"), ("unrecognized arguments: --port", "a flag of serve")),
        (("--log-level", "debug", "scenarios"), ("unrecognized arguments: --log-level", "not of scenarios")),
    ],
)
def test_a_flag_before_a_command_that_does_not_take_it_is_one_line(args, words):
    result = _run(*args)
    _one_line_error(result, 2, *words)
    assert result.stdout == ""


def _sigint_ignored() -> None:
    """A child started as a script's background job is (`nohup cmd &`): SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("command", ["serve", "record"])
def test_serve_and_record_stop_on_sigint_even_when_started_with_it_ignored(tmp_path, command):
    """`nohup gpu-bottleneck-exporter ... &` then `kill -INT`: the long-running commands handle SIGINT
    themselves, so it stops them cleanly (status 0) whatever they inherited."""
    port = free_port()
    args = ["--simulate", "healthy", "--sim-gpus", "1", "--interval", "0.5"]
    args += ["--port", str(port), "--listen-address", "127.0.0.1"] if command == "serve" else ["-o", "-"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", command, *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_sigint_ignored,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        if command == "serve":
            deadline = time.monotonic() + HANG_GUARD_S
            while time.monotonic() < deadline and not _ready(port):
                assert proc.poll() is None, proc.stderr.read()
                time.sleep(0.1)
        else:
            assert proc.stdout.readline().startswith("timestamp")  # recording: its header is out
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0 and "Traceback" not in err, err


def _ready(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_record_that_saw_no_gpu_fails_and_leaves_no_file(tmp_path):
    out = tmp_path / "node.csv"
    result = _run("record", "-o", str(out), "--duration", "0.5", "--pod-resources-socket", "")
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("gpu-bottleneck-exporter: ")]
    said = "recorded nothing: no GPU answered (see the warnings above)"
    assert errors == [f"gpu-bottleneck-exporter: {said}; {out} not written"]
    assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []  # neither the trace nor a temporary file


@pytest.mark.parametrize("duration", ["-5", "0", "soon", "inf"])
def test_record_rejects_a_duration_that_is_not_positive(tmp_path, duration):
    result = _run("record", "-o", str(tmp_path / "x.csv"), "--duration", duration)
    _one_line_error(result, 2, "--duration: must be")
    assert list(tmp_path.iterdir()) == []


def test_record_offers_no_listen_flags_and_ignores_their_variables(tmp_path):
    help_text = _run("record", "--help").stdout
    assert "--port" not in help_text and "--listen-address" not in help_text
    assert "--simulate" in help_text and "--duration" in help_text
    result = _run("record", "-o", str(tmp_path / "x.csv"), "--port", "9612")
    assert result.returncode == 2 and "unrecognized arguments: --port 9612" in result.stderr
    # serve's variables are serve's: a bad GBE_PORT does not stop a recording
    result = _run(
        "record", "-o", str(tmp_path / "x.csv"), "--duration", "1.2", "--simulate", "healthy",
        "--sim-gpus", "1", "--interval", "0.5", env={"GBE_PORT": "abc"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "x.csv").read_text().startswith("timestamp, index, name")


def test_a_taken_port_is_one_line_before_anything_starts():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _run("--simulate", "healthy", "--listen-address", "127.0.0.1", "--port", str(port))
    _one_line_error(result, 1, f"cannot listen on 127.0.0.1:{port}", "in use")
    assert (
        "serving" not in result.stdout + result.stderr and "simulating" not in result.stdout + result.stderr
    )


def test_top_level_help_shows_the_serve_options():
    result = _run("--help")
    assert result.returncode == 0
    for flag in ("--simulate", "--port", "--listen-address", "--sim-gpus", "GBE_PORT", "GBE_SIMULATE"):
        assert flag in result.stdout, flag
    assert "serve options (the default command)" in result.stdout


@pytest.mark.parametrize(
    ("args", "env", "origin"),
    [
        (["--port", "abc"], {}, "--port: must be a whole number, not 'abc'"),
        ([], {"GBE_PORT": "abc"}, "GBE_PORT: must be a whole number, not 'abc'"),
        (["--interval", "fast"], {}, "--interval: must be a number, not 'fast'"),
        ([], {"GBE_SIM_GPUS": "eight"}, "GBE_SIM_GPUS: must be a whole number"),
        (["--detail", "nvlink,xids"], {}, "--detail: unknown detail xids: choose from nvlink, p2p, xid"),
    ],
)
def test_a_value_that_is_not_a_number_names_the_flag_or_variable(args, env, origin):
    result = _run(*args, env=env)
    _one_line_error(result, 2, origin)
    assert "invalid literal" not in result.stderr


def test_simulated_gpus_must_exist():
    result = _run("--simulate", "data_starvation:gpus=99")
    _one_line_error(result, 2, "--simulate: gpus=99", "the simulated node has 8 GPUs (0-7")
    result = _run("--simulate", "data_starvation:gpus=1+3", "--sim-gpus", "2")
    _one_line_error(result, 2, "gpus=3", "has 2 GPUs", "--sim-gpus")


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"GBE_SIMULATE": "nosuch"}, ("GBE_SIMULATE: unknown scenario 'nosuch'",)),
        ({"GBE_SIMULATE": "comm_hang:gpus=12"}, ("GBE_SIMULATE: gpus=12",)),
        ({"GBE_INTERVAL": "-1"}, ("GBE_INTERVAL: interval must be positive",)),
        ({"GBE_DETAIL": "links"}, ("GBE_DETAIL: unknown detail links",)),
        ({"GBE_WINDOW": "0.5", "GBE_INTERVAL": "1"}, ("GBE_WINDOW: window must be at least one interval",)),
    ],
)
def test_errors_from_a_variable_name_the_variable(env, words):
    result = _run(env=env)
    _one_line_error(result, 2, *words)
    assert "--simulate" not in result.stderr and "--interval" not in result.stderr


def test_uvicorn_lines_share_the_exporters_log_format_and_sigusr1_tells_the_simulations_cpu():
    """One simulated exporter: every line in one format; SIGUSR1 logs the simulation's CPU so far (the
    benchmarks take it out of the exporter's, phase by phase) and the exporter keeps serving."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "--simulate", "healthy", "--sim-gpus", "1"],
        cwd=REPO,
        env={**os.environ, "GBE_PORT": str(port), "GBE_LISTEN_ADDRESS": "127.0.0.1", "GBE_INTERVAL": "0.5"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        for _ in range(2):
            proc.send_signal(signal.SIGUSR1)
            time.sleep(0.5)
        assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=15)
    assert proc.returncode == 0, out
    lines = out.splitlines()
    assert any("uvicorn" in line and "Application startup complete" in line for line in lines), out
    used = [float(m) for m in re.findall(r"simulated driver and /proc used ([0-9.]+) s of CPU", out)]
    assert len(used) == 3 and 0 < used[0] <= used[1] <= used[2], out  # twice asked, then at exit
    assert [line for line in lines if not LOG_LINE.match(line)] == []
    assert "INFO:" not in out


def test_the_listening_socket_says_tcp_so_kept_alive_scrapes_are_not_delayed():
    """asyncio turns Nagle off only for accepted sockets whose protocol is TCP; with protocol 0 every
    second scrape on a kept-alive connection waited 40 ms for a delayed ACK (bench/core.py measures it)."""
    from exporter.app import listen

    sock = listen("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP and sock.type == socket.SOCK_STREAM
    finally:
        sock.close()


# ---- mistakes on the command line: one line each -----------------------------------------------


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["replay", "t.csv", "--reprot", "x"], ["(did you mean --report?)", f"see '{PROG} replay --help'"]),
        (["replay", "t.csv", "--jsno"], ["unrecognized arguments: --jsno", "did you mean --json?"]),
        (["--simualte", "healthy"], ["did you mean --simulate?", "see '" + PROG + " --help'"]),
        (["replay", "t.csv", "--port", "9612"], ["--port is a flag of serve, not of replay"]),
        (["replya", "t.csv"], ["did you mean the command replay?"]),
        (["replay", "t.csv", "--verbose"], ["unrecognized arguments: --verbose; see"]),
        (["replay"], ["name a trace file, or --prometheus URL"]),
        (["replay", "t.csv", "--gpus", "x"], ["argument --gpus: invalid int value: 'x'"]),
    ],
)  # fmt: skip
def test_a_mistyped_flag_is_one_line_with_what_it_resembles(args, words):
    result = _run(*args)
    _one_line_error(result, 2, *words)
    assert "usage:" not in result.stderr and result.stdout == ""


def test_the_report_path_is_checked_before_the_replay_starts(tmp_path):
    """A report that cannot be written is said at once: no summary printed, no replay run."""
    result = _run("replay", str(STARVATION), "--report", str(tmp_path / "no" / "such" / "r.html"))
    _one_line_error(result, 2, "--report: cannot write", "r.html (No such file or directory)")
    assert result.stdout == ""
    result = _run("replay", str(STARVATION), "--report", str(tmp_path))
    _one_line_error(result, 2, f"--report: {tmp_path} is a directory")
    assert result.stdout == ""
    # a trace with nothing to replay leaves no empty report behind
    empty = tmp_path / "empty.csv"
    empty.write_text("timestamp, index, utilization.gpu [%]\n")
    result = _run("replay", str(empty), "--report", str(tmp_path / "r.html"))
    _one_line_error(result, 2, "no readable rows")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.csv"]


@pytest.fixture(scope="module")
def capped_minute(tmp_path_factory) -> Path:
    """The first minute of the power-cap example: power_throttle (a warning) fires on every GPU at 31 s."""
    with gzip.open(EXAMPLES / "power_cap_h100x8.csv.gz", "rt") as f:
        lines = f.readlines()[: 1 + 8 * 80]
    path = tmp_path_factory.mktemp("fail-on") / "capped.csv"
    path.write_text("".join(lines))
    return path


@pytest.mark.parametrize(
    ("fail_on", "status"),
    [
        (None, 0),
        ("any", 3),
        ("warning", 3),  # power_throttle is a warning...
        ("critical", 0),  # ...not critical
        ("power_throttle", 3),
        ("comm_hang,thermal_throttle", 0),
        ("critical,power_throttle", 3),
    ],
)
def test_replay_fail_on_exits_3_when_a_verdict_it_names_fired(capped_minute, capsys, fail_on, status):
    from exporter.cli import main

    args = ["replay", str(capped_minute), "--json"] + (["--fail-on", fail_on] if fail_on else [])
    assert main(args) == status
    out, err = capsys.readouterr()
    summary = json.loads(out.splitlines()[-1])
    assert {v["kind"] for v in summary["verdicts"]} == {"power_throttle"}  # printed whatever the status
    if status == 3:
        assert err.strip().splitlines()[-1] == (
            "gpu-bottleneck-exporter: --fail-on: power_throttle fired on GPUs 0-7 (exit status 3)"
        )
        assert summary["fail_on"]["fired"] == ["power_throttle"]
    else:
        assert "--fail-on" not in err


def test_replay_fail_on_says_when_a_named_verdict_cannot_fire(capped_minute, capsys):
    from exporter.cli import main

    assert main(["replay", str(capped_minute), "--fail-on", "nvlink_degraded"]) == 0
    said = "--fail-on: nvlink_degraded cannot fire on this trace: it needs NVLink link state"
    assert said in capsys.readouterr().err


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("warnign", ["--fail-on: 'warnign' is not", "did you mean warning?", "comm_hang"]),
        ("data_starvaton", ["did you mean data_starvation?"]),
        (",", ["--fail-on: name 'any', a severity or verdict kinds"]),
    ],
)
def test_replay_fail_on_rejects_what_it_does_not_know(value, words):
    _one_line_error(_run("replay", str(STARVATION), "--fail-on", value), 2, *words)


def test_replay_help_documents_fail_on_and_its_exit_status():
    text = " ".join(_run("replay", "--help").stdout.split())
    assert "--fail-on" in text and "exit with status 3" in text
    assert "Exit status: 0 replayed; 3 a verdict named by --fail-on fired" in text
