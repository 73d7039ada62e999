"""``record``: sample like ``serve`` but write the samples as a trace CSV that ``replay`` reads. The
application is built the same way (exporter/app.py); only its listeners differ."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import sys
import tempfile
import threading
from typing import TextIO

from exporter.app import build, configure_logging
from exporter.config.settings import Settings
from exporter.config.usage import CommandError, UsageError
from exporter.offline.traces import TraceWriter

log = logging.getLogger("exporter")


class _Output:
    """Where the rows go: stdout for '-', else ``path``, created with the first row (a run that saw no GPU
    leaves no file behind) and flushed after every batch, so the file is readable as it grows and a
    killed recording keeps what it wrote. A reader of stdout that goes away ends the recording."""

    def __init__(self, output: str) -> None:
        self.output = output
        self.stream: TextIO | None = sys.stdout if output == "-" else None
        self.reader_gone = False
        self.closed = False
        self.error = ""  # why the file could not be written

    def open(self) -> TextIO:
        if self.stream is None:
            self.stream = open(self.output, "w", encoding="utf-8")  # noqa: SIM115 - open until the end
        return self.stream

    def close(self) -> None:
        self.closed = True
        if self.stream is None:
            return
        try:
            if not self.reader_gone:
                self.stream.flush()
        except OSError as exc:  # a full disk, a broken device: said once, by record's caller
            self.failed(exc)
        if self.stream is not sys.stdout:
            with contextlib.suppress(OSError):  # it flushes what is left again: said above
                self.stream.close()

    def failed(self, exc: OSError) -> None:
        """A write that failed: the reader of stdout went away, or the file cannot be written."""
        if _pipe_closed(exc):
            self.reader_gone = True
        elif not self.error:
            self.error = f"cannot write {self.output} ({exc.strerror or exc})"


def record(settings: Settings, output: str, duration: float | None) -> None:
    """Samples to ``output`` (see ``_Output``) until ``duration`` ends, a signal, or the reader of stdout
    goes away (then the process ends as a Unix tool does: by SIGPIPE, quietly)."""
    configure_logging(settings.log_level)
    _check_writable(output)
    built = build(settings)
    app, out = built.app, _Output(output)
    writer: TraceWriter | None = None
    lock, done = threading.Lock(), threading.Event()

    def on_gpu(identity, points) -> None:
        nonlocal writer
        with lock:
            if out.closed or out.reader_gone or out.error or (done.is_set() and writer is None):
                return  # over, or the recording ended before its first row
            try:
                if writer is None:
                    writer = TraceWriter(out.open())
                for point in points:
                    writer.gpu(str(identity.index), identity.name, point)
                writer.stream.flush()
            except OSError as exc:
                out.failed(exc)
                done.set()

    def on_host(point) -> None:
        with lock:
            if writer is not None:
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
            done.set()
            out.close()
        built.close()
    rows = writer.rows if writer is not None else 0
    if out.reader_gone:
        _end_by_sigpipe()
    if out.error:
        raise CommandError(f"{out.error}; {rows} rows written")
    if not rows:
        raise CommandError(
            f"recorded nothing: no GPU answered (see the warnings above); {output} not written"
        )
    log.info("wrote %d rows to %s", rows, output)


def _check_writable(output: str) -> None:
    """Fail before sampling when ``output`` cannot be created: a file made and removed beside it."""
    if output == "-":
        return
    target = os.path.abspath(output)
    if os.path.isdir(target):
        raise UsageError(f"--output: cannot write {output} (a directory)")
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", dir=os.path.dirname(target))
    except OSError as exc:
        raise UsageError(f"--output: cannot write {output} ({exc.strerror})") from None
    os.close(fd)
    os.unlink(probe)


def _pipe_closed(exc: OSError) -> bool:
    return isinstance(exc, BrokenPipeError) or exc.errno in (errno.EPIPE, errno.ECONNRESET)


def _end_by_sigpipe() -> None:
    """The reader of stdout went away: end as ``yes | head -1`` does, killed by SIGPIPE (status 141 in a
    shell), without a word. stdout points at /dev/null first so nothing buffered is flushed at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    logging.shutdown()
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGPIPE)
    raise SystemExit(128 + signal.SIGPIPE)  # not reached: the signal ends the process
