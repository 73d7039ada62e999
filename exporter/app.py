"""Application setup in one place: everything a running exporter is made of, built from Settings. The
Application object wires sources, sampler and renderer (it is the only mutable state of a running
exporter; everything else is passed down from here); ``build`` puts it over the real NVML or a simulated
node, ``serve`` adds the web config, the listening socket and the HTTP server. The command line only
parses, checks and calls these."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import ModuleType
from typing import TYPE_CHECKING

from exporter.collect.sampler import Sampler
from exporter.collect.snapshot import Snapshot
from exporter.config.settings import Settings
from exporter.config.usage import CommandError, UsageError
from exporter.doctor.live import NodeChecker
from exporter.serve.metrics import Family, Renderer
from exporter.sources.errors import ErrorCounter
from exporter.sources.host import HostSource
from exporter.sources.kubelet import PodResourcesSource
from exporter.sources.nvml import NvmlSource, real_nvml
from exporter.sources.podlogs import PodLogSource
from exporter.sources.progress import ProgressStore

if TYPE_CHECKING:
    from exporter.serve.webconfig import WebState
    from exporter.sim import SimulatedNode

log = logging.getLogger(__name__)
run_log = logging.getLogger("exporter")  # the commands' own lines, under the name they always had


def pod_log_source(settings: Settings, errors: ErrorCounter, sys_root: str) -> PodLogSource | None:
    """The pod-log source when --pod-logs names a directory, with the user's patterns first."""
    if not settings.pod_logs:
        return None
    from exporter.podlogs.logparse import PATTERNS, load_patterns

    extra = ()
    if settings.log_patterns:
        with open(settings.log_patterns, encoding="utf-8") as f:
            extra = load_patterns(f.read())
    return PodLogSource(settings.pod_logs, errors, extra + PATTERNS, sys_root=sys_root)


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
        options: dict[str, object] = {
            "proc_root": settings.proc_root,
            "sys_root": settings.sys_root,
            "host_root": settings.host_root,
            "shm_paths": settings.shm_paths,
        } | (host_options or {})
        host = HostSource(self.errors, clock=clock, **options)  # type: ignore[arg-type]
        nvml = (
            NvmlSource(nvml_module, self.errors, clock=clock, slow_interval_s=settings.slow_interval_s)
            if nvml_module is not None
            else None
        )
        kubelet = (
            PodResourcesSource(self.errors, settings.pod_resources_socket)
            if settings.pod_resources_socket
            else None
        )
        self.progress = ProgressStore(clock) if settings.progress_api else None
        self.sampler = Sampler(
            settings,
            self.errors,
            host,
            nvml,
            clock=clock,
            kubelet=kubelet,
            podlogs=pod_log_source(settings, self.errors, str(options["sys_root"])),
            progress=self.progress,
        )
        # the node doctor's checks, on their own thread; the sampler publishes their latest results
        self.checker = NodeChecker.for_settings(settings, nvml_module, options, xids=self._xids)
        self.sampler.checker = self.checker
        self.renderer = Renderer(settings.detail, settings.prices)
        self.server_families: Callable[[], list[Family]] | None = None  # set by the HTTP server
        self._started = False

    def start(self) -> None:
        if not self._started:
            self._started = True
            self.sampler.start()
            self.checker.start()

    def stop(self) -> None:
        if self._started:
            self._started = False
            self.checker.stop()
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
            run_log.info("the simulated driver and /proc used %.3f s of CPU", self.node.cpu_seconds())
            self.node.close()


def build(settings: Settings) -> Built:
    """The application over the real NVML, or over a simulated node with --simulate: the simulated
    node's driver, /proc, kubelet socket and pod logs stand in for the node's."""
    if not settings.simulate:
        return Built(Application(settings, real_nvml()))
    from exporter.sim import ScenarioError, SimulatedNode

    try:
        node = SimulatedNode(settings.simulate, n_gpus=settings.sim_gpus)
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


def web_state(settings: Settings) -> WebState:
    """TLS and basic authentication from --web.config.file (none without it); SIGHUP re-reads it."""
    from exporter.serve.webconfig import WebConfigError, WebState

    try:
        return WebState(settings.web_config_file or None)
    except WebConfigError as exc:
        raise UsageError(f"--web.config.file: {exc}") from None


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


def serve(settings: Settings) -> None:
    """``serve``: everything built from ``settings``, served until SIGTERM or SIGINT. The web config is
    read and the port bound before the sources start, so either mistake is one line and nothing else."""
    from exporter.serve.server import serve as serve_http

    web = web_state(settings)
    configure_logging(settings.log_level)
    sock = listen(settings.listen_address, settings.port)
    try:
        built = build(settings)
    except BaseException:
        sock.close()
        raise
    shown = "localhost" if settings.listen_address in ("0.0.0.0", "::") else settings.listen_address
    scheme = "https" if web.tls else "http"
    run_log.info("serving %s://%s:%d/metrics", scheme, shown, settings.port)
    try:
        serve_http(built.app, sock, web)
    finally:
        built.close()
