"""What the HTTP server needs of a running exporter, as a protocol: exporter/app.py's Application is one,
and the server imports nothing above its own stage to name it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from exporter.collect.snapshot import Snapshot
from exporter.config.settings import Settings
from exporter.serve.metrics import Family
from exporter.sources.progress import ProgressStore


class Application(Protocol):
    settings: Settings
    progress: ProgressStore | None  # set with --progress-api on: POST /v1/progress feeds it
    server_families: Callable[[], list[Family]] | None  # the server's own families, set by the server

    @property
    def snapshot(self) -> Snapshot: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def metrics(self, openmetrics: bool = False, gzipped: bool = False) -> tuple[bytes, str]: ...
