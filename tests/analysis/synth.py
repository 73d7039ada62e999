"""Constructed telemetry for detector tests: per-GPU point streams with a given shape."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from exporter.analysis.engine import Analyzer, VerdictEvent
from exporter.analysis.points import GpuPoint, HostPoint

GIB = float(1 << 30)
H100 = dict(
    power_limit_w=700.0,
    power_default_w=700.0,
    mem_total_bytes=80 * GIB,
    sm_clock_max_hz=1980e6,
    nvlink_links=18.0,
)

# what a healthy training step looks like on an H100
WORKING = GpuPoint(
    t=0.0,
    util=1.0,
    mem_util=0.45,
    power_w=560.0,
    mem_used_bytes=62 * GIB,
    temp_c=70.0,
    sm_clock_hz=1980e6,
    reasons=0,
    sm_active=0.78,
    tensor_active=0.43,
    nvlink_tx_bps=25e9,
    nvlink_rx_bps=25e9,
    pcie_tx_bps=1e8,
    pcie_rx_bps=1e9,
    nvlink_active=18.0,
    **H100,
)
IDLE = replace(
    WORKING,
    util=0.0,
    mem_util=0.0,
    power_w=85.0,
    reasons=0x1,
    sm_active=0.0,
    tensor_active=0.0,
    nvlink_tx_bps=0.0,
    nvlink_rx_bps=0.0,
    pcie_rx_bps=1e6,
)
NCCL_SPIN = replace(
    WORKING,
    util=1.0,
    mem_util=0.0,
    power_w=145.0,
    sm_active=0.12,
    tensor_active=0.0,
    nvlink_tx_bps=0.0,
    nvlink_rx_bps=0.0,
    pcie_tx_bps=1e6,
    pcie_rx_bps=1e6,
)
HOST_OK = HostPoint(
    t=0.0,
    iowait=0.02,
    core_busy_max=0.6,
    shm_used_bytes=2 * GIB,
    shm_size_bytes=64 * GIB,
    disk_read_bps=900e6,
    psi_io=0.01,
    psi_cpu=0.02,
    psi_memory=0.0,
)

Shape = Callable[[float], GpuPoint]  # time -> the point a GPU shows then


def steady(point: GpuPoint) -> Shape:
    return lambda t: point


def alternating(busy_s: float, idle_s: float, busy: GpuPoint = WORKING, idle: GpuPoint = IDLE) -> Shape:
    """Busy then idle, repeating: a rank waiting for its input every step."""
    period = busy_s + idle_s
    return lambda t: busy if (t % period) < busy_s else idle


def switch(at: float, before: Shape, after: Shape) -> Shape:
    return lambda t: before(t) if t < at else after(t)


@dataclass
class Run:
    analyzer: Analyzer
    events: list[VerdictEvent]
    states: dict

    def fired(self, kind: str, gpu: str | None = None) -> list[VerdictEvent]:
        return [
            e for e in self.events if e.kind == kind and e.state == "firing" and (gpu is None or e.gpu == gpu)
        ]

    def first(self, kind: str, gpu: str | None = None) -> float | None:
        fired = self.fired(kind, gpu)
        return min(e.t for e in fired) if fired else None

    def kinds(self) -> set[str]:
        return {e.kind for e in self.events if e.state == "firing"}


def run(
    shapes: dict[str, Shape],
    seconds: float,
    dt: float = 0.2,
    host: Callable[[float], HostPoint | None] | None = lambda t: HOST_OK,
    analyzer: Analyzer | None = None,
    start: float = 0.0,
) -> Run:
    """Feed every GPU's shape at ``dt`` and the host once a second; evaluate every second like live."""
    analyzer = analyzer or Analyzer()
    events: list[VerdictEvent] = []
    states: dict = {}
    steps = round(seconds / dt)
    per_second = max(1, round(1 / dt))  # samples further apart than a second: evaluated between them too
    clock = start
    for k in range(1, steps + 1):
        t = start + k * dt
        while clock + 1 < t - 1e-9:  # the clock's seconds between two samples
            clock += 1
            states, new = analyzer.evaluate(clock)
            events += new
        clock = t
        for gpu, shape in shapes.items():
            analyzer.add_gpu_points(gpu, [replace(shape(t), t=t)])
        if k % per_second == 0:
            point = host(t) if host else None
            if point is not None:
                analyzer.add_host_point(replace(point, t=t))
            states, new = analyzer.evaluate(t)
            events += new
    return Run(analyzer, events, states)
