"""The NVML session as a state machine: down -> opening -> up, and back down with backoff when lost.

While down, ``nvmlInit`` is retried with exponential backoff (``--nvml-retry-initial`` doubling up to
``--nvml-retry-max``); an open with no GPUs counts as down. While up, every GPU is read once per cycle (a
lost GPU re-probed every ``--lost-gpu-retry``), never a second time while a read of it is running. The
cycle's reads run one after another on one worker thread (a chain of turns, ``exporter.collect.poller``):
eight threads calling the driver at once spend more CPU handing the GIL to one another than reading. A
read that hangs keeps that thread; the GPUs still waiting behind it are withdrawn at the next cycle and
read first on a new chain, so a hung GPU delays the others by one cycle, once.
Errors keep their scope: a GPU that fails to read (``GpuReadFailed``) or is lost (``GpuLost``) is that
GPU's status only; a ``SessionError`` from any call (driver unloaded or mismatched) closes the session,
marks every GPU ``nvml_down`` and re-opens it with backoff, re-probing every device on the way back.
The XID event thread lives and dies with the session.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass

from exporter.collect.poller import Call, Poller, Turn, run_chain
from exporter.config.settings import Settings
from exporter.sources.errors import ErrorCounter
from exporter.sources.nvml import Device, GpuLost, GpuReadFailed, NvmlSource, SessionError, error_name
from exporter.sources.nvml_events import XidWatcher
from exporter.sources.readings import GpuReading, GpuState

log = logging.getLogger(__name__)
SOURCE = "nvml"


@dataclass(eq=False)
class GpuSlot:
    device: Device
    status: str = "pending"  # ok, pending, lost, timeout, error, nvml_down
    reading: GpuReading | None = None
    call: Call | None = None
    call_kind: str = ""
    next_reprobe: float = 0.0
    collected_t: float | None = None  # wall time of its last successful collection (kept while down)
    behind: bool = False  # its last read was withdrawn, waiting behind a slow one: first in the next chain

    def withdraw(self) -> bool:
        """Take back a read that has not started (then there is none); False if one is running."""
        if self.call is None:
            return True
        if isinstance(self.call, Turn) and self.call.withdraw():
            self.call, self.behind = None, True
            return True
        return False


@dataclass(frozen=True)
class Harvest:
    """What one cycle's finished calls brought: new readings (with the one before) and GPUs back."""

    readings: list[tuple[GpuReading, GpuReading | None]]  # (new, the one before)
    returned: list[int]  # GPUs that answer again after being lost: their windows start over
    p2p: dict[tuple[int, int, str], bool]  # the P2P results the readings were taken under


