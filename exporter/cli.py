"""Command line: ``serve`` (the default), ``scenarios``; flags and GBE_* environment variables."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

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
    Flag("--node-name", "node_name", str, "this node's name (the chart sets it from spec.nodeName)"),
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
    return parser


COMMANDS = ("serve", "scenarios")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version")):
        argv.insert(0, "serve")
    args = build_parser().parse_args(argv)
    try:
        if args.command == "scenarios":
            return _scenarios()
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


def _serve(settings: Settings) -> int:
    from exporter.app import Application, real_nvml
    from exporter.server import serve

    _logging(settings.log_level)
    node = None
    if settings.simulate:
        from exporter.sim import ScenarioError, SimulatedNode

        try:
            node = SimulatedNode(settings.simulate, n_gpus=settings.sim_gpus)
        except ScenarioError as exc:
            raise UsageError(f"--simulate: {exc}") from None
        module, host_options = node.install(), node.host_options()
        node.host.start()
        log.info(
            "simulating %d x %s, scenario %r", settings.sim_gpus, node.model.board.name, settings.simulate
        )
    else:
        module, host_options = real_nvml(), None
    app = Application(settings, module, host_options)
    shown = "localhost" if settings.listen_address in ("0.0.0.0", "::") else settings.listen_address
    log.info("serving http://%s:%d/metrics", shown, settings.port)
    try:
        serve(app)
    finally:
        if node is not None:
            log.info("the simulated driver and /proc used %.3f s of CPU", node.cpu_seconds())
            node.close()
    return 0
