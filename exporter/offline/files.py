"""The files replay reads and writes, opened so that none can hang or half-replace it.

Reading: ``open_input`` opens without waiting (O_NONBLOCK: a FIFO with no writer would otherwise hold the
open forever, as ``cat`` does) and says what it opened, so each reader decides in one place what it takes:
a regular file (``open_regular``), or a stream it copies under a time bound (the trace reader's pipes).

Writing: ``check_output`` refuses at once what cannot be written, before any work; ``write_atomically``
writes a temporary file beside the target and renames it over, so a full disk or a kill part-way leaves
the previous file whole, never a truncated one."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


class NotRegularFile(OSError):
    """A FIFO, a device or a socket where a file was wanted (its strerror says so, for one-line errors)."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(f"{path}: not a regular file")
        self.strerror = "not a regular file"
        self.filename = str(path)


def open_input(path: str | Path) -> tuple[int, bool]:
    """A descriptor on ``path`` opened for reading without waiting for a FIFO's writer, and whether it is a
    regular file (checked on the open descriptor, so a file swapped after a look cannot slip through).
    OSError as ``open`` raises it; a directory is IsADirectoryError."""
    fd = os.open(path, _READ_FLAGS)
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if stat.S_ISDIR(mode):
        os.close(fd)
        raise IsADirectoryError(21, "is a directory", str(path))
    return fd, stat.S_ISREG(mode)


def open_regular(path: str | Path) -> int:
    """A blocking descriptor on the regular file ``path``; NotRegularFile for a FIFO, a device or a socket
    (a FIFO nobody writes to would block, a device like /dev/zero never end)."""
    fd, regular = open_input(path)
    if not regular:
        os.close(fd)
        raise NotRegularFile(path)
    os.set_blocking(fd, True)
    return fd


def read_small(path: str | Path, limit: int) -> bytes:
    """The bytes of the regular file ``path``, refused (OSError, its strerror one line's worth) when it is
    a FIFO or a device (NotRegularFile) or holds more than ``limit`` bytes: a secret or a certificate is
    a few KiB, and /dev/zero would never end."""
    with open(open_regular(path), "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OSError(27, f"larger than {limit} bytes", str(path))  # 27: EFBIG
    return data


def check_output(path: str | Path) -> None:
    """Raise OSError (one line's worth in its strerror) when ``path`` cannot take a file written by
    ``write_atomically``: a directory, something other than a regular file (a FIFO would block the write,
    /dev/full fails it, and the rename would replace the device), a file not writable, or a directory
    that cannot hold the temporary file. Nothing is created or changed."""
    target = Path(os.path.realpath(path))
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and stat.S_ISDIR(mode):
        raise IsADirectoryError(21, "is a directory", str(path))
    if mode is not None and not stat.S_ISREG(mode):
        raise NotRegularFile(path)
    if mode is not None and not os.access(target, os.W_OK):
        raise PermissionError(13, "Permission denied", str(path))
    fd, temporary = _temporary(target)
    os.close(fd)
    os.unlink(temporary)


def write_atomically(path: str | Path, text: str) -> int:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file in its directory, renamed over it once
    whole and on disk: on any failure the previous file stays as it was, the temporary one is removed,
    and the OSError is raised. A symbolic link stays one: the file it points to is replaced. The file
    keeps the mode of the one it replaces. Returns the bytes written."""
    target = Path(os.path.realpath(path))
    data = text.encode("utf-8")
    fd, temporary = _temporary(target)
    try:
        with open(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())  # on disk before the rename: a crash then leaves one whole file
        with contextlib.suppress(FileNotFoundError):
            os.chmod(temporary, stat.S_IMODE(target.stat().st_mode))
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return len(data)


def _temporary(target: Path) -> tuple[int, Path]:
    """A new file beside ``target``, hidden, with the mode a new file gets (0666 less the umask)."""
    while True:
        temporary = target.with_name(f".{target.name[:200]}.{secrets.token_hex(4)}.tmp")  # within NAME_MAX
        try:
            return os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666), temporary
        except FileExistsError:
            continue
