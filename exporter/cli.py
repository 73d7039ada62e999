"""Command line: ``serve`` (the default), ``scenarios``, ``replay``, ``record``; flags and GBE_* environment
variables. Every mistake in them is one line naming the flag or variable, and exit status 2: a mistyped
flag too (with the flag it resembles, never the whole usage)."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn, TextIO

from exporter import __version__
from exporter.analysis.workload import CLASSES
from exporter.config.settings import ENV_PREFIX, Settings, SettingsError
from exporter.config.usage import CommandError, UsageError
from exporter.policy.cost import DEFAULT as DEFAULT_PRICES
from exporter.policy.cost import Prices
from exporter.policy.detail import CATEGORIES as DETAIL_CATEGORIES
from exporter.policy.detail import parse_detail

if TYPE_CHECKING:
    from exporter.offline.replay import ReplayResult

PROG = "gpu-bottleneck-exporter"
MAX_RECORD_S = 366 * 86400.0  # record --duration: a year (a timer much longer overflows the clock)
FAIL_ON_STATUS = 3  # replay --fail-on: a named verdict fired (1: the command failed; 2: bad usage or input)
# a value that starts with '-' and a digit: a relative time ('-7d', '-2h') or a negative number
_NEGATIVE_VALUE = re.compile(r"^-\.?\d")


@dataclass(frozen=True)
class Flag:
    flag: str
    field: str
    kind: Callable[[str], object]
    help: str

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.flag.lstrip("-").replace("-", "_").replace(".", "_").upper()


def _paths(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())


def _int(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"must be a whole number, not {text!r}") from None


def _float(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError(f"must be a number, not {text!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"must be a finite number, not {text!r}")
    return value


def _onoff(text: str) -> bool:
    if text.strip().lower() in ("on", "true", "1", "yes"):
        return True
    if text.strip().lower() in ("off", "false", "0", "no", ""):
        return False
    raise ValueError(f"must be on or off, not {text!r}")


def _level(text: str) -> str:
    if text.lower() not in ("debug", "info", "warning", "error"):
        raise ValueError(f"log level must be debug, info, warning or error, not {text!r}")
    return text.lower()


SERVE_FLAGS = (
    Flag("--listen-address", "listen_address", str, "address to bind; all interfaces by default"),
    Flag("--port", "port", _int, "HTTP port for /metrics, /healthz and /readyz"),
    Flag("--interval", "interval_s", _float, "seconds between collections"),
    Flag("--window", "window_s", _float, "seconds of samples kept for window statistics and analysis"),
    Flag(
        "--collect-timeout",
        "collect_timeout_s",
        _float,
        "seconds after which a collection that has not returned is reported as timed out",
    ),
    Flag(
        "--slow-interval",
        "slow_interval_s",
        _float,
        "seconds between reads of slowly changing GPU state (fabric, processes, power limits, memory clock)",
    ),
    Flag("--p2p-interval", "p2p_interval_s", _float, "seconds between reads of the GPU-pair P2P status"),
    Flag("--proc-root", "proc_root", str, "where the node's /proc is mounted"),
    Flag("--sys-root", "sys_root", str, "where the node's /sys is mounted"),
    Flag("--host-root", "host_root", str, "where the node's root filesystem (or its /dev/shm) is mounted"),
    Flag("--shm-paths", "shm_paths", _paths, "comma-separated shm mountpoints always reported"),
    Flag(
        "--pod-resources-socket",
        "pod_resources_socket",
        str,
        "the kubelet's PodResources socket, for pod labels; empty to turn pod attribution off",
    ),
    Flag(
        "--pod-resources-interval", "pod_resources_interval_s", _float, "seconds between PodResources reads"
    ),
    Flag(
        "--simulate",
        "simulate",
        str,
        "run on a simulated node instead of the real NVML: SCENARIO[:key=value,...] (see 'scenarios')",
    ),
    Flag("--sim-gpus", "sim_gpus", _int, "number of simulated GPUs"),
    Flag(
        "--expected-gpus",
        "expected_gpus",
        _int,
        "GPUs the node should have, for the node checks (0: count the bus)",
    ),
    Flag("--log-level", "log_level", _level, "debug, info, warning or error"),
    Flag(
        "--pod-logs",
        "pod_logs",
        str,
        "follow the logs of the pods holding GPUs under this directory (the node's /var/log/pods) for "
        "progress, NCCL transports and errors; empty: off",
    ),
    Flag(
        "--log-patterns",
        "log_patterns",
        str,
        "a JSON file of extra progress patterns: [{name, regex, step, seconds, seconds_unit}]",
    ),
    Flag("--progress-api", "progress_api", _onoff, "on: accept POST /v1/progress {namespace, pod, step}"),
    Flag(
        "--process-owners",
        "process_owners",
        _onoff,
        "off: do not map GPU processes to their pods through the host's /proc (it needs the host's PID "
        "namespace: hostPID)",
    ),
    Flag(
        "--progress-token-file",
        "progress_token_file",
        str,
        "a file holding the token a push must carry (Authorization: Bearer), apart from the scrape "
        "credentials; SIGHUP re-reads it; empty: pushes follow the web config's rules",
    ),
    Flag(
        "--progress-check-address",
        "progress_check_address",
        _onoff,
        "on: accept a push only from the address of the pod it reports for, as the Kubernetes API says "
        "(needs get on pods)",
    ),
    Flag(
        "--web.config.file",
        "web_config_file",
        str,
        "TLS and basic authentication, in the web config format Prometheus exporters share; SIGHUP "
        "re-reads it",
    ),
    Flag(
        "--detail",
        "detail",
        parse_detail,
        "comma-separated detail series beyond the per-GPU defaults: "
        + ", ".join(DETAIL_CATEGORIES)
        + ", all",
    ),
    Flag(
        "--price",
        "price",
        str,
        "what a GPU-hour costs, exposed as gpu_node_price_per_hour for the cost rules: 'MODEL=PRICE,...' "
        "over the example prices of docs/cost.md (MODEL: part of the NVML name; '*=PRICE': any other model), "
        "or 'off'; examples, not quotes: set your own",
    ),
    Flag(
        "--currency",
        "currency",
        lambda t: t.strip().upper(),
        "the prices' currency, a three-letter code (USD, EUR)",
    ),
)
# record samples like serve but serves nothing: it takes every serve flag except these
LISTEN_FLAGS = frozenset({"--listen-address", "--port", "--web.config.file", "--progress-token-file"})
RECORD_FLAGS = tuple(f for f in SERVE_FLAGS if f.flag not in LISTEN_FLAGS)


def _add_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup, flags: Sequence[Flag]) -> None:
    defaults = Settings()
    for f in flags:
        default = getattr(defaults, f.field)
        shown = (
            ",".join(sorted(default) if isinstance(default, frozenset) else default)
            if isinstance(default, tuple | frozenset)
            else default
        )
        parser.add_argument(
            f.flag,
            dest=f.field,
            default=None,
            metavar=f.field.upper().removesuffix("_S"),
            help=f"{f.help} (env {f.env}; default {shown!r})",
        )


def settings_from(
    args: argparse.Namespace, environ: dict[str, str], flags: Sequence[Flag] = SERVE_FLAGS
) -> Settings:
    """Flags win over environment variables, which win over defaults. Bad values raise UsageError naming
    the flag or the variable the value came from. Only ``flags`` (the command's own) are read."""
    values: dict[str, object] = {}
    origins = {f.field: f.flag for f in flags}
    for f in flags:
        raw, origin = getattr(args, f.field, None), f.flag
        if raw is None and f.env in environ:
            raw, origin = environ[f.env], f.env
        if raw is None:
            continue
        origins[f.field] = origin
        try:
            values[f.field] = f.kind(raw)
        except ValueError as exc:
            raise UsageError(f"{origin}: {exc}") from None
    try:
        settings = Settings(**values)  # type: ignore[arg-type]
    except SettingsError as exc:
        raise UsageError(
            "; ".join(f"{origins.get(field, field)}: {text}" for field, text in exc.problems)
        ) from None
    if settings.simulate:
        _check_scenario(settings, origins["simulate"], origins["sim_gpus"])
    if settings.log_patterns:
        _check_patterns(settings.log_patterns, origins["log_patterns"])
    return settings


def _origin(args: argparse.Namespace, f: Flag) -> str:
    """Where a setting's value came from: its flag, else its variable when that is set, else the flag."""
    return f.env if getattr(args, f.field, None) is None and f.env in os.environ else f.flag


def _doctor_flags() -> tuple[Flag, ...]:
    """The serve flags of the Settings fields the doctor reads (it names them)."""
    from exporter.doctor.command import FIELDS

    return tuple(f for f in SERVE_FLAGS if f.field in FIELDS)


def _check_patterns(path: str, origin: str) -> None:
    """The progress patterns file reads and every entry compiles."""
    from exporter.podlogs.logparse import PatternError, read_patterns

    try:
        read_patterns(path)
    except OSError as exc:
        raise UsageError(f"{origin}: cannot read {path} ({exc.strerror})") from None
    except (PatternError, UnicodeDecodeError) as exc:
        raise UsageError(f"{origin}: {path}: {exc}") from None


def _check_scenario(settings: Settings, origin: str, gpus_origin: str) -> None:
    """The scenario parses and names only GPUs the simulated node has."""
    from exporter.sim import ScenarioError, parse_scenario

    try:
        scenario = parse_scenario(settings.simulate)
    except ScenarioError as exc:
        raise UsageError(f"{origin}: {exc}") from None
    outside = [g for g in scenario.gpus if not 0 <= g < settings.sim_gpus]
    if outside:
        raise UsageError(
            f"{origin}: gpus={'+'.join(map(str, outside))}: the simulated node has {settings.sim_gpus} GPUs "
            f"(0-{settings.sim_gpus - 1}; {gpus_origin} sets how many)"
        )


def _formats_epilog() -> str:
    from exporter.offline import traceformats

    commands = [
        (traceformats.NVIDIA_SMI_CSV, traceformats.NVIDIA_SMI_CSV_COMMAND),
        *((m.NAME, m.COMMAND) for m in traceformats.READERS),
    ]
    return (
        "formats it reads, and a command that writes each:\n"
        + "\n".join(f"  {name}:\n      {command}" for name, command in commands)
        + "\nLogs without times are placed by --period and --start."
    )


class _Parser(argparse.ArgumentParser):
    """argparse, but a mistake is one line (the error, the flag it resembles, where help is) instead of the
    usage: twenty lines of it buried the one that said what was wrong."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{PROG}: {message}; see '{self.prog} --help'\n")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        # each command's parser comes through here too (argparse hands it the words after its name)
        return super().parse_known_args(self._glue_values(args), namespace)

    def _glue_values(self, args: Sequence[str] | None) -> list[str] | None:
        """``--from -7d`` as ``--from=-7d``: argparse takes a word that starts with '-' and is not a plain
        number for a flag, so a flag of this parser that takes one value would stop at the negative
        relative time (or '-1.5e3') after it. Glued, the value is read as if typed with '='."""
        if args is None:
            return None
        words = list(args)
        out: list[str] = []
        i = 0
        while i < len(words):
            word = words[i]
            if word == "--":  # the rest are positionals: leave them as typed
                return out + words[i:]
            action = self._option_string_actions.get(word)
            takes_one = action is not None and action.nargs is None and action.option_strings
            if takes_one and i + 1 < len(words) and _NEGATIVE_VALUE.match(words[i + 1]):
                out.append(f"{word}={words[i + 1]}")
                i += 2
                continue
            out.append(word)
            i += 1
        return out

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = self._command(getattr(parsed, "command", None))
            hint = self._hint(command, extras)
            # serve's flags are the top level's too (the default command): its help is the top level's
            where = self if command.prog == f"{PROG} serve" else command
            where.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return parsed

    def _commands(self) -> dict[str, argparse.ArgumentParser]:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                return dict(action.choices)
        return {}

    def _command(self, name: str | None) -> argparse.ArgumentParser:
        return self._commands().get(name or "", self)

    def _hint(self, command: argparse.ArgumentParser, extras: list[str]) -> str:
        """What the first unrecognized word was likely meant to be: a flag of this command it resembles,
        the command that has such a flag, or (the first word of all) a command."""
        from exporter.policy.thresholds import CLI_SUGGESTION_SIMILARITY

        cutoff = CLI_SUGGESTION_SIMILARITY.value
        word = extras[0].split("=", 1)[0]
        if word.startswith("--"):
            others = [
                name
                for name, sub in self._commands().items()
                if sub is not command and any(word in a.option_strings for a in sub._actions)
            ]
            if others:
                shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
                return f" ({word} is a flag of {shown}, not of {command.prog.removeprefix(PROG).strip()})"
            own = [o for a in command._actions for o in a.option_strings if o.startswith("--")]
            close = difflib.get_close_matches(word, own, n=1, cutoff=cutoff)
            return f" (did you mean {close[0]}?)" if close else ""
        if command.prog == f"{PROG} serve" and not word.startswith("-"):
            close = difflib.get_close_matches(word, list(self._commands()), n=1, cutoff=cutoff)
            if close:
                return f" (did you mean the command {close[0]}?)"
        return ""


def build_parser() -> _Parser:
    parser = _Parser(
        prog=PROG,
        description="Prometheus exporter that tells why GPUs are not working. Without a command, 'serve'. "
        "A command's flags go after it or before it (--expected-gpus 8 doctor).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    # serve is the default command, so its options are the top-level ones too (shown in --help)
    _add_flags(parser.add_argument_group("serve options (the default command)"), SERVE_FLAGS)
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("serve", help="sample the GPUs and the node and serve /metrics (default)")
    _add_flags(serve, SERVE_FLAGS)
    sub.add_parser("scenarios", help="list the simulator's scenarios")
    replay = sub.add_parser(
        "replay",
        help="run the detectors over a recorded GPU log (nvidia-smi CSV or screens, nvidia-smi dmon, "
        "gpustat, dcgmi dmon, a poller's CSV) and print the verdicts",
        description="Run the live detectors over a recorded GPU log. The format is read from the file's\n"
        "content (never its name); a .gz file reads like the plain one (one cut short is read up to\n"
        "its last complete line).\n\n"
        f"Exit status: 0 replayed; {FAIL_ON_STATUS} a verdict named by --fail-on fired; 2 a bad flag or a\n"
        "file with no readable rows; 1 the report could not be written.",
        epilog=_formats_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    replay.add_argument(
        "trace", nargs="?", help="the log file, in any of the formats below ('-' for stdin); or --prometheus"
    )
    replay.add_argument(
        "--gpus",
        type=int,
        help="GPU count, for logs without an index or uuid column (default: read from rows that repeat one "
        "timestamp, N rows per sample)",
    )
    replay.add_argument(
        "--columns",
        metavar="LIST",
        help="the columns of a CSV without a header line, in order: nvidia-smi's query fields, "
        "comma-separated (timestamp,utilization.gpu,power.draw,memory.used,memory.total), each with or "
        "without its unit ('utilization.gpu [%%]'), '-' for a column to skip; values without units are in "
        "nvidia-smi's (%%, W, MiB, MHz, C)",
    )
    replay.add_argument(
        "--workload",
        choices=CLASSES,
        help="what the job in the log is, when its shape cannot tell (a notebook's pauses, a two-stage "
        "split): its idle time is then judged as that class's (default: decided from the telemetry's shape)",
    )
    replay.add_argument(
        "--processes",
        metavar="APPS.csv",
        help="a log of nvidia-smi --query-compute-apps=timestamp,gpu_uuid,pid,process_name,used_memory "
        "--format=csv taken beside LOG: the processes' names (ollama, tritonserver, vllm, torchrun, "
        "jupyter...) say what the job is; nvidia-smi screens carry their process table already",
    )
    replay.add_argument("--json", action="store_true", help="JSON lines on stdout instead of a summary")
    replay.add_argument(
        "--report",
        metavar="PATH",
        help="also write a self-contained HTML report (charts); checked before the replay starts",
    )
    replay.add_argument(
        "--fail-on",
        metavar="WHAT",
        help=f"for CI: exit with status {FAIL_ON_STATUS} when a verdict it names fired at any time in the "
        "trace. Comma-separated: 'any' (every verdict), a severity (critical, warning or info: that severity "
        "and the more serious ones, as the alerts rank them) or verdict kinds ("
        + ", ".join(_kind_names())
        + "). The summary is printed as without it",
    )
    replay.add_argument(
        "--period",
        metavar="SECONDS",
        help="seconds between the samples of a log without times (nvidia-smi dmon without -o DT or -o T, "
        "dcgmi dmon, gpustat without its header, a CSV without a time column); default: the tool's own "
        "interval, 1 s. Logs with times ignore it",
    )
    replay.add_argument(
        "--start",
        metavar="TIME",
        help="time of the first sample of a log without times (and the date of dmon -o T): ISO 8601 "
        "(2026-11-24T10:00:00), 2026/11/24 10:00:00, 'Tue Nov 24 10:00:00 2026' or Unix seconds; UTC "
        "unless it says otherwise; default: the Unix epoch (replay reports seconds from the first "
        "sample). Logs with times ignore it",
    )
    replay.add_argument(
        "--price",
        metavar="MODEL=PRICE,...",
        help="what a GPU-hour costs, to price the time ledger: entries over the example prices of "
        "docs/cost.md (MODEL: part of the board name; '*=PRICE': any other model), or 'off'; the defaults "
        "are examples, not quotes",
    )
    replay.add_argument("--currency", metavar="CODE", help="the prices' currency (default USD)")
    from exporter.offline.promhistory.command import add_flags as add_prometheus_flags

    add_prometheus_flags(replay)
    tracked = replay.add_argument_group(
        "reading an experiment tracker's run (docs/diagnose.md): name a W&B run directory, its .wandb file "
        "(or .wandb.gz), an older client's wandb-events.jsonl, a W&B CSV export, an MLflow run directory "
        "(mlruns/EXP/RUN), an experiment (mlruns/EXP), mlruns/ or mlflow.db as the trace, or"
    )
    tracked.add_argument(
        "--mlflow",
        metavar="URI",
        help="an MLflow tracking server or store (http://mlflow:5000, sqlite:///mlflow.db); needs the "
        "mlflow extra: pip install 'gpu-bottleneck-exporter[mlflow]'",
    )
    tracked.add_argument(
        "--run",
        dest="run_id",
        metavar="ID",
        help="which run: an MLflow run's id (default: the latest run), a W&B run's id under wandb/ "
        "(default: latest-run), or the run's name in a W&B CSV export of several runs",
    )
    record = sub.add_parser(
        "record",
        help="sample like serve, but write the samples as a trace CSV that replay reads",
    )
    record.add_argument("--output", "-o", required=True, help="CSV file to write ('-' for stdout)")
    record.add_argument("--duration", help="seconds to record (default: until interrupted)")
    _add_flags(record, RECORD_FLAGS)
    from exporter.doctor.command import add_parser as add_doctor

    add_doctor(sub, lambda parser: _add_flags(parser, _doctor_flags()))
    nccl = sub.add_parser(
        "nccl-check",
        help="read saved NCCL_DEBUG=INFO logs and print the bring-up checklist (exit 0 pass, 1 warn, 2 fail)",
    )
    nccl.add_argument("logs", nargs="+", metavar="LOG", help="log files (plain, CRI or .gz; '-' for stdin)")
    nccl.add_argument("--json", action="store_true", help="one JSON object instead of the checklist")
    return parser


COMMANDS = ("serve", "scenarios", "replay", "record", "doctor", "nccl-check")


class OutputError(Exception):
    """stdout could not take the command's output (a full disk, an I/O error): the reason."""


class _GuardedStdout:
    """sys.stdout while a command that prints its result runs: a write or flush that fails (other than
    a closed pipe, which ends the command quietly) becomes OutputError, one line in ``main``. A distinct
    type, so that no reader's ``except OSError`` takes it for an error of its own input."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        with self._guard():
            return self._stream.write(text)

    def flush(self) -> None:
        with self._guard():
            self._stream.flush()

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)

    @staticmethod
    @contextlib.contextmanager
    def _guard() -> Iterator[None]:
        try:
            yield
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError(exc.strerror or str(exc)) from None


# the commands whose result is printed on stdout (serve logs on stderr; record reports its own output's
# errors, '-o -' included)
PRINTING = frozenset({"scenarios", "replay", "doctor", "nccl-check"})


def _command_first(argv: list[str], parser: _Parser) -> list[str]:
    """``--expected-gpus 8 doctor`` as ``doctor --expected-gpus 8``: the top-level help lists serve's
    flags before any command, so flags typed there are read as the command's own (a flag it does not
    take is then one line naming the commands that do). Every such flag takes one value, given as the
    next word or after '='; a help or version flag among them leaves the words as typed."""
    i, flags = 0, []
    while i < len(argv) and argv[i].startswith("--") and argv[i] not in ("--help", "--version", "--"):
        flags.append(argv[i].split("=", 1)[0])
        i += 1 if "=" in argv[i] else 2
    if not (0 < i < len(argv) and argv[i] in COMMANDS):
        return argv
    command = parser._command(argv[i])
    foreign = [flag for flag in flags if flag not in command._option_string_actions]
    if foreign:  # said here: after the command, its value would be taken for the command's own word
        command.error(f"unrecognized arguments: {foreign[0]}{parser._hint(command, foreign)}")
    return [argv[i], *argv[:i], *argv[i + 1 :]]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = _command_first(list(sys.argv[1:] if argv is None else argv), parser)
    if not argv or (argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version")):
        argv.insert(0, "serve")
    args = parser.parse_args(argv)  # a mistake exits here: one line, status 2
    stdout = sys.stdout
    if args.command not in PRINTING or stdout is None:
        return _run(args)
    sys.stdout = _GuardedStdout(stdout)  # type: ignore[assignment]
    try:
        status = _run(args)
        sys.stdout.flush()  # what is still buffered fails here, not in the interpreter's last flush
        return status
    except OutputError as exc:
        print(f"gpu-bottleneck-exporter: cannot write to stdout ({exc})", file=sys.stderr)
        _drop_stdout(stdout)
        return 1
    except BrokenPipeError:
        _drop_stdout(stdout)
        return 0
    finally:
        sys.stdout = stdout


def _drop_stdout(stdout: TextIO) -> None:
    """Point stdout at /dev/null, so the interpreter's final flush of what is still buffered does not
    fail again (and print a traceback) once the command has said why it stopped."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, stdout.fileno())
    os.close(devnull)


