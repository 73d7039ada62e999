"""The application object: wires settings, sources, sampler and renderer. It is the only mutable state
of a running exporter; everything else is passed down from here."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from types import ModuleType

from exporter.config import Settings
from exporter.errors import ErrorCounter
from exporter.metrics import Renderer
from exporter.sampler import Sampler, Snapshot
from exporter.sources.host import HostSource
from exporter.sources.kubelet import PodResourcesSource
from exporter.sources.nvml import NvmlSource

log = logging.getLogger(__name__)


def real_nvml() -> ModuleType | None:
    """The nvidia-ml-py module; None (with a warning) if the bindings are not installed."""
    try:
        import pynvml
    except ImportError:
        log.warning("nvidia-ml-py is not installed: GPU metrics are off")
        return None
    return pynvml


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
        self.sampler = Sampler(settings, self.errors, host, nvml, clock=clock, kubelet=kubelet)
        self.renderer = Renderer(settings.detail)
        self._started = False

    def start(self) -> None:
        if not self._started:
            self._started = True
            self.sampler.start()

    def stop(self) -> None:
        if self._started:
            self._started = False
            self.sampler.stop()

    @property
    def snapshot(self) -> Snapshot:
        return self.sampler.snapshot

    def metrics(self, openmetrics: bool = False, gzipped: bool = False) -> tuple[bytes, str]:
        return self.renderer.render(self.sampler.snapshot, openmetrics=openmetrics, gzipped=gzipped)
