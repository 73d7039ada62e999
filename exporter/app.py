"""Application setup in one place: everything a running exporter is made of, built from Settings. The
Application object wires sources, sampler and renderer (it is the only mutable state of a running
exporter; everything else is passed down from here); ``build`` puts it over the real NVML or a simulated
node, ``serve`` adds the web config, the listening socket and the HTTP server. The command line only
parses, checks and calls these."""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import ModuleType
from typing import TYPE_CHECKING

from exporter.collect.sampler import Sampler
from exporter.collect.snapshot import Snapshot
from exporter.config.settings import Settings
from exporter.config.usage import CommandError, UsageError
from exporter.doctor import live
from exporter.serve.metrics import Family, Renderer
from exporter.sources import host, kubelet, nvml, podlogs, processes, progress
from exporter.sources.errors import ErrorCounter
from exporter.sources.nvml import real_nvml
from exporter.sources.progress import ProgressStore
from exporter.sources.registry import Inputs, build_sources

if TYPE_CHECKING:
    from exporter.serve.webconfig import WebState
    from exporter.sim import SimulatedNode

# the modules whose sources a running exporter has: each registers its own at import
# (exporter.sources.registry); a new source's module joins them here
SOURCE_MODULES = (nvml, host, kubelet, processes, podlogs, progress, live)
log = logging.getLogger(__name__)
run_log = logging.getLogger("exporter")  # the commands' own lines, under the name they always had
SIM_CPU_LINE = "the simulated driver and /proc used %.3f s of CPU"  # at exit, and on SIGUSR1 so far


class Application:
    def __init__(
        self,
        settings: Settings,
        nvml_module: ModuleType | None,
        host_options: dict[str, object] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.errors = ErrorCounter()
        # every registered source that these settings turn on, by name; the sampler wires each by its
        # schedule (and starts the node checks' and the pod logs' threads with its own)
        inputs = Inputs(settings, self.errors, nvml_module, host_options or {}, clock, xids=self._xids)
        sources = build_sources(inputs)
        store = sources.get("progress")
        self.progress = store if isinstance(store, ProgressStore) else None  # POST /v1/progress
        self.sampler = Sampler(settings, self.errors, sources, clock=clock)
        self.renderer = Renderer(settings.detail, settings.prices)
        self.server_families: Callable[[], list[Family]] | None = None  # set by the HTTP server
        self._started = False

    def start(self) -> None:
        if not self._started:
            self._started = True
            self.sampler.start()

    def stop(self) -> None:
        if self._started:
            self._started = False
            self.sampler.stop()

    def _xids(self) -> dict[int, dict[int, int]] | None:
        """XIDs counted since the exporter started, for the node checks (None while NVML is down)."""
        snap = self.sampler.snapshot
        return {view.index: dict(view.xids) for view in snap.gpus} if snap.nvml_up else None

    @property
    def snapshot(self) -> Snapshot:
        return self.sampler.snapshot

    def metrics(self, openmetrics: bool = False, gzipped: bool = False) -> tuple[bytes, str]:
        return self.renderer.render(
            self.sampler.snapshot, openmetrics=openmetrics, gzipped=gzipped, extra=self.server_families
        )


def configure_logging(level: str) -> None:
    """Log lines with time, level and logger, at ``level``; a flood of one line is written a few times,
    then counted."""
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from exporter.serve.logsafety import limit_repeats

    limit_repeats(logging.getLogger())


@dataclass
class Built:
    """An application ready to start, and the simulated node under it with --simulate."""

    app: Application
    node: SimulatedNode | None = None

    def close(self) -> None:
        """Stop the simulated node (its driver, /proc writer, kubelet and pod logs), if there is one."""
        if self.node is not None:
            run_log.info(SIM_CPU_LINE, self.node.cpu_seconds())
            self.node.close()


def build(settings: Settings) -> Built:
    """The application over the real NVML, or over a simulated node with --simulate: the simulated
    node's driver, /proc, kubelet socket and pod logs stand in for the node's."""
    if not settings.simulate:
        return Built(Application(settings, real_nvml()))
    from exporter.sim import ScenarioError, SimulatedNode

    try:
        # the kubelet in a process of its own, as on a node: its CPU is not the exporter's
        node = SimulatedNode(settings.simulate, n_gpus=settings.sim_gpus, kubelet_process=True)
    except ScenarioError as exc:
        raise UsageError(f"--simulate: {exc}") from None
    module, host_options = node.install(), node.host_options()
    node.host.start()
    if settings.pod_resources_socket:
        settings = replace(settings, pod_resources_socket=node.kubelet_socket)
    if settings.pod_logs:  # the simulated pods write their own logs
        settings = replace(settings, pod_logs=node.start_logs())
    run_log.info(
        "simulating %d x %s, scenario %r", settings.sim_gpus, node.model.board.name, settings.simulate
    )
    return Built(Application(settings, module, host_options), node)


def web_state(settings: Settings, origins: dict[str, str] | None = None) -> WebState:
    """TLS and basic authentication from --web.config.file (none without it) and the push token;
    SIGHUP re-reads them. ``origins``: the flag or variable each setting came from, for the message."""
    from exporter.serve.webconfig import PushTokenError, WebConfigError, WebState

    origins = origins or {}
    try:
        return WebState(settings.web_config_file or None, settings.progress_token_file or None)
    except PushTokenError as exc:
        raise UsageError(f"{origins.get('progress_token_file', '--progress-token-file')}: {exc}") from None
    except WebConfigError as exc:
        raise UsageError(f"{origins.get('web_config_file', '--web.config.file')}: {exc}") from None


def listen(address: str, port: int) -> socket.socket:
    """The listening socket, bound before anything else starts: a taken port is one clear line."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio turns Nagle off only on accepted sockets whose protocol says TCP, and
    # with Nagle on, a second request on a kept-alive connection waits 40 ms for a delayed ACK
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((address, port))
    except OSError as exc:
        sock.close()
        where = f"[{address}]:{port}" if family == socket.AF_INET6 else f"{address}:{port}"
        raise CommandError(f"cannot listen on {where}: {exc.strerror or exc}") from None
    return sock


def serve(settings: Settings, origins: dict[str, str] | None = None) -> None:
    """``serve``: everything built from ``settings``, served until SIGTERM or SIGINT. The web config is
    read and the port bound before the sources start, so either mistake is one line and nothing else."""
    from exporter.serve.server import serve as serve_http

    web = web_state(settings, origins)
    configure_logging(settings.log_level)
    sock = listen(settings.listen_address, settings.port)
    try:
        built = build(settings)
    except BaseException:
        sock.close()
        raise
    if built.node is not None and threading.current_thread() is threading.main_thread():
        node = built.node  # SIGUSR1: the simulation's CPU so far (benchmarks take it out of the exporter's)
        signal.signal(signal.SIGUSR1, lambda *_: run_log.info(SIM_CPU_LINE, node.cpu_seconds()))
    shown = "localhost" if settings.listen_address in ("0.0.0.0", "::") else settings.listen_address
    scheme = "https" if web.tls else "http"
    run_log.info("serving %s://%s:%d/metrics", scheme, shown, settings.port)
    try:
        serve_http(built.app, sock, web)
    finally:
        built.close()
