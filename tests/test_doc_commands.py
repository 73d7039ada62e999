"""Every command line README.md and docs/ show, run as typed: none may be refused for its arguments.

The lines are read from the Markdown (fenced blocks, and inline code that holds a command with an
argument), cut where the shell takes over (a pipe, a redirection, a comment) and run through the command
line's own entry point. What they name stands in small: a file name is a short fixture of its format, a
Prometheus URL a local fake that answers with no series (its refusal is the server's, and the request it
got shows the flags were read), ``serve`` and ``record`` stop once their settings are made. A refusal of the
server or the data is fine; an argparse error, or one line naming a flag, is not."""

from __future__ import annotations

import gzip
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from exporter import cli
from tests.conftest import EXAMPLES, REPO, _missing
from tests.test_logparse import NCCL_220_IB_NVLS

DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
# the program as the docs call it: the installed script, or the package run as a module
# ... where it is the command word: first on the line (after "$ " and VAR=value words), after a pipe, a
# ';' or '&&', or after kubectl exec's '--'
PROGRAM = re.compile(
    r"(?:^\s*(?:\$\s+)?(?:\w+=\S*\s+)*|(?:\||;|&&|\s--)\s+)"
    r"(?:(?:\S*/)?gpu-bottleneck-exporter|(?:\S*/)?python3? -m exporter)(?=\s|$)"
)
FENCE = re.compile(r"^\s*```")
INLINE = re.compile(r"`([^`\n]+)`")
SHELL_STOPS = {"|", "||", "&&", ";", ">", ">>", "2>", "2>&1", "&"}
PROCESS_SUBSTITUTION = re.compile(r"<\([^)]*\)")
# placeholders the docs use for what a reader fills in, and what the test fills in
PLACEHOLDERS = {"SCENARIO": "healthy", "NODE": "node-1"}


@dataclass(frozen=True)
class DocCommand:
    where: str  # file:line
    text: str  # the line as the docs show it (continuations joined)
    argv: tuple[str, ...]  # the words after the program's name
    stdin: str = ""  # the file piped in (`zcat old.csv.gz | ... replay -`), if any

    def __str__(self) -> str:
        return f"{self.where}: {self.text}"


def _logical_lines(text: str) -> Iterator[tuple[int, str, bool]]:
    """(line number, line with its backslash continuations joined, inside a fenced block)."""
    fenced = False
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line, number = lines[i], i + 1
        if FENCE.match(line):
            fenced = not fenced
            i += 1
            continue
        while fenced and line.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line.rstrip()[:-1] + " " + lines[i].strip()
        yield number, line, fenced
        i += 1


def _command(where: str, text: str) -> DocCommand | None:
    """The program's words in one shell line; None when the program is not run there."""
    match = PROGRAM.search(text)
    if match is None:
        return None
    before, rest = text[: match.end()], text[match.end() :]
    stdin = ""
    if re.search(r"\|\s*\S+$", before):  # piped in: a file's content, or a pod's log
        piped = re.search(r"(?:zcat|cat|gunzip -c)\s+(\S+)\s*\|", before)
        stdin = piped.group(1) if piped else "nccl-from-kubectl.log"
    rest = PROCESS_SUBSTITUTION.sub(" nccl-from-kubectl.log ", rest)
    words = shlex.split(rest, comments=True)
    argv: list[str] = []
    for word in words:
        if word in SHELL_STOPS or word.startswith(">"):
            break
        argv.append(PLACEHOLDERS.get(word, word))
    return DocCommand(where, text.strip(), tuple(argv), stdin)


def doc_commands() -> list[DocCommand]:
    found: list[DocCommand] = []
    for path in DOCS:
        name = path.relative_to(REPO).as_posix()
        for number, line, fenced in _logical_lines(path.read_text(encoding="utf-8")):
            where = f"{name}:{number}"
            if fenced:
                command = _command(where, line)
                if command is not None:
                    found.append(command)
                continue
            for span in INLINE.findall(line):  # prose: `gpu-bottleneck-exporter replay node.csv`
                command = _command(where, span)
                if command is not None and len(command.argv) >= 2:  # a bare command name is not a line
                    found.append(command)
    return found


COMMANDS = doc_commands()


