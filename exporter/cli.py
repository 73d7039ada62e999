"""Command line: ``serve`` (the default), ``scenarios``; flags and GBE_* environment variables."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from exporter import __version__
from exporter.config import ENV_PREFIX, Settings

log = logging.getLogger("exporter")


@dataclass(frozen=True)
class Flag:
    flag: str
    field: str
    kind: Callable[[str], object]
    help: str

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.flag.lstrip("-").replace("-", "_").upper()


def _paths(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())


def _level(text: str) -> str:
    if text.lower() not in ("debug", "info", "warning", "error"):
        raise ValueError(f"log level must be debug, info, warning or error, not {text!r}")
    return text.lower()


SERVE_FLAGS = (
    Flag("--listen-address", "listen_address", str, "address to bind; all interfaces by default"),
    Flag("--port", "port", int, "HTTP port for /metrics, /healthz and /readyz"),
    Flag("--interval", "interval_s", float, "seconds between collections"),
    Flag("--window", "window_s", float, "seconds of samples kept for window statistics and analysis"),
    Flag(
        "--collect-timeout",
        "collect_timeout_s",
        float,
        "seconds after which a collection that has not returned is reported as timed out",
    ),
    Flag(
        "--slow-interval",
        "slow_interval_s",
        float,
        "seconds between reads of slowly changing GPU state (fabric, processes, default power limit)",
    ),
    Flag("--p2p-interval", "p2p_interval_s", float, "seconds between reads of the GPU-pair P2P status"),
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
    Flag("--pod-resources-interval", "pod_resources_interval_s", float, "seconds between PodResources reads"),
    Flag(
        "--simulate",
        "simulate",
        str,
        "run on a simulated node instead of the real NVML: SCENARIO[:key=value,...] (see 'scenarios')",
    ),
    Flag("--sim-gpus", "sim_gpus", int, "number of simulated GPUs"),
    Flag("--log-level", "log_level", _level, "debug, info, warning or error"),
)


class UsageError(Exception):
    pass


def _add_serve_flags(parser: argparse.ArgumentParser) -> None:
    defaults = Settings()
    for f in SERVE_FLAGS:
        default = getattr(defaults, f.field)
        shown = ",".join(default) if isinstance(default, tuple) else default
        parser.add_argument(
            f.flag,
            dest=f.field,
            default=None,
            metavar=f.field.upper().removesuffix("_S"),
            help=f"{f.help} (env {f.env}; default {shown!r})",
        )


def settings_from(args: argparse.Namespace, environ: dict[str, str]) -> Settings:
    """Flags win over environment variables, which win over defaults. Bad values raise UsageError."""
    values: dict[str, object] = {}
    for f in SERVE_FLAGS:
        raw, origin = getattr(args, f.field, None), f.flag
        if raw is None and f.env in environ:
            raw, origin = environ[f.env], f.env
        if raw is None:
            continue
        try:
            values[f.field] = f.kind(raw)
        except ValueError as exc:
            raise UsageError(f"{origin}: {exc}") from None
    try:
        return Settings(**values)  # type: ignore[arg-type]
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-bottleneck-exporter",
        description="Prometheus exporter that tells why GPUs are not working. Without a command, 'serve'.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("serve", help="sample the GPUs and the node and serve /metrics (default)")
    _add_serve_flags(serve)
    sub.add_parser("scenarios", help="list the simulator's scenarios")
    replay = sub.add_parser(
        "replay",
        help="run the detectors over a recorded trace (nvidia-smi CSV) and print the verdicts",
        description="Run the live detectors over a trace: nvidia-smi --query-gpu=... --format=csv output, "
        "with or without units, plus the exporter's extension columns.",
    )
    replay.add_argument("trace", help="the CSV file")
    replay.add_argument("--gpus", type=int, help="GPU count, for logs without an index or uuid column")
    replay.add_argument("--json", action="store_true", help="JSON lines on stdout instead of a summary")
    record = sub.add_parser(
        "record",
        help="sample like serve, but write the samples as a trace CSV that replay reads",
    )
    record.add_argument("--output", "-o", required=True, help="CSV file to write ('-' for stdout)")
    record.add_argument("--duration", type=float, help="seconds to record (default: until interrupted)")
    _add_serve_flags(record)
    return parser


COMMANDS = ("serve", "scenarios", "replay", "record")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version")):
        argv.insert(0, "serve")
    args = build_parser().parse_args(argv)
    try:
        if args.command == "scenarios":
            return _scenarios()
        if args.command == "replay":
            return _replay(args.trace, args.gpus, args.json)
        if args.command == "record":
            return _record(settings_from(args, dict(os.environ)), args.output, args.duration)
        return _serve(settings_from(args, dict(os.environ)))
    except UsageError as exc:
        print(f"gpu-bottleneck-exporter: {exc}", file=sys.stderr)
        return 2


def _logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _scenarios() -> int:
    from exporter.sim.scenarios import SCENARIOS, TOUR

    for name, (text, _, _) in SCENARIOS.items():
        print(f"{name:22s} {text}")
    print(f"{'tour':22s} cycles through: " + ", ".join(f"{n} ({s:.0f} s)" for n, s in TOUR))
    print(
        "\nparameters: onset=SECONDS gpus=3+5 cause=io|cpu|shm|host_transfer fill=SECONDS shm_gib=N cap=WATTS"
    )
    return 0


def _application(settings: Settings):  # -> tuple[Application, SimulatedNode | None]
    """The application over the real NVML, or over a simulated node with --simulate."""
    from exporter.app import Application, real_nvml

    node = None
    if settings.simulate:
        from exporter.sim import ScenarioError, SimulatedNode

        try:
            node = SimulatedNode(settings.simulate, n_gpus=settings.sim_gpus)
        except ScenarioError as exc:
            raise UsageError(f"--simulate: {exc}") from None
        module, host_options = node.install(), node.host_options()
        node.host.start()
        if settings.pod_resources_socket:
            settings = replace(settings, pod_resources_socket=node.kubelet_socket)
        log.info(
            "simulating %d x %s, scenario %r", settings.sim_gpus, node.model.board.name, settings.simulate
        )
    else:
        module, host_options = real_nvml(), None
    return Application(settings, module, host_options), node


def _close(node) -> None:
    if node is not None:
        log.info("the simulated driver and /proc used %.3f s of CPU", node.cpu_seconds())
        node.close()


def _serve(settings: Settings) -> int:
    from exporter.server import serve

    _logging(settings.log_level)
    app, node = _application(settings)
    shown = "localhost" if settings.listen_address in ("0.0.0.0", "::") else settings.listen_address
    log.info("serving http://%s:%d/metrics", shown, settings.port)
    try:
        serve(app)
    finally:
        _close(node)
    return 0


def _replay(path: str, gpus: int | None, as_json: bool) -> int:
    from exporter.replay import event_json, human, replay, summary
    from exporter.traces import TraceError

    if gpus is not None and gpus < 1:
        raise UsageError("--gpus must be at least 1")
    out = sys.stdout
    try:
        result = replay(
            path,
            gpus,
            on_event=(lambda e: print(event_json(e), file=out)) if as_json else None,
            on_job=(lambda j: print(json.dumps(j), file=out)) if as_json else None,
        )
    except TraceError as exc:
        print(f"gpu-bottleneck-exporter: {exc}", file=sys.stderr)
        return 1
    stats = result.stats
    if stats.unknown_columns:
        print(
            f"gpu-bottleneck-exporter: ignoring unknown columns: {', '.join(stats.unknown_columns)}",
            file=sys.stderr,
        )
    for warning in stats.warnings:
        print(f"gpu-bottleneck-exporter: {warning}; row skipped", file=sys.stderr)
    if stats.skipped > len(stats.warnings):
        print(
            f"gpu-bottleneck-exporter: {stats.skipped - len(stats.warnings)} more rows skipped",
            file=sys.stderr,
        )
    if stats.rows == 0:
        print(f"gpu-bottleneck-exporter: {path}: no readable rows", file=sys.stderr)
        return 1
    print(json.dumps(summary(result)) if as_json else human(result), file=out)
    return 0


def _record(settings: Settings, output: str, duration: float | None) -> int:
    import signal
    import threading

    from exporter.traces import TraceWriter

    _logging(settings.log_level)
    try:
        stream = sys.stdout if output == "-" else open(output, "w", encoding="utf-8")  # noqa: SIM115
    except OSError as exc:
        raise UsageError(f"--output: cannot write {output} ({exc.strerror})") from None
    app, node = _application(settings)
    writer, lock, done = TraceWriter(stream), threading.Lock(), threading.Event()

    def on_gpu(identity, points) -> None:
        with lock:
            for point in points:
                writer.gpu(str(identity.index), identity.name, point)

    def on_host(point) -> None:
        with lock:
            writer.host(point)

    app.sampler.gpu_listeners.append(on_gpu)
    app.sampler.host_listeners.append(on_host)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    log.info("recording to %s%s", output, f" for {duration:g} s" if duration else " until interrupted")
    app.start()
    try:
        done.wait(duration)
    finally:
        app.stop()
        with lock:
            stream.flush()
            if stream is not sys.stdout:
                stream.close()
        _close(node)
    log.info("wrote %d rows", writer.rows)
    return 0
