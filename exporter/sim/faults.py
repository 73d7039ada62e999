"""Fault injection for the fake NVML driver: make any call fail, raise, or hang."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class Fault:
    function: str  # C entry point, e.g. "nvmlDeviceGetPowerUsage"; "*" matches every call
    error: int | None = None  # nvmlReturn_t code to return
    gpu: int | None = None  # only calls on this GPU's handle
    hang_s: float = 0.0  # block this long first (float("inf"): until the fault is cleared)
    exception: BaseException | None = None  # raise this instead of returning (e.g. a Python-level error)
    times: int | None = None  # how many calls it affects; None = until cleared
    released: threading.Event = field(default_factory=threading.Event)

    def matches(self, function: str, gpu: int | None) -> bool:
        if self.function not in ("*", function):
            return False
        return self.gpu is None or self.gpu == gpu


class FaultPlan:
    """Thread-safe list of active faults. The first matching fault applies."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []

    def add(self, function: str, error: int | None = None, **kwargs: object) -> Fault:
        fault = Fault(function=function, error=error, **kwargs)  # type: ignore[arg-type]
        with self._lock:
            self._faults.append(fault)
        return fault

    def remove(self, fault: Fault) -> None:
        fault.released.set()
        with self._lock:
            if fault in self._faults:
                self._faults.remove(fault)

    def clear(self) -> None:
        with self._lock:
            faults, self._faults = self._faults, []
        for fault in faults:
            fault.released.set()

    def take(self, function: str, gpu: int | None) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.matches(function, gpu):
                    if fault.times is not None:
                        fault.times -= 1
                        if fault.times <= 0:
                            self._faults.remove(fault)
                    return fault
        return None

    @staticmethod
    def apply(fault: Fault) -> None:
        """Block for the fault's hang (outside any driver lock), then raise its exception if any."""
        if fault.hang_s > 0:
            fault.released.wait(None if fault.hang_s == float("inf") else fault.hang_s)
        if fault.exception is not None:
            raise fault.exception