def test_the_docs_commands_are_found():
    """The extraction itself: the diagnose page's three first commands and the other forms are there."""
    texts = [c.argv for c in COMMANDS]
    url = "http://prometheus.monitoring:9090"
    assert ("replay", "--prometheus", url, "--from", "-7d") in texts
    assert (
        "replay",
        "--prometheus",
        url,
        "--from",
        "-7d",
        "--selector",
        'namespace="ml-training"',
        "--report",
        "ml-training.html",
    ) in texts
    assert (
        "replay",
        "--prometheus",
        url,
        "--from",
        "-1d",
        "--json",
        "--fail-on",
        "comm_hang,data_starvation",
    ) in texts
    assert ("doctor", "--expected-gpus", "8") in texts
    assert ("--help",) in texts  # python -m exporter --help
    assert any(c.stdin for c in COMMANDS)  # zcat old.csv.gz | gpu-bottleneck-exporter replay -
    assert any("nccl-from-kubectl.log" in c.argv for c in COMMANDS)  # nccl-check <(kubectl logs ...)
    assert len(COMMANDS) >= 30


# ---- what the commands name, small ------------------------------------------------------------------


def _smi_rows(source: Path, seconds: int) -> list[str]:
    """The header and the first ``seconds`` of an example trace (nvidia-smi's CSV, 8 GPUs a second)."""
    with gzip.open(source, "rt", encoding="utf-8") as f:
        return [line for _, line in zip(range(1 + 8 * seconds), f, strict=False)]


def _poller_rows() -> str:
    """A CSV without a header line in the columns docs/commands.md gives with --columns."""
    return "".join(
        f"2026/11/24 10:{i // 60:02d}:{i % 60:02d}.000, {90 + i % 5}, {280 + i % 7}.5, 20480, 81559\n"
        for i in range(120)
    )


def _write_fixtures(root: Path) -> dict[str, Path]:
    """Every file name the docs' commands read, as a small file of its format, under ``root``."""
    csv = "".join(_smi_rows(EXAMPLES / "healthy_h100x8.csv.gz", 90))
    formats = REPO / "tests" / "data" / "trace_formats"
    files = {
        "gpus.csv": csv,
        "trace.csv": csv,
        "TRACE.csv": csv,
        "node.csv": csv,
        "notebook.csv": csv,
        "poller.csv": _poller_rows(),
        "dmon.log": (formats / "dmon_dt_h100.log").read_text(),
        "dcgm.log": (formats / "dcgmi_dmon_h100.log").read_text(),
        "rank0.log": "\n".join(NCCL_220_IB_NVLS) + "\n",
        "nccl-from-kubectl.log": "\n".join(NCCL_220_IB_NVLS) + "\n",
        "apps.csv": "timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n"
        "2026/03/01 10:00:00.000, GPU-0, 4242, /opt/conda/bin/torchrun, 61234 MiB\n",
    }
    paths = {}
    for name, text in files.items():
        (root / name).write_text(text, encoding="utf-8")
        paths[name] = root / name
    gz = {
        "old.csv.gz": csv,
        # the example the docs replay, cut to its first minutes: the command as typed, quickly
        "examples/traces/starvation_h100x8.csv.gz": "".join(
            _smi_rows(EXAMPLES / "starvation_h100x8.csv.gz", 300)
        ),
    }
    for name, text in gz.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(gzip.compress(text.encode()))
        paths[name] = root / name
    return paths