class NvmlSession:
    def __init__(self, nvml: NvmlSource, settings: Settings, errors: ErrorCounter, poller: Poller) -> None:
        self.nvml, self.settings, self.errors, self.poller = nvml, settings, errors, poller
        self.state = "down"  # down, opening, up
        self.attempted = False  # has an open returned at least once (readiness)
        self.slots: dict[int, GpuSlot] = {}
        self.p2p: dict[tuple[int, int, str], bool] = {}  # (GPU, peer, capability) -> OK
        self._open_call: Call | None = None
        self._p2p_call: Call | None = None
        self._close_call: Call | None = None  # the last nvmlShutdown: an open waits for it
        self._next_open = 0.0
        self._next_p2p = 0.0
        self._backoff = settings.nvml_retry_initial_s
        self._last_open_error = ""
        self._watcher: XidWatcher | None = None
        self._xid_lock = threading.Lock()
        self._xids: dict[int, Counter[int]] = {}

    @property
    def up(self) -> bool:
        return self.state == "up"

    @property
    def settled(self) -> bool:
        """Has the first open returned, and has every GPU it found been read (or failed) once."""
        return self.attempted and all(s.status != "pending" for s in self.slots.values())

    def states(self) -> list[GpuState]:
        return [
            GpuState(i, s.device.identity, s.status, s.reading, s.collected_t) for i, s in self.slots.items()
        ]

    def xids(self) -> dict[int, dict[int, int]]:
        with self._xid_lock:
            return {i: dict(c) for i, c in self._xids.items()}

    # ---- scheduling ----------------------------------------------------------------------------

    def schedule(self, mono: float) -> None:
        call = self.poller.call
        if (
            self.state == "down"
            and mono >= self._next_open
            and self._open_call is None
            and not self._closing()
        ):
            self._open_call = call(self.nvml.open, name="nvml-open")
            self.state = "opening"
        if self.state != "up":
            return
        due = []
        for slot in self.slots.values():
            if not slot.withdraw():
                continue
            if not slot.device.lost:
                due.append(slot)
            elif mono >= slot.next_reprobe:
                slot.call, slot.call_kind = (
                    call(self.nvml.reprobe, slot.device, name="nvml-reprobe"),
                    "reprobe",
                )
        self._chain(due)
        if self._p2p_call is None and mono >= self._next_p2p and len(self.slots) > 1:
            devices = [s.device for s in self.slots.values()]
            self._p2p_call = call(self.nvml.collect_p2p, devices, name="nvml-p2p")
            self._next_p2p = mono + self.settings.p2p_interval_s

    def _chain(self, due: list[GpuSlot]) -> None:
        """Read ``due`` one after another on one worker; those left waiting last time go first."""
        if not due:
            return
        due.sort(key=lambda slot: not slot.behind)  # stable: otherwise in GPU order
        turns = []
        for slot in due:
            turn = Turn(self.nvml.collect, slot.device, monotonic=self.poller.monotonic)
            slot.call, slot.call_kind, slot.behind = turn, "collect", False
            turns.append(turn)
        self.poller.call(run_chain, turns, name="nvml-collect")

    def _closing(self) -> bool:
        """Is the last close still running? An open started beside it would be shut down by it (NVML
        counts inits: the close would take the new session's reference). A close past the collection
        timeout is taken as hung and no longer waited for."""
        c = self._close_call
        return c is not None and not c.done.is_set() and c.elapsed <= self.settings.collect_timeout_s

    def _close_nvml(self, *args: object) -> Call:
        self._close_call = self.poller.call(self.nvml.close, *args, name="nvml-close")
        return self._close_call

    def pending(self) -> list[Call]:
        calls = [self._open_call, self._p2p_call, *(s.call for s in self.slots.values())]
        return [c for c in calls if c is not None and not c.done.is_set()]

    # ---- results -------------------------------------------------------------------------------

    def harvest(self, mono: float) -> Harvest:
        out = Harvest([], [], self.p2p)
        if self._open_call is not None and self._open_call.done.is_set():
            call, self._open_call = self._open_call, None
            self.attempted = True
            if call.error is not None:
                self._open_failed(call.error, mono)
            else:
                self._open_succeeded(call.result, mono)  # type: ignore[arg-type]
        session_lost, times, failed = False, [], 0
        for slot in self.slots.values():
            call = slot.call
            if call is None or not call.done.is_set():
                continue
            slot.call = None
            if isinstance(call.error, SessionError):
                session_lost = True
            elif slot.call_kind == "reprobe":
                if self._reprobed(slot, call, mono):
                    out.returned.append(slot.device.index)
            elif call.error is not None:
                self._gpu_failed(slot, call.error, mono)
                failed += 1
            else:
                prev, slot.reading, slot.status = slot.reading, call.result, "ok"  # type: ignore[assignment]
                slot.collected_t = slot.reading.t  # type: ignore[union-attr]
                out.readings.append((call.result, prev))  # type: ignore[arg-type]
                times.append(call.elapsed)
        if times or failed:  # the source answered when at least one GPU did; it took its slowest GPU
            self.poller.observe(SOURCE, bool(times), max(times) if times else None)
        if self._p2p_call is not None and self._p2p_call.done.is_set():
            call, self._p2p_call = self._p2p_call, None
            if isinstance(call.error, SessionError):
                session_lost = True
            elif call.error is None:
                self.p2p = call.result  # type: ignore[assignment]
        if session_lost:
            self._session_lost(mono)
        return out

    def _gpu_failed(self, slot: GpuSlot, error: BaseException, mono: float) -> None:
        index = slot.device.index
        if isinstance(error, GpuReadFailed):  # this GPU only; its collection is retried
            if slot.status != "error":
                log.warning("GPU %d does not answer (%s); the others keep reporting", index, error)
            slot.status, slot.reading = "error", None
        elif isinstance(error, GpuLost):
            slot.device.lost, slot.status, slot.reading = True, "lost", None
            slot.next_reprobe = mono + self.settings.lost_gpu_retry_s
            log.warning("GPU %d is lost (%s); the other GPUs keep reporting", index, error)
        else:
            self.errors.inc(SOURCE, "InternalError", repr(error))
            log.error("collecting GPU %d failed", index, exc_info=error)
            slot.status = "error"

    def _reprobed(self, slot: GpuSlot, call: Call, mono: float) -> bool:
        device = call.result if call.error is None else slot.device
        if isinstance(device, Device) and not device.lost:
            log.info("GPU %d answers again", device.index)
            slot.device, slot.status = device, "pending"
            return True
        slot.next_reprobe = mono + self.settings.lost_gpu_retry_s
        return False

    def check_timeouts(self) -> None:
        limit = self.settings.collect_timeout_s
        for slot in self.slots.values():
            if slot.call is not None and slot.call.overdue(limit):
                slot.status = "timeout"
                self.poller.timed_out(SOURCE, f"GPU {slot.device.index}: a call has not returned")
        for call in (self._open_call, self._p2p_call):
            if call is not None and call.overdue(limit):
                self.poller.timed_out(SOURCE, "a call has not returned")

    # ---- transitions ---------------------------------------------------------------------------

    def _open_succeeded(self, devices: list[Device], mono: float) -> None:
        if not devices:
            self._retry_later("NoGpus", "NVML found no GPUs", mono)
            self._close_nvml()
            return
        self.state = "up"
        self._backoff = self.settings.nvml_retry_initial_s
        self._last_open_error = ""
        before, self.slots = self.slots, {}
        for old_slot in before.values():
            old_slot.withdraw()  # the last session's reads still waiting behind a hung one
        for dev in devices:
            slot = GpuSlot(device=dev)
            old = before.get(dev.index)
            if old is not None and old.device.identity.uuid == dev.identity.uuid:
                slot.collected_t = old.collected_t  # the age of its data outlives a session restart
            if dev.lost:
                slot.status, slot.next_reprobe = "lost", mono + self.settings.lost_gpu_retry_s
            self.slots[dev.index] = slot
        self._next_p2p = mono
        self._watcher = XidWatcher(self.nvml.N, devices, self.errors, self._on_xid)
        self._watcher.start()
        log.info(
            "NVML up: %d GPU(s), driver %s, CUDA %s",
            len(devices),
            self.nvml.driver.get("driver_version", "?"),
            self.nvml.driver.get("cuda_version", "?"),
        )

    def _open_failed(self, error: BaseException, mono: float) -> None:
        name = error_name(error, self.nvml.N)
        self.errors.inc(SOURCE, name, "nvmlInit", level=logging.DEBUG)  # _retry_later's warning says it
        self._retry_later(name, str(error), mono)
        self._close_nvml()

    def _retry_later(self, name: str, detail: str, mono: float) -> None:
        if name != self._last_open_error:
            log.warning(
                "NVML is not usable (%s: %s): serving host and exporter metrics only; retrying in %.0f s, "
                "backing off to %.0f s",
                name,
                detail,
                self._backoff,
                self.settings.nvml_retry_max_s,
            )
            self._last_open_error = name
        self.poller.observe(SOURCE, False)
        self._down(mono)

    def _session_lost(self, mono: float) -> None:
        log.warning("the NVML session is gone (driver unloaded or mismatched); re-initialising with backoff")
        self.close(wait_s=0.0)
        for slot in self.slots.values():
            slot.withdraw()  # reads still waiting in the chain are not started on a closed session
            slot.status, slot.reading, slot.call = "nvml_down", None, None
        self._last_open_error = ""
        self.poller.observe(SOURCE, False)
        self._down(mono)

    def _down(self, mono: float) -> None:
        self.state = "down"
        self._next_open = mono + self._backoff
        self._backoff = min(self._backoff * 2, self.settings.nvml_retry_max_s)

    def close(self, wait_s: float) -> None:
        if self._watcher is not None:
            self._watcher.stop(timeout=wait_s)
            self._watcher = None
        if self.state == "up":
            devices = [s.device for s in self.slots.values()]
            self._close_nvml(devices).done.wait(wait_s)

    def _on_xid(self, index: int, xid: int) -> None:
        with self._xid_lock:
            self._xids.setdefault(index, Counter())[xid] += 1
