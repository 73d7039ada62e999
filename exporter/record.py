"""``record``: sample like ``serve`` but write the samples as a trace CSV that ``replay`` reads. The
application is built the same way (exporter/app.py); only its listeners differ."""

from __future__ import annotations

import logging
import os
import signal
import sys
import tempfile
import threading
from typing import TextIO

from exporter.app import build, configure_logging
from exporter.config import Settings
from exporter.traces import TraceWriter
from exporter.usage import CommandError, UsageError

log = logging.getLogger("exporter")


def record(settings: Settings, output: str, duration: float | None) -> None:
    """Samples to ``output`` through a temporary file beside it, renamed into place only when at least one
    row was recorded: a run that saw no GPU fails and leaves no empty trace behind."""
    configure_logging(settings.log_level)
    stream, partial = _open(output)
    try:
        built = build(settings)
    except BaseException:
        _discard(stream, partial)
        raise
    app = built.app
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
            if writer.rows and partial is not None:
                stream.close()
                os.replace(partial, output)
            elif partial is not None:
                _discard(stream, partial)
            else:
                stream.flush()
        built.close()
    if not writer.rows:
        raise CommandError(
            f"recorded nothing: no GPU answered (see the warnings above); {output} not written"
        )
    log.info("wrote %d rows to %s", writer.rows, output)


def _open(output: str) -> tuple[TextIO, str | None]:
    """stdout for '-', else a temporary file beside ``output`` (and its path) with open()'s mode."""
    if output == "-":
        return sys.stdout, None
    target = os.path.abspath(output)
    try:
        fd, partial = tempfile.mkstemp(
            prefix=f".{os.path.basename(target)}.", suffix=".partial", dir=os.path.dirname(target)
        )
    except OSError as exc:
        raise UsageError(f"--output: cannot write {output} ({exc.strerror})") from None
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)  # what open() would have made, not mkstemp's 0600
    return os.fdopen(fd, "w", encoding="utf-8"), partial


def _discard(stream: TextIO, partial: str | None) -> None:
    if partial is not None:
        stream.close()
        os.unlink(partial)