class _NoSeries(BaseHTTPRequestHandler):
    """A Prometheus that knows no series: every API call answers an empty success."""

    seen: list[tuple[str, dict[str, list[str]]]] = []

    def _answer(self, query: str) -> None:
        self.seen.append((urllib.parse.urlsplit(self.path).path, urllib.parse.parse_qs(query)))
        body = json.dumps({"status": "success", "data": []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer(urllib.parse.urlsplit(self.path).query)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self._answer(self.rfile.read(length).decode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def fake_prometheus() -> Iterator[tuple[str, list]]:
    seen: list[tuple[str, dict[str, list[str]]]] = []
    handler = type("Handler", (_NoSeries,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


# ---- running them -------------------------------------------------------------------------------------


@dataclass
class Ran:
    status: int
    stdout: str
    stderr: str
    dry: dict[str, object]  # what serve or record were handed, when the command was one of them


def _run(argv: list[str], stdin: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> Ran:
    """The command line's entry point, in this process; serve and record stop once their settings exist."""
    dry: dict[str, object] = {}
    import exporter.app
    import exporter.offline.record

    monkeypatch.setattr(exporter.app, "serve", lambda settings, origins: dry.update(serve=settings))
    monkeypatch.setattr(
        exporter.offline.record,
        "record",
        lambda settings, output, duration: dry.update(record=(settings, output, duration)),
    )
    capsys.readouterr()
    with stdin.open(encoding="utf-8") as piped:  # a real file: stdin is read through its descriptor
        monkeypatch.setattr(sys, "stdin", piped)
        try:
            status = cli.main(argv)
        except SystemExit as exc:  # argparse's way out: a bad flag, or --help / --version
            status = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return Ran(status, out.out, out.err, dry)


def _refused_for_arguments(ran: Ran) -> bool:
    """A usage refusal: argparse's one line (it points at --help) or one naming a flag."""
    err = ran.stderr
    return ran.status == 2 and (
        "--help'" in err
        or re.search(r"^gpu-bottleneck-exporter: (--|-[a-zA-Z] |GBE_|argument |replay: )", err, re.M)
        is not None
    )


# what the docs name of an experiment tracker's runs: made by the trackers' own libraries when a command
# names them (docs/diagnose.md, "Diagnose your tracked runs")
TRACKED = ("wandb/latest-run", "llama-system.csv", "mlruns/", "mlflow.db", "--mlflow")


@pytest.fixture(scope="module")
def tracked_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """A short healthy run in an MLflow file store (its Default experiment) and in W&B, and one in a
    SQLite store, made once for the commands that name them."""
    from devtools import tracker_runs

    for package in ("mlflow", "wandb"):
        try:
            __import__(package)
        except ImportError:
            _missing(f"the {package} package (the {package} extra)")
    root = tmp_path_factory.mktemp("tracked")
    files = tracker_runs.make_all(root / "files", tracker_runs.Only("healthy", 90, sqlite=False))["healthy"]
    sqlite = tracker_runs.make_all(root / "sqlite", tracker_runs.Only("healthy", 90, sqlite=True))["healthy"]
    yield {"files": files, "sqlite": sqlite}


def _tracked_names(argv: list[str], runs: dict, into: Path) -> list[str]:
    """The docs' tracker runs laid out under ``into`` as the docs name them; RUN_ID filled in."""
    import shutil

    files, sqlite = runs["files"], runs["sqlite"]
    shutil.copytree(files.wandb_dir.parent, into / "wandb", symlinks=True)
    shutil.copy(files.smi_csv.parent / "wandb-export-healthy.csv", into / "llama-system.csv")
    shutil.copytree(files.mlflow_store, into / "mlruns")
    shutil.copy(sqlite.mlflow_store, into / "mlflow.db")
    run_id = sqlite.mlflow_run_id if "mlflow.db" in argv else files.mlflow_run_id
    return [word.replace("RUN_ID", run_id) for word in argv]


@pytest.mark.parametrize("command", COMMANDS, ids=[c.where for c in COMMANDS])
def test_a_documented_command_runs_as_typed(command, tmp_path, monkeypatch, capsys, fake_prometheus, request):
    url, seen = fake_prometheus
    fixtures = _write_fixtures(tmp_path)
    if any(word.startswith(TRACKED) for word in command.argv):
        argv = _tracked_names(list(command.argv), request.getfixturevalue("tracked_runs"), tmp_path)
        command = DocCommand(command.where, command.text, tuple(argv), command.stdin)
        fixtures["llama-system.csv"] = tmp_path / "llama-system.csv"
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NO_COLOR", raising=False)
    for name in [k for k in os.environ if k.startswith("GBE_")]:
        monkeypatch.delenv(name)
    argv = list(command.argv)
    prometheus = "--prometheus" in argv
    if prometheus:
        i = argv.index("--prometheus") + 1
        argv[i] = url  # the docs' Prometheus, faked here
    for word in argv:
        if word in fixtures or not re.fullmatch(r"[\w./-]+\.(csv|log|gz)", word):
            continue
        if argv[argv.index(word) - 1] not in ("-o", "--output"):
            pytest.fail(f"{command}: no fixture stands in for {word}: add one to _write_fixtures")
    stdin = tmp_path / "stdin"  # what the pipe into the command carries (zcat's output: unzipped)
    piped = fixtures[command.stdin].read_bytes() if command.stdin else b""
    stdin.write_bytes(gzip.decompress(piped) if command.stdin.endswith(".gz") else piped)
    seen.clear()
    began = time.time()

    ran = _run(argv, stdin, monkeypatch, capsys)

    assert not _refused_for_arguments(ran), f"{command}\nrefused for its arguments: {ran.stderr}"
    assert "Traceback" not in ran.stderr, ran.stderr
    name = next((w for w in argv if w in cli.COMMANDS), "serve")
    if argv in (["--help"], ["-h"], ["--version"]) or name == "scenarios":
        assert ran.status == 0 and ran.stdout
    elif name in ("serve", "record"):
        assert ran.status == 0 and name in ran.dry, f"{command}: {ran.stderr}"
    elif prometheus:  # the fake has no series: the server's refusal, after the flags were read
        assert ran.status == 2 and "no GPU series" in ran.stderr, ran.stderr
        series = [params for path, params in seen if path == "/api/v1/series"]
        assert series, f"{command}: the fake Prometheus was never asked"
        start = float(series[0]["start"][0])
        back = {"-7d": 7 * 86400, "-1d": 86400}[argv[argv.index("--from") + 1]]
        assert abs((began - back) - start) < 3600, "--from was not read as typed"  # not a duration
        if "--selector" in argv:
            assert argv[argv.index("--selector") + 1] in series[0]["match[]"][0]
    elif "--mlflow" in argv:  # no MLflow server here: its refusal in one line, after the flags were read
        assert ran.status == 2 and "MLflow could not read the run" in ran.stderr, ran.stderr
    elif name == "replay":
        assert ran.status in (0, cli.FAIL_ON_STATUS), f"{command}: {ran.stderr}"
        assert ran.stdout or "--report" in argv
    elif name == "doctor":  # pass, warn or fail on this node: the table (or JSON) is printed either way
        assert ran.status in (0, 1, 2) and ("node doctor:" in ran.stdout or '"checks"' in ran.stdout), (
            ran.stderr
        )
    elif name == "nccl-check":
        assert ran.status in (0, 1, 2) and ran.stdout, ran.stderr
    else:
        pytest.fail(f"{command}: a command this test does not know how to judge: {name}")


def test_the_headline_command_parses_with_and_without_equals():
    """--from/--to take '-7d' style times as the next word, or after '='."""
    from exporter.offline.promhistory.command import request_from

    now = 1_800_000_000.0
    for argv in (
        ["replay", "--prometheus", "http://p:9090", "--from", "-7d", "--to", "-2h"],
        ["replay", "--prometheus", "http://p:9090", "--from=-7d", "--to=-2h"],
        ["replay", "--to", "-2h", "--prometheus", "http://p:9090", "--from", "-7d", "--json"],
        ["replay", "--prometheus=http://p:9090", "--from", "-168h", "--to=-2h"],
    ):
        args = cli.build_parser().parse_args(argv)
        request = request_from(args, now)
        assert (request.start, request.end) == (now - 7 * 86400, now - 7200), argv


def test_a_flag_value_that_is_another_flag_is_still_refused(capsys):
    """The gluing of '-7d' values does not swallow the next flag: a missing value stays a usage error."""
    with pytest.raises(SystemExit) as exc:
        cli.build_parser().parse_args(["replay", "--prometheus", "http://p:9090", "--from", "--json"])
    assert exc.value.code == 2
    assert "--from: expected one argument" in capsys.readouterr().err


def test_the_headline_command_as_a_user_types_it(fake_prometheus):
    """The first command of docs/diagnose.md, through the real program: only the server refuses it."""
    url, _ = fake_prometheus
    result = subprocess.run(
        [sys.executable, "-m", "exporter", "replay", "--prometheus", url, "--from", "-7d"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.startswith(f"gpu-bottleneck-exporter: {url}: no GPU series between "), result.stderr