def _run(args: argparse.Namespace) -> int:
    try:
        if args.command == "scenarios":
            return _scenarios()
        if args.command == "replay" and (args.mlflow or _tracked(args.trace)):
            return _replay_tracker(args)
        if args.command == "replay" and (args.prometheus or args.trace is None):
            if args.processes:
                raise UsageError(
                    "--processes reads a compute-apps log taken beside a GPU log, not --prometheus"
                )
            return _replay_prometheus(args)
        if args.command == "replay":
            return _replay(
                args.trace,
                args.gpus,
                args.json,
                args.report,
                _period(args.period),
                _start(args.start),
                _fail_on(args.fail_on),
                _prices(args.price, args.currency),
                _columns(args.columns),
                args.workload or "",
                processes=args.processes,
            )
        if args.command == "doctor":
            from exporter.doctor.command import run as doctor

            return doctor(args, settings_from(args, dict(os.environ), _doctor_flags()))
        if args.command == "nccl-check":
            from exporter.podlogs.nccl_check import run

            return run(args.logs, args.json)
        if args.command == "record":
            duration = _duration(args.duration)
            settings = settings_from(args, dict(os.environ), RECORD_FLAGS)
            from exporter.offline.record import record

            record(settings, args.output, duration)
            return 0
        settings = settings_from(args, dict(os.environ))
        from exporter.app import serve

        serve(settings, {f.field: _origin(args, f) for f in SERVE_FLAGS})
        return 0
    except UsageError as exc:
        print(f"gpu-bottleneck-exporter: {exc}", file=sys.stderr)
        return 2
    except CommandError as exc:
        print(f"gpu-bottleneck-exporter: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # the reader went away (`replay ... | head`): stop quietly
        _drop_stdout(sys.stdout)
        return 0


def _duration(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = _float(text)
    except ValueError as exc:
        raise UsageError(f"--duration: {exc}") from None
    if value <= 0:
        raise UsageError(f"--duration: must be positive, not {text!r}")
    if value > MAX_RECORD_S:
        raise UsageError(
            f"--duration: at most {MAX_RECORD_S:.0f} s (a year), not {text!r}; leave it out to record until "
            "interrupted"
        )
    return value


def _prices(price: str | None, currency: str | None) -> Prices | None:
    """replay's --price and --currency, checked as serve checks them."""
    try:
        settings = Settings(price=price or "", currency=(currency or "").strip().upper() or Settings.currency)
    except SettingsError as exc:
        raise UsageError(
            "; ".join(f"--{field}: {text}" for field, text in exc.problems if field in ("price", "currency"))
        ) from None
    return settings.prices


def _period(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = _float(text)
    except ValueError as exc:
        raise UsageError(f"--period: {exc}") from None
    if value <= 0:
        raise UsageError(f"--period: must be a positive number of seconds, not {text!r}")
    return value


def _start(text: str | None) -> float | None:
    if text is None:
        return None
    from exporter.offline.traceformats.base import parse_time

    try:
        return parse_time(text)
    except (ValueError, OverflowError):
        raise UsageError(
            f"--start: {text!r} is not a time (ISO 8601 like 2026-11-24T10:00:00, 2026/11/24 10:00:00, "
            "'Tue Nov 24 10:00:00 2026' or Unix seconds, from 1970 to 9999)"
        ) from None


def _columns(text: str | None) -> list[str] | None:
    """replay --columns, checked before the file is opened."""
    if text is None:
        return None
    from exporter.offline.traces import parse_columns

    try:
        return parse_columns(text)
    except ValueError as exc:
        raise UsageError(f"--columns: {exc}") from None


def _kind_names() -> list[str]:
    from exporter.analysis.kinds import KINDS

    return list(KINDS)


@dataclass(frozen=True)
class FailOn:
    """replay --fail-on: the verdict kinds that fail the run ('any' and severities expanded), and those
    named one by one (a trace lacking their inputs is said to be unable to fire them)."""

    kinds: frozenset[str] = frozenset()
    named: frozenset[str] = frozenset()


def _fail_on(text: str | None) -> FailOn:
    """--fail-on's words, checked; none: never fail."""
    if text is None:
        return FailOn()
    from exporter.analysis.kinds import KINDS
    from exporter.policy.thresholds import SEVERITIES

    words = [w.strip().lower() for w in text.split(",") if w.strip()]
    if not words:
        raise UsageError("--fail-on: name 'any', a severity or verdict kinds")
    kinds: set[str] = set()
    named = {w for w in words if w in KINDS}
    for word in words:
        if word == "any":
            kinds.update(KINDS)
        elif word in SEVERITIES:
            worst = SEVERITIES[: SEVERITIES.index(word) + 1]  # critical first
            kinds.update(name for name, k in KINDS.items() if k.policy.severity.value in worst)
        elif word in KINDS:
            kinds.add(word)
        else:
            from exporter.policy.thresholds import CLI_SUGGESTION_SIMILARITY

            known = ["any", *SEVERITIES, *KINDS]
            close = difflib.get_close_matches(word, known, n=1, cutoff=CLI_SUGGESTION_SIMILARITY.value)
            hint = f"did you mean {close[0]}? " if close else ""
            raise UsageError(
                f"--fail-on: {word[:60]!r} is not 'any', a severity or a verdict kind ({hint}choose from "
                + ", ".join(known)
                + ")"
            )
    return FailOn(frozenset(kinds), frozenset(named))


def _check_output(path: str, flag: str) -> None:
    """Check before any work that ``path`` can be written: one line naming ``flag`` if not. Nothing is
    created: the file is written whole at the end, through a temporary file renamed over it."""
    from exporter.offline.files import check_output

    try:
        check_output(path)
    except IsADirectoryError:
        raise UsageError(f"{flag}: {path} is a directory; give a file name") from None
    except OSError as exc:
        raise UsageError(f"{flag}: cannot write {path} ({exc.strerror or exc})") from None


def _scenarios() -> int:
    from exporter.sim.scenarios import SCENARIOS, TOURS

    for name, (text, _, _) in SCENARIOS.items():
        print(f"{name:22s} {text}")
    for name, tour in TOURS.items():
        print(f"{name:22s} cycles through: " + ", ".join(f"{n} ({s:.0f} s)" for n, s in tour))
    print(
        "\nparameters: onset=SECONDS gpus=3+5 cause=io|cpu|shm|host_transfer fill=SECONDS shm_gib=N cap=WATTS"
        "\n            pods=1|2 churn=SECONDS logs=stop|flow rate=REQUESTS_PER_S (serving, serving_starved)"
        "\n            pod=NAME (the first pod's name, its container main: a name saying nothing of its work)"
    )
    return 0


def _replay(
    path: str,
    gpus: int | None,
    as_json: bool,
    report: str | None = None,
    period: float | None = None,
    start: float | None = None,
    fail_on: FailOn = FailOn(),
    prices: Prices | None = DEFAULT_PRICES,
    columns: list[str] | None = None,
    workload: str = "",
    source: Callable[..., ReplayResult] | None = None,
    origin: Callable[[], float | None] | None = None,
    processes: str | None = None,
) -> int:
    """``source``: the rows from elsewhere than ``path``; ``origin``: then, the wall-clock time of its
    second 0 (a file's is its first sample's)."""
    if report:
        _check_output(report, "--report")
    return _replay_checked(
        path,
        gpus,
        as_json,
        report,
        period,
        start,
        fail_on,
        prices,
        columns,
        workload,
        source,
        origin,
        processes,
    )


def _say_how_it_was_read(path: str, result: ReplayResult) -> bool:
    """On stderr, what reading the trace met (a cut file, unknown columns, clipped values, skipped rows,
    gaps); False, after one line saying why, when nothing could be read."""
    from dataclasses import replace as replaced

    from exporter.offline.replay import gap_text
    from exporter.offline.traces import clipped_warnings, reading_notes
    from exporter.policy.thresholds import EVAL_INTERVAL, TRACE_GAP_PERIODS

    stats = result.stats
    if stats.rows == 0:  # one line: why nothing could be read, with the first reason a row had
        first = f" ({stats.warnings[0]})" if stats.warnings else ""
        if stats.cut_after_line is not None:
            first = f" (the file is cut short after line {stats.cut_after_line})" + first
        what = "samples" if stats.position in ("step", "time") else "rows"
        print(f"gpu-bottleneck-exporter: {path}: no readable {what}{first}", file=sys.stderr)
        return False
    if stats.cut_after_line is not None:
        print(
            f"gpu-bottleneck-exporter: {path}: the file is cut short (its gzip stream ends early): replayed "
            f"up to line {stats.cut_after_line}, {result.seconds:.0f} s into the trace; the rest is missing",
            file=sys.stderr,
        )
    if stats.unknown_columns:
        print(
            f"gpu-bottleneck-exporter: ignoring unknown columns: {', '.join(stats.unknown_columns)}",
            file=sys.stderr,
        )
    for warning in clipped_warnings(stats):
        print(f"gpu-bottleneck-exporter: {path}: {warning}", file=sys.stderr)
    for warning in stats.warnings:
        print(f"gpu-bottleneck-exporter: {warning}; row skipped", file=sys.stderr)
    if stats.skipped > len(stats.warnings):
        print(
            f"gpu-bottleneck-exporter: {stats.skipped - len(stats.warnings)} more rows skipped",
            file=sys.stderr,
        )
    forward = stats.gap_count - stats.back_steps  # the gaps in time; reading_notes tells the steps back
    if forward:
        gaps = replaced(stats, gap_count=forward, gaps=[g for g in stats.gaps if g[1] >= 0])
        longer = stats.gap_s or TRACE_GAP_PERIODS.value * EVAL_INTERVAL.value
        print(
            f"gpu-bottleneck-exporter: {path}: {forward} gap(s) longer than "
            f"{longer:.0f} s, each starting a new segment: " + gap_text(gaps),
            file=sys.stderr,
        )
    for note in reading_notes(stats):
        print(f"gpu-bottleneck-exporter: {path}: {note}", file=sys.stderr)
    return True


def _replay_checked(
    path: str,
    gpus: int | None,
    as_json: bool,
    report: str | None,
    period: float | None,
    start: float | None,
    fail_on: FailOn,
    prices: Prices | None = DEFAULT_PRICES,
    columns: list[str] | None = None,
    workload: str = "",
    source: Callable[..., ReplayResult] | None = None,
    origin: Callable[[], float | None] | None = None,
    processes: str | None = None,
) -> int:
    from functools import partial

    from exporter.offline.replay import event_json, human, replay, summary
    from exporter.offline.replay import origin as trace_origin
    from exporter.offline.report import ReportData, write_report
    from exporter.offline.traceformats.compute_apps import ProcessLogError, read_process_names
    from exporter.offline.traces import MAX_GPUS, TraceError, TraceReader

    if gpus is not None and not 1 <= gpus <= MAX_GPUS:
        raise UsageError(f"--gpus must be 1-{MAX_GPUS}, not {gpus}")
    out = sys.stdout
    data = ReportData() if report else None
    try:
        if source is None:  # the file's reader: its first sample's time places the events on the clock
            reader = TraceReader(path, gpus, period=period, start=start, columns=columns)
            if processes:  # what the processes beside it ran: the job's class, read before the rows
                named = read_process_names(processes)
                reader.stats.processes.update(named)
                reader.stats.process_names += sum(len(v) for v in named.values())
            source, origin = partial(replay, path, gpus, reader=reader), lambda: trace_origin(reader.stats)
        at = origin or (lambda: None)
        result = source(
            on_event=(lambda e: print(event_json(e, at()), file=out)) if as_json else None,
            on_job=(lambda j: print(json.dumps(j), file=out)) if as_json else None,
            period=period,
            start=start,
            prices=prices,
            columns=columns,
            workload=workload,
            **(data.hooks() if data else {}),  # type: ignore[arg-type]
        )
    except (TraceError, ProcessLogError) as exc:
        print(f"gpu-bottleneck-exporter: {exc}", file=sys.stderr)
        return 2
    if not _say_how_it_was_read(path, result):
        return 2
    fired = _fired(result, fail_on.kinds)
    if as_json:
        record = summary(result)
        if fail_on.kinds:
            record["fail_on"] = {"kinds": sorted(fail_on.kinds), "fired": sorted(fired)}
        print(json.dumps(record), file=out)
    else:
        print(human(result), file=out)
    for kind in sorted(fail_on.named & set(result.silent)):
        print(
            f"gpu-bottleneck-exporter: --fail-on: {kind} cannot fire on this trace: it {result.silent[kind]}",
            file=sys.stderr,
        )
    if report and data:
        try:
            size = write_report(report, result, data)
        except OSError as exc:
            kept = " (the previous file is kept)" if os.path.lexists(report) else ""
            print(
                f"gpu-bottleneck-exporter: --report: cannot write {report} ({exc.strerror or exc}){kept}",
                file=sys.stderr,
            )
            return 1
        print(f"gpu-bottleneck-exporter: wrote {report} ({size / 1e6:.1f} MB)", file=sys.stderr)
    if fired:
        print(
            "gpu-bottleneck-exporter: --fail-on: "
            + "; ".join(f"{kind} fired on {gpus}" for kind, gpus in fired.items())
            + f" (exit status {FAIL_ON_STATUS})",
            file=sys.stderr,
        )
        return FAIL_ON_STATUS
    return 0


def _replay_prometheus(args: argparse.Namespace) -> int:
    """replay --prometheus: the history a Prometheus holds, with the outputs of a file's replay."""
    from exporter.offline.promhistory.client import PromError
    from exporter.offline.promhistory.command import progress_printer, request_from
    from exporter.offline.promhistory.history import replay_prometheus

    if not args.prometheus:
        raise UsageError("replay: name a trace file, or --prometheus URL to read a Prometheus")
    if args.trace is not None:
        raise UsageError("replay: a trace file or --prometheus, not both")
    try:
        request = request_from(args)
    except PromError as exc:
        raise UsageError(str(exc)) from None

    def source(**kwargs: object) -> ReplayResult:
        for unused in ("period", "start", "columns"):
            kwargs.pop(unused, None)
        try:
            return replay_prometheus(request, on_progress=progress_printer(), **kwargs)  # type: ignore[arg-type]
        except PromError as exc:
            raise UsageError(str(exc)) from None

    return _replay_from(args, args.prometheus, source, lambda: request.start)


def _tracked(trace: str | None) -> bool:
    """A tracker's run rather than a GPU log (a W&B run, an MLflow run or store, a W&B export)."""
    if trace is None or trace == "-":
        return False
    from pathlib import Path

    from exporter.offline.trackers import claims

    return claims(Path(trace))


def _replay_tracker(args: argparse.Namespace) -> int:
    """replay of an experiment tracker's run: W&B or MLflow, with the outputs of a file's replay."""
    from exporter.offline.trackers import TrackerError, open_run, replay_run

    if args.prometheus:
        raise UsageError("replay: a tracker's run or --prometheus, not both")
    if args.mlflow and args.trace is not None:
        raise UsageError("replay: a run on disk or --mlflow URI, not both")
    if args.run_id and not (args.mlflow or args.trace):
        raise UsageError(
            "--run names a run of --mlflow URI, of an MLflow store, of wandb/ or of a W&B export"
        )
    try:
        run = open_run(args.trace, args.mlflow, args.run_id)
    except TrackerError as exc:
        raise UsageError(str(exc)) from None
    first = run.start()

    def source(**kwargs: object) -> ReplayResult:
        return replay_run(run, **kwargs)  # type: ignore[arg-type]

    return _replay_from(
        args, args.mlflow or args.trace, source, lambda: first if first is not None and first >= 1e8 else None
    )


def _replay_from(
    args: argparse.Namespace,
    where: str,
    source: Callable[..., ReplayResult],
    origin: Callable[[], float | None],
) -> int:
    """``_replay`` of rows from elsewhere than a log (a Prometheus, a tracker's run), with the flags every
    replay's outputs take."""
    return _replay(
        where,
        None,
        args.json,
        args.report,
        fail_on=_fail_on(args.fail_on),
        prices=_prices(args.price, args.currency),
        workload=args.workload or "",
        source=source,
        origin=origin,
    )


def _fired(result: ReplayResult, kinds: frozenset[str]) -> dict[str, str]:
    """The kinds among ``kinds`` that fired, each with its GPUs (as a person reads them)."""
    from exporter.offline.replay import _gpu_list

    gpus: dict[str, set[str]] = {}
    for episode in result.episodes:
        if episode.kind in kinds:
            gpus.setdefault(episode.kind, set()).add(episode.gpu)
    return {
        kind: ("GPUs " if len(gpus[kind]) > 1 else "GPU ") + _gpu_list(sorted(gpus[kind]))
        for kind in sorted(gpus)
    }
