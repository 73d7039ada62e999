"""HTTP: /metrics, /healthz, /readyz. Handlers only read the latest snapshot; none calls a source."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import socket
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from email.utils import formatdate

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, Response
from uvicorn.server import ServerState

from exporter import __version__
from exporter.policy.thresholds import HTTP_KEEPALIVE
from exporter.serve.application import Application
from exporter.serve.http_negotiation import wants_gzip, wants_openmetrics
from exporter.serve.httpguard import (
    ConnectionGuard,
    GuardedListener,
    SmallWrites,
    WholeBodies,
    connection_bound,
    http_families,
    protocol_factory,
)
from exporter.serve.webconfig import WebMiddleware, WebState

log = logging.getLogger(__name__)

INDEX = """<!doctype html><html><head><title>gpu-bottleneck-exporter</title></head><body>
<h1>gpu-bottleneck-exporter {version}</h1>
<p><a href="metrics">/metrics</a> &middot; <a href="healthz">/healthz</a> &middot;
<a href="readyz">/readyz</a></p>
</body></html>
"""


def create_app(application: Application) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        application.start()
        try:
            yield
        finally:
            application.stop()

    app = FastAPI(
        title="gpu-bottleneck-exporter",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        # no redirect from /metrics/ to /metrics: Starlette builds its Location from the client's Host
        # header, so the answer would point wherever the client said; an unknown path is a plain 404
        redirect_slashes=False,
    )

    # HEAD answers as GET does, without the body (uvicorn leaves it out; the length stays)
    @app.api_route("/metrics", methods=["GET", "HEAD"])
    async def metrics(request: Request) -> Response:
        openmetrics = wants_openmetrics(request.headers.get("accept"))
        gzipped = wants_gzip(request.headers.get("accept-encoding"))
        body, content_type = application.metrics(openmetrics=openmetrics, gzipped=gzipped)
        headers = {"Vary": "Accept, Accept-Encoding"} | ({"Content-Encoding": "gzip"} if gzipped else {})
        return Response(content=body, headers=headers, media_type=content_type)

    @app.api_route("/healthz", methods=["GET", "HEAD"])
    async def healthz() -> PlainTextResponse:
        return PlainTextResponse("ok\n")

    @app.api_route("/readyz", methods=["GET", "HEAD"])
    async def readyz() -> PlainTextResponse:
        if application.snapshot.ready:
            return PlainTextResponse("ready\n")
        return PlainTextResponse("not ready: the first collection has not finished\n", status_code=503)

    if application.progress is not None:  # --progress-api on
        from exporter.serve import progress_api

        progress_api.route(app, application.progress)

    @app.api_route("/", methods=["GET", "HEAD"], response_class=HTMLResponse)
    async def index() -> HTMLResponse:
        return HTMLResponse(INDEX.format(version=__version__))

    return app


def _exit_cleanly(signum: int, frame: object) -> None:
    raise SystemExit(0)


# uvicorn's loggers keep no handlers of their own and propagate to the root logger, so their lines carry
# the exporter's format; dictConfig must not disable the loggers that already exist (the exporter's).
UVICORN_LOG_CONFIG: dict[str, object] = {
    "version": 1,
    "disable_existing_loggers": False,
    "loggers": {
        name: {"handlers": [], "propagate": True} for name in ("uvicorn", "uvicorn.error", "uvicorn.access")
    },
}


def server_config(
    application: Application, web: WebState | None = None, guard: ConnectionGuard | None = None
) -> uvicorn.Config:
    """uvicorn's configuration: the app behind the web config (auth, headers), every connection under
    the guard (bounded count, header deadline) and in TLS when the web config says so."""
    s = application.settings
    web = web or WebState()
    guard = guard or ConnectionGuard(connection_bound())
    application.server_families = lambda: http_families(
        guard,
        lambda: web.auth_failures,
        lambda: (web.reloads, web.reload_errors),
        web_config=bool(s.web_config_file),
        push_refused=(lambda: web.push_refused) if s.progress_token_file else None,
    )
    return uvicorn.Config(
        SmallWrites(WebMiddleware(WholeBodies(create_app(application)), web)),  # type: ignore[arg-type]
        host=s.listen_address,
        port=s.port,
        log_level=s.log_level if s.log_level != "debug" else "info",
        access_log=False,
        lifespan="on",
        server_header=False,
        # the client's address is the TCP peer's: uvicorn would otherwise take X-Forwarded-For from any
        # connection from 127.0.0.1 or ::1 (every node process with hostNetwork), and the address check of
        # --progress-check-address would accept a push that names another pod's address there
        proxy_headers=False,
        log_config=UVICORN_LOG_CONFIG,
        http=protocol_factory(guard, web.ssl_context),  # type: ignore[arg-type]
        timeout_keep_alive=int(HTTP_KEEPALIVE.value),
        h11_max_incomplete_event_size=16 * 1024,  # a request header larger than 16 KiB is refused
        backlog=2048,  # the kernel's queue of connections not accepted yet (no descriptor each)
    )


class DatedState(ServerState):
    """uvicorn's shared server state, its default headers made when a response asks for them: the Date
    header of the second the answer is made, with no timer renewing it while nobody asks."""

    def __init__(self, date_header: bool = True) -> None:
        self._date_header = date_header
        self._second: int | None = None
        self._dated: list[tuple[bytes, bytes]] = []
        self._rest: list[tuple[bytes, bytes]] = []
        super().__init__()

    @property
    def default_headers(self) -> list[tuple[bytes, bytes]]:
        second = int(time.time())
        if second != self._second:
            date = [(b"date", formatdate(second, usegmt=True).encode())] if self._date_header else []
            self._second, self._dated = second, date + self._rest
        return self._dated

    @default_headers.setter
    def default_headers(self, headers: list[tuple[bytes, bytes]]) -> None:
        """uvicorn's own renewal: its date is dropped, the other headers kept."""
        self._rest = [header for header in headers if header[0] != b"date"]
        self._second = None


