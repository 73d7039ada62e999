"""The verdict registry: each kind named once, with its detector, its timing, the ledger family whose loss
it reports, the alert that pages for it and how dashboards draw it. Alert rules, dashboards, docs and the
bench read this; adding a kind is one entry here plus its detector and tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from exporter.analysis import detectors as d
from exporter.analysis.verdicts import Timing
from exporter.policy.thresholds import (
    ALERT_POLICIES,
    COMM_BOUND_FIRE,
    COMM_BOUND_RESOLVE,
    HANG_FIRE,
    HANG_RESOLVE,
    NVLINK_FIRE,
    NVLINK_RESOLVE,
    POWER_FIRE,
    POWER_RESOLVE,
    SCORE_ENTER,
    SCORE_EXIT,
    SHM_RESOLVE,
    SHM_RESOLVE_RATIO,
    SHM_WARNING,
    STARVATION_FIRE,
    STARVATION_RESOLVE,
    THERMAL_FIRE,
    THERMAL_RESOLVE,
    AlertPolicy,
    Threshold,
)

FULL = 1.0  # a score that is a fraction of a horizon fires when the horizon is reached


@dataclass(frozen=True)
class Kind:
    name: str
    detector: Callable[[d.Context], d.Evidence]
    timing: Timing
    alert: str  # the alert that pages for it (its `for` and severity live in the threshold table)
    family: str  # the ledger family whose lost time it reports ("" when it is not a time loss)
    causes: tuple[str, ...]
    meaning: str
    label: str  # dashboards: the state timeline's text...
    colour: str  # ...and colour
    rank: int  # ...and code: the most serious verdict of a GPU is the one shown

    @property
    def policy(self) -> AlertPolicy:
        return ALERT_POLICIES[self.alert]


def _timing(fire: Threshold, resolve: Threshold) -> Timing:
    return Timing(SCORE_ENTER.value, SCORE_EXIT.value, fire.value, resolve.value)


_ALL = (
    Kind(
        "data_starvation",
        d.detect_starvation,
        _timing(STARVATION_FIRE, STARVATION_RESOLVE),
        "GpuDataStarvation",
        "input",
        ("io", "cpu", "shm", "host_transfer", "checkpoint", "unknown"),
        "the GPU waits for its input (loader, offload, copies) or for checkpoints to be written",
        "starving",
        "red",
        7,
    ),
    Kind(
        "comm_hang",
        d.detect_comm_hang,
        _timing(HANG_FIRE, HANG_RESOLVE),
        "GpuCommHang",
        "stall",
        ("all_ranks", "peer_not_in_collective", "no_progress"),
        "stuck in a collective: util pinned, power near idle, no NVLink/PCIe traffic, for minutes",
        "hung",
        "dark-red",
        8,
    ),
    Kind(
        "comm_bound",
        d.detect_comm_bound,
        _timing(COMM_BOUND_FIRE, COMM_BOUND_RESOLVE),
        "GpuCommBound",
        "comm",
        (),
        "steps dominated by slow collectives: kernels resident, few SMs active, traffic flowing",
        "comm-bound",
        "light-red",
        6,
    ),
    Kind(
        "thermal_throttle",
        d.detect_thermal,
        _timing(THERMAL_FIRE, THERMAL_RESOLVE),
        "GpuThermalThrottling",
        "throttle",
        (),
        "clocks lowered for heat, or heading for the slowdown point",
        "thermal",
        "orange",
        3,
    ),
    Kind(
        "power_throttle",
        d.detect_power,
        _timing(POWER_FIRE, POWER_RESOLVE),
        "GpuPowerCapped",
        "throttle",
        ("cap_below_default", "at_default_limit"),
        "held at a power cap below the board's default limit, clocks reduced",
        "power capped",
        "purple",
        2,
    ),
    Kind(
        "shm_exhaustion",
        d.detect_shm,
        # the score is the fill ratio: fire at the warning line, resolve below the resolve line
        Timing(SHM_WARNING.value, SHM_RESOLVE_RATIO.value, 0.0, SHM_RESOLVE.value),
        "GpuShmNearlyFull",
        "",
        (),
        "/dev/shm or a shm volume nearly full: DataLoader workers about to die with Bus error",
        "shm full",
        "dark-orange",
        5,
    ),
    Kind(
        "idle_allocated",
        d.detect_idle,
        # the score is idle time over the idle horizon: it fires when that is reached, resolves on work
        Timing(FULL, FULL, 0.0, 0.0),
        "GpuIdleAllocated",
        "idle",
        (),
        "memory resident, no kernel for 5 minutes: a reserved GPU doing nothing",
        "idle allocated",
        "blue",
        1,
    ),
    Kind(
        "nvlink_degraded",
        d.detect_nvlink,
        _timing(NVLINK_FIRE, NVLINK_RESOLVE),
        "GpuNvlinkDown",
        "",
        ("links_down", "fabric", "p2p", "errors"),
        "links down, fabric not ready, P2P failing, NVLink errors climbing",
        "NVLink degraded",
        "yellow",
        4,
    ),
)

KINDS: dict[str, Kind] = {k.name: k for k in _ALL}
NAMES: tuple[str, ...] = tuple(KINDS)
