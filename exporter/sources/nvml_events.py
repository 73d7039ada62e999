"""XID and other critical GPU events, through an NVML event set on its own thread.

``nvmlEventSetWait`` blocks, so it must never run on the sampler's thread; this watcher waits in short
slices so that it notices a stop request within one slice.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
from collections.abc import Callable
from types import ModuleType

from exporter.sources.errors import ErrorCounter
from exporter.sources.nvml import SOURCE, Device, error_name

log = logging.getLogger(__name__)

XID_CRITICAL = 0x8  # nvmlEventTypeXidCriticalError
DOUBLE_BIT_ECC = 0x2  # nvmlEventTypeDoubleBitEccError, reported as XID 48 by the driver
WANTED_EVENTS = XID_CRITICAL | DOUBLE_BIT_ECC


def _address(handle: object) -> int:
    return ctypes.cast(handle, ctypes.c_void_p).value or 0


class XidWatcher:
    def __init__(
        self,
        nvml: ModuleType,
        devices: list[Device],
        errors: ErrorCounter,
        on_xid: Callable[[int, int], None],
        wait_ms: int = 500,
    ) -> None:
        self.N = nvml
        self.devices = [d for d in devices if not d.lost and d.handle is not None]
        self.errors = errors
        self.on_xid = on_xid
        self.wait_ms = wait_ms
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nvml-events", daemon=True)
        self.registered: dict[int, int] = {}  # handle address -> GPU index
        self.ready = threading.Event()

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _count(self, exc: BaseException, what: str) -> str:
        name = error_name(exc, self.N)
        self.errors.inc(SOURCE, name, what)
        return name

    def _run(self) -> None:
        try:
            event_set = self.N.nvmlEventSetCreate()
        except Exception as exc:  # noqa: BLE001
            self._count(exc, "nvmlEventSetCreate")
            self.ready.set()
            return
        try:
            self._register(event_set)
            self.ready.set()
            if self.registered:
                self._loop(event_set)
        finally:
            self.ready.set()
            with contextlib.suppress(Exception):  # the session may already be gone
                self.N.nvmlEventSetFree(event_set)

    def _register(self, event_set: object) -> None:
        for dev in self.devices:
            try:
                supported = self.N.nvmlDeviceGetSupportedEventTypes(dev.handle)
                wanted = supported & WANTED_EVENTS
                if wanted:
                    self.N.nvmlDeviceRegisterEvents(dev.handle, wanted, event_set)
                    self.registered[_address(dev.handle)] = dev.index
            except Exception as exc:  # noqa: BLE001 - a GPU without events still gets its metrics
                self._count(exc, f"event registration on GPU {dev.index}")

    def _loop(self, event_set: object) -> None:
        wait = getattr(self.N, "nvmlEventSetWait_v2", None) or self.N.nvmlEventSetWait
        while not self._stop.is_set():
            try:
                data = wait(event_set, self.wait_ms)
            except self.N.NVMLError_Timeout:
                continue
            except Exception as exc:  # noqa: BLE001
                name = self._count(exc, "nvmlEventSetWait")
                if name in ("Uninitialized", "DriverNotLoaded", "LibRmVersionMismatch"):
                    return
                self._stop.wait(1.0)  # e.g. a lost GPU: do not spin
                continue
            index = self.registered.get(_address(data.device))
            if index is None:
                continue
            if data.eventType & XID_CRITICAL:
                xid = int(data.eventData)
            elif data.eventType & DOUBLE_BIT_ECC:
                xid = 48
            else:
                continue
            log.warning("GPU %d reported XID %d", index, xid)
            self.on_xid(index, xid)