class QuietServer(uvicorn.Server):
    """uvicorn's server with no housekeeping tick. uvicorn wakes ten times a second to renew the Date
    header and look for a shutdown request; an idle exporter paid 0.1 s of CPU a minute for that, and
    0.02 s at one tick a second. Here the Date header is made when an answer asks for it
    (``DatedState``), and a shutdown request (a signal or ``should_exit``) wakes the loop itself, so an
    idle server sleeps until a request or a signal comes."""

    def __init__(self, config: uvicorn.Config) -> None:
        self._wake: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._exit = False
        super().__init__(config)
        self.server_state = DatedState(config.date_header)

    @property
    def should_exit(self) -> bool:
        return self._exit

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        """Set from a signal handler or another thread: the loop is woken through its own queue."""
        self._exit = value
        loop = self._loop
        if value and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._ring)

    async def main_loop(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        self._wake = loop.create_future()
        while not await self.on_tick(0):  # uvicorn's housekeeping, at the start and after each wake
            await self._wake
            self._wake = loop.create_future()

    def _ring(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)


# CPython collects its youngest generation every 700 allocations of container objects. Each cycle of the
# sampler makes a few hundred (readings, points, the snapshot) that are garbage a cycle or two later, so
# that ran about 25 young collections a minute, each tracing whatever had not been freed yet, and the
# older generations' collections after them: about 7 ms of CPU a minute on a simulated 8-GPU node. Every
# 5000 allocations most of a cycle's objects are already gone when it runs (about 1 ms a minute); the
# objects of the start-up (modules, the catalog, the application) are frozen out of every collection.
GC_YOUNG_THRESHOLD = 5000


def tune_gc() -> None:
    """Fewer young collections for a process whose garbage dies young, and none of start-up's objects
    traced again (``gc.freeze``)."""
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def serve(application: Application, sock: socket.socket | None = None, web: WebState | None = None) -> None:
    """Run until SIGTERM/SIGINT; uvicorn shuts down gracefully and the lifespan stops the sampler.

    ``sock``: a socket already bound to the listen address (the command binds first, so a taken port is
    an error before anything starts); without it uvicorn binds itself. uvicorn re-raises the signal
    after its graceful shutdown; the handler installed here turns that (and a signal that arrives before
    uvicorn listens) into a normal exit with status 0."""
    web = web or WebState()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, _exit_cleanly)
        signal.signal(signal.SIGHUP, lambda *_: web.reload_soon())  # re-read on a thread, keep serving
    config = server_config(application, web)
    listener = GuardedListener(sock) if sock is not None else None
    tune_gc()
    QuietServer(config).run(sockets=[listener] if listener is not None else None)
