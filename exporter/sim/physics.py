"""A small physical model of a GPU node running distributed training.

The node advances in driver-sample ticks (default 0.2 s). Each tick works out, per GPU, which phase of
a training step it is in (compute, all-reduce, waiting in NCCL for a peer, waiting for data, hung,
idle, a collective crawling over sockets, a checkpoint being written, host-bound offload), and from that
its utilization, SM/tensor/DRAM activity, power (smoothed, capped by the enforced limit), temperature
(first-order, with thermal clock reduction), clocks, clock-event reasons and the cumulative counters
NVML exposes (energy, NVLink/PCIe bytes, throttle time, GPM integrals).
The host side (CPU jiffies, disk reads and writes, PSI, /dev/shm fill) is advanced on the same ticks.

Everything is deterministic for a given clock: noise comes from a hash of (gpu, tick), not a RNG.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple

from exporter.policy.nvml_vocab import GPU_IDLE, HW_THERMAL, SW_POWER_CAP, SW_THERMAL, THROTTLE_COUNTER_BITS
from exporter.sim.scenarios import TOURS, Scenario, tour_seconds, tour_timeline

MiB = 1 << 20
GiB = 1 << 30


NVLINK_ERROR_TYPES = ("replay", "recovery", "crc_flit", "crc_data")


@dataclass(frozen=True)
class BoardSpec:
    """Constants of one board model. Defaults: H100 SXM5 80 GB."""

    name: str = "NVIDIA H100 80GB HBM3"
    tdp_w: float = 700.0
    mem_total_bytes: int = 81559 * MiB
    sm_max_mhz: float = 1980.0
    sm_idle_mhz: float = 345.0
    mem_max_mhz: float = 2619.0
    nvlinks: int = 18
    nvlink_peak_bytes_s: float = 300e9  # aggregate per direction while an all-reduce runs
    throttle_start_c: float = 85.0  # clocks start to drop above this
    slowdown_c: float = 87.0
    shutdown_c: float = 92.0
    compute_capability: str = "9.0"
    gpm: bool = True
    driver_version: str = "550.90.07"
    cuda_version: int = 12040


class Phase(IntEnum):
    COMPUTE = 0
    COMM = 1  # all-reduce / all-gather moving data
    NCCL_WAIT = 2  # inside a collective, waiting for a slower peer
    DATA_WAIT = 3  # waiting for the next batch: no kernel running
    IDLE = 4  # process holds memory, launches nothing
    HANG = 5  # stuck inside a collective for good
    OFF = 6  # no job on the GPU
    TP_COMPUTE = 7  # computing, with tensor-parallel exchanges over NVLink
    SOCKET_COMM = 8  # all-reduce over sockets through the NIC: NCCL kernel resident, SMs mostly wait
    CHECKPOINT = 9  # every rank waits while the checkpoint is written: memory resident, almost no kernels
    OFFLOAD_WAIT = 10  # FSDP CPU offload: parameters/optimizer state crawl over PCIe; a trickle of kernels
    OFFLOAD_BURST = 11  # FSDP CPU offload: a short burst of compute between host transfers


@dataclass(frozen=True)
class Factors:
    busy: float
    sm: float
    occupancy: float
    tensor: float
    dram: float
    mem: float  # memory-controller utilization (what NVML calls memory util)
    power: float  # share of TDP
    nvlink: float  # share of the NVLink peak
    pcie_rx: float = 0.0  # host -> GPU traffic beyond the loader's baseline, GB/s
    pcie_tx: float = 0.0  # GPU -> host, GB/s


FACTORS: dict[Phase, Factors] = {
    Phase.COMPUTE: Factors(1.0, 0.80, 0.45, 0.45, 0.50, 0.45, 0.80, 0.10),
    Phase.COMM: Factors(1.0, 0.25, 0.10, 0.0, 0.30, 0.35, 0.65, 1.0),
    Phase.NCCL_WAIT: Factors(1.0, 0.12, 0.05, 0.0, 0.02, 0.01, 0.21, 0.0),
    Phase.DATA_WAIT: Factors(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.12, 0.0),
    Phase.IDLE: Factors(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.16, 0.0),
    Phase.HANG: Factors(1.0, 0.12, 0.05, 0.0, 0.0, 0.0, 0.21, 0.0),
    Phase.OFF: Factors(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.10, 0.0),
    Phase.TP_COMPUTE: Factors(0.99, 0.80, 0.42, 0.40, 0.50, 0.45, 0.80, 0.17),
    Phase.SOCKET_COMM: Factors(1.0, 0.13, 0.06, 0.0, 0.04, 0.04, 0.25, 0.0025, pcie_rx=4.0, pcie_tx=4.0),
    Phase.CHECKPOINT: Factors(0.04, 0.01, 0.01, 0.0, 0.01, 0.02, 0.186, 0.0, pcie_tx=1.5),
    Phase.OFFLOAD_WAIT: Factors(0.05, 0.03, 0.02, 0.0, 0.05, 0.08, 0.18, 0.0, pcie_rx=14.0, pcie_tx=6.0),
    Phase.OFFLOAD_BURST: Factors(1.0, 0.50, 0.30, 0.30, 0.40, 0.35, 0.50, 0.03, pcie_rx=10.0, pcie_tx=5.0),
}
N_FACTORS = len(Factors.__dataclass_fields__)

# phases in which the job runs and the loader feeds it (the baseline PCIe traffic flows)
FED = frozenset(
    {
        Phase.COMPUTE,
        Phase.COMM,
        Phase.NCCL_WAIT,
        Phase.DATA_WAIT,
        Phase.TP_COMPUTE,
        Phase.SOCKET_COMM,
        Phase.OFFLOAD_WAIT,
        Phase.OFFLOAD_BURST,
    }
)

FACTOR_TUPLES: dict[Phase, tuple[float, ...]] = {
    phase: tuple(getattr(f, name) for name in Factors.__dataclass_fields__) for phase, f in FACTORS.items()
}


class _Plan(NamedTuple):
    name: str  # the scenario in force, "healthy" before its onset
    affected: frozenset[int]
    starving: frozenset[int]
    hot: frozenset[int]
    wait: float  # seconds per step that starving ranks wait for data (and the others wait for them)
    comm: float
    period: float
    off: bool  # the job has died
    start: float  # absolute time the segment began
    onset: float  # absolute time the fault began
    waiting: frozenset[int]  # the GPUs whose job waits for a starving or hot rank (its pod's GPUs)


# step anatomy, seconds
COMPUTE_S = 0.93
COMM_S = 0.15
SLOW_COMM_S = 0.6  # collectives over PCIe once NVLink is gone
GAP_S = 0.03  # the loader's hand-over between steps, even when healthy
STARVED_WAIT_S = 0.9
# comm_bound: a fixed step whose compute part varies a little from step to step; the rest is all-reduce
SOCKET_STEP_S = 2.0
SOCKET_COMPUTE_S = 0.9  # +- 0.1
# checkpoint_stall: compute, then every rank waits while the save runs; one save per cycle
CHECKPOINT_CYCLE_S = 85.0
CHECKPOINT_SAVE_S = 30.0  # .. + 5, from save to save
# offload_starvation: one burst of compute at an irregular place in every cycle
OFFLOAD_CYCLE_S = 0.9
OFFLOAD_BURST_S = 0.235  # +- 0.09

AMBIENT_C = 28.0
HEAT_K = 0.075  # degrees per watt at steady state
HOT_HEAT_K = 0.14  # a GPU with a blocked air path
THERMAL_TAU_S = 40.0
POWER_TAU_S = 0.15

JOB_MEM_BYTES = 62000 * MiB
IDLE_JOB_MEM_BYTES = 17000 * MiB
EMPTY_MEM_BYTES = 3 * MiB

HOST_CORES = 32
LOADER_CORES = 8
DEFAULT_SHM_BYTES = 64 * GiB
BASE_SHM_USED = 2 * GiB


def noise(*key: int) -> float:
    """Deterministic noise in [-1, 1] from integer keys."""
    h = 2166136261
    for k in key:
        h = ((h ^ (k & 0xFFFFFFFF)) * 16777619) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0x5BD1E995) & 0xFFFFFFFF
    h ^= h >> 15
    return (h / 0xFFFFFFFF) * 2.0 - 1.0


@dataclass
class DriverSample:
    ts_us: int
    util: int
    mem_util: int
    power_mw: int


@dataclass
class GpuState:
    index: int
    uuid: str
    pci_bus_id: str
    serial: str
    board: BoardSpec
    power_limit_w: float
    temp_c: float = 40.0
    power_w: float = 70.0
    util: int = 0
    mem_util: int = 0
    sm_clock_mhz: float = 345.0
    mem_clock_mhz: float = 2619.0
    reasons: int = GPU_IDLE
    clock_factor: float = 1.0
    mem_used_bytes: int = EMPTY_MEM_BYTES
    processes: int = 0
    energy_mj: float = 0.0
    pcie_tx: float = 0.0
    pcie_rx: float = 0.0
    throttle_ns: dict[str, float] = field(default_factory=lambda: dict.fromkeys(THROTTLE_COUNTER_BITS, 0.0))
    gpm_integrals: list[float] = field(
        default_factory=lambda: [0.0, 0.0, 0.0, 0.0, 0.0]
    )  # t, sm, occ, tc, dram
    link_up: list[bool] = field(default_factory=list)
    link_tx: list[float] = field(default_factory=list)
    link_rx: list[float] = field(default_factory=list)
    link_errors: list[dict[str, int]] = field(default_factory=list)
    fabric_state: int = 3  # NVML_GPU_FABRIC_STATE_COMPLETED
    lost: bool = False
    unresponsive: bool = False  # every NVML call on it times out (gpu_unresponsive)
    samples: deque[DriverSample] = field(default_factory=lambda: deque(maxlen=100))

    def __post_init__(self) -> None:
        n = self.board.nvlinks
        self.link_up = [True] * n
        self.link_tx = [0.0] * n
        self.link_rx = [0.0] * n
        self.link_errors = [dict.fromkeys(NVLINK_ERROR_TYPES, 0) for _ in range(n)]


@dataclass
class HostState:
    cores: int = HOST_CORES
    # per core: user, nice, system, idle, iowait, irq, softirq, steal (jiffies, USER_HZ = 100)
    jiffies: list[list[float]] = field(default_factory=list)
    disk_read_bytes: float = 0.0
    disk_write_bytes: float = 0.0
    psi_avg10: dict[str, float] = field(default_factory=lambda: {"io": 0.0, "cpu": 0.0, "memory": 0.0})
    psi_total_us: dict[str, float] = field(default_factory=lambda: {"io": 0.0, "cpu": 0.0, "memory": 0.0})
    shm_size: int = DEFAULT_SHM_BYTES
    shm_used: int = BASE_SHM_USED

    def __post_init__(self) -> None:
        self.jiffies = [[1000.0, 0.0, 200.0, 50000.0, 10.0, 0.0, 5.0, 0.0] for _ in range(self.cores)]


class NodeModel:
    """The simulated node. Thread-safe: every reader holds ``lock`` and calls ``advance`` first."""

    def __init__(
        self,
        scenario: Scenario | None = None,
        n_gpus: int = 8,
        board: BoardSpec | None = None,
        clock: Callable[[], float] = time.time,
        sample_period_s: float = 0.2,
    ) -> None:
        scenario = scenario or Scenario()
        self.board = board or BoardSpec()
        self.n_gpus = n_gpus
        self.clock = clock
        self.dt = sample_period_s
        self.lock = threading.RLock()
        touring = scenario.name in TOURS
        self.timeline = tour_timeline(scenario.name) if touring else [(0.0, scenario)]
        self.cycle_s = tour_seconds(scenario.name) if touring else 0.0
        self.start = clock()
        self.t = self.start  # time of the last tick
        self.tick = 0
        self._k = 0  # ticks since start
        self.gpus = [self._new_gpu(i) for i in range(n_gpus)]
        self.host = HostState()
        self.xid_events: list[tuple[float, int, int]] = []  # append-only: readers keep a cursor
        self.xid_raised = threading.Condition(self.lock)  # notified with every new XID event
        self._xid_sent: set[tuple[float, int]] = set()
        self._settle()

    # ---- public -------------------------------------------------------------------------------

    def advance(self, now: float | None = None) -> float:
        """Run every tick up to ``now`` (default: the clock). Long gaps run in coarse 1 s steps."""
        now = self.clock() if now is None else now
        with self.lock:
            target = math.floor((now - self.start) / self.dt + 1e-9)  # tick times are start + k * dt
            coarse = max(1, round(1.0 / self.dt))
            while (target - self._k) * self.dt > 120.0:
                self._k += coarse
                self._step(self.start + self._k * self.dt, coarse * self.dt, record=False)
            while self._k < target:
                self._k += 1
                self._step(self.start + self._k * self.dt, self.dt, record=True)
        return now

    def segment(self, t: float) -> tuple[Scenario, float]:
        """The scenario in force at absolute time t, and t relative to its segment start."""
        rel = t - self.start
        if self.cycle_s:
            rel = rel % self.cycle_s
        start, scenario = self.timeline[0]
        for seg_start, seg in self.timeline:
            if rel >= seg_start:
                start, scenario = seg_start, seg
        return scenario, rel - start

    def scenario_at(self, t: float) -> Scenario:
        return self.segment(t)[0]

    def p2p_ok(self, a: int, b: int) -> bool:
        """Whether NVLink P2P works between GPUs a and b right now."""
        ga, gb = self.gpus[a], self.gpus[b]
        return any(ga.link_up) and any(gb.link_up) and not ga.lost and not gb.lost

    # ---- model --------------------------------------------------------------------------------

    def _new_gpu(self, i: int) -> GpuState:
        uuid = f"GPU-{0x5A1F0000 + i:08x}-51a7-4e0d-9c1b-{i:012x}"
        bus = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)[i % 8] + (i // 8) * 0x100
        return GpuState(
            index=i,
            uuid=uuid,
            pci_bus_id=f"00000000:{bus:02X}:00.0",
            serial=f"165232{i:07d}",
            board=self.board,
            power_limit_w=self.board.tdp_w,
        )

    def _settle(self) -> None:
        """Start every GPU at the steady temperature of its first second, so nothing warms up in tests."""
        plan = self._plan(self.start)
        for g in self.gpus:
            demand = [self._mix(plan, g.index, self.start + k * 0.05)[1].power for k in range(40)]
            power = self.board.tdp_w * sum(demand) / len(demand)
            g.power_w = power
            g.temp_c = min(AMBIENT_C + HEAT_K * power, self.board.throttle_start_c)
        self._step(self.start, 0.0, record=False)

    def _plan(self, t: float) -> _Plan:
        """What the scenario in force at t means for a training step (worked out once per tick)."""
        sc, x = self.segment(t)
        name = sc.name if x >= sc.onset_s else "healthy"
        affected = frozenset(sc.affected(self.n_gpus))
        starving: frozenset[int] = frozenset()
        if name == "data_starvation":
            starving = affected
        elif name == "data_starvation_all":
            starving = frozenset(range(self.n_gpus))
        wait = STARVED_WAIT_S if starving or name == "remote_straggler" else 0.0
        hot: frozenset[int] = frozenset()
        if name == "thermal_throttle":
            slowest = min(self.gpus[h].clock_factor for h in affected)
            wait = max(wait, COMPUTE_S / max(slowest, 0.5) - COMPUTE_S)
            hot = affected
        comm = SLOW_COMM_S if name == "nvlink_down" else COMM_S
        period = GAP_S + wait + COMPUTE_S + comm
        if name == "comm_bound":
            period = SOCKET_STEP_S
        off = name == "shm_exhaustion" and x >= sc.onset_s + sc.fill_s
        # only the ranks of the slow GPU's own job (pod) wait for it; another pod's job runs on
        split = self.n_gpus if sc.pods == 1 else (self.n_gpus + 1) // 2
        slow_jobs = {g < split for g in starving | hot}
        waiting = frozenset(g for g in range(self.n_gpus) if (g < split) in slow_jobs)
        if name == "remote_straggler":  # the slow rank is on another node: this node's ranks all wait
            waiting = frozenset(range(self.n_gpus))
        return _Plan(
            name, affected, starving, hot, wait, comm, period, off, t - x, t - x + sc.onset_s, waiting
        )

    @staticmethod
    def _phase(plan: _Plan, g: int, t: float) -> Phase:
        name = plan.name
        if name == "comm_hang":
            return Phase.HANG
        if name == "idle_allocated":
            return Phase.IDLE
        if plan.off or (name == "gpu_lost" and g in plan.affected):
            return Phase.OFF
        if name == "offload_starvation":
            return _offload_phase(plan, t)
        if name == "checkpoint_stall" and _checkpointing(plan, t):
            return Phase.CHECKPOINT
        return _step_phase(plan, g, t)

    def _mix(self, plan: _Plan, g: int, t: float, dt: float = 0.0) -> tuple[list[Phase], Factors]:
        """The phases in the tick ending at t and their mean factors (4 sub-samples)."""
        n = 4 if dt > 0 else 1
        phases = [self._phase(plan, g, t - dt + (k + 0.5) * dt / n) for k in range(n)]
        sums = [0.0] * N_FACTORS
        for p in phases:
            for i, v in enumerate(FACTOR_TUPLES[p]):
                sums[i] += v
        return phases, Factors(*(v / n for v in sums))

    def _step(self, t: float, dt: float, record: bool) -> None:
        self.tick += 1
        sc, x = self.segment(t)
        faulty = x >= sc.onset_s
        plan = self._plan(t)
        for g in self.gpus:
            self._step_gpu(g, plan, t, dt, sc, faulty, g.index in plan.affected, record)
        self._step_host(t, dt, sc, faulty, x, plan)
        self.t = t

    def _step_gpu(
        self,
        g: GpuState,
        plan: _Plan,
        t: float,
        dt: float,
        sc: Scenario,
        faulty: bool,
        affected: bool,
        record: bool,
    ) -> None:
        """One tick of one GPU. Each effect reads what the ones before it left (power before energy,
        utilization before the host-transfer bump of memory utilization): keep their order."""
        name = plan.name
        g.lost = name == "gpu_lost" and affected
        g.unresponsive = name == "gpu_unresponsive" and affected
        if g.lost:
            self._report_lost(g, plan, sc, t)
            return
        phases, f = self._mix(plan, g.index, t, dt)
        nz = noise(g.index, self.tick)
        g.power_limit_w = sc.cap_w if name == "power_cap" else self.board.tdp_w
        reasons = self._power_and_heat(g, f, nz, dt, hot=name == "thermal_throttle" and affected)
        self._activity(g, f, phases, nz, reasons)
        self._counters(g, f, nz, dt, reasons)
        self._nvlink_traffic(g, f, nz, dt, name == "nvlink_down", affected)
        self._pcie_traffic(g, f, phases, nz, dt, sc, name, affected)
        if record:
            g.samples.append(DriverSample(int(t * 1e6), g.util, g.mem_util, int(g.power_w * 1000)))

    def _report_lost(self, g: GpuState, plan: _Plan, sc: Scenario, t: float) -> None:
        """A GPU off the bus reports XID 79 once per fault."""
        key = (plan.start + sc.onset_s, g.index)
        if key not in self._xid_sent:
            self._xid_sent.add(key)
            with self.xid_raised:  # the model's lock (held already while it advances; not while it settles)
                self.xid_events.append((t, g.index, 79))
                self.xid_raised.notify_all()

    def _power_and_heat(self, g: GpuState, f: Factors, nz: float, dt: float, hot: bool) -> int:
        """Power (held under the enforced limit), temperature and the clock factor; returns the clock-event
        reasons they raise. ``hot``: the GPU sheds its heat badly (thermal_throttle)."""
        b = self.board
        # thermal clock reduction, from the temperature reached so far
        thermal_f = 1.0
        if g.temp_c > b.throttle_start_c:
            thermal_f = max(0.6, 1.0 - 0.04 * (g.temp_c - b.throttle_start_c))
        demand = b.tdp_w * f.power * thermal_f**2 * (1.0 + 0.02 * nz)
        reasons = 0
        cap_f = 1.0
        if demand > g.power_limit_w * 0.98:
            cap_f = max(0.5, math.sqrt(g.power_limit_w / demand))
            demand = g.power_limit_w * (0.975 + 0.01 * nz)
            reasons |= SW_POWER_CAP
        g.clock_factor = thermal_f * cap_f
        if dt > 0:
            g.power_w += (demand - g.power_w) * (1.0 - math.exp(-dt / POWER_TAU_S))
            k = HOT_HEAT_K if hot else HEAT_K
            target = AMBIENT_C + k * g.power_w
            g.temp_c += (target - g.temp_c) * (1.0 - math.exp(-dt / THERMAL_TAU_S))
        if thermal_f < 1.0:
            reasons |= SW_THERMAL
        if g.temp_c >= b.slowdown_c:
            reasons |= HW_THERMAL
        return reasons

    def _activity(self, g: GpuState, f: Factors, phases: list[Phase], nz: float, reasons: int) -> None:
        """Clock-event reasons, utilization, clocks, memory in use and processes of the tick."""
        b = self.board
        idle = f.busy < 0.05
        if idle:
            reasons |= GPU_IDLE
        g.reasons = reasons
        util = 100 * f.busy
        if 0 < f.busy < 0.15:  # a trickle of small kernels and copies: it varies from sample to sample
            util *= 1.0 + 0.8 * nz
        g.util = round(util)
        g.mem_util = round(100 * f.mem * (1.0 + 0.05 * nz)) if f.mem > 0 else 0
        all_idle = all(p in (Phase.IDLE, Phase.OFF) for p in phases)
        g.sm_clock_mhz = b.sm_idle_mhz if all_idle else round(b.sm_max_mhz * g.clock_factor / 15) * 15
        g.mem_clock_mhz = b.mem_max_mhz

        job = phases[-1] != Phase.OFF
        g.mem_used_bytes = (
            (IDLE_JOB_MEM_BYTES if phases[-1] == Phase.IDLE else JOB_MEM_BYTES) if job else EMPTY_MEM_BYTES
        )
        g.processes = 1 if job else 0

    @staticmethod
    def _counters(g: GpuState, f: Factors, nz: float, dt: float, reasons: int) -> None:
        """The cumulative counters: energy, time under each throttle reason, GPM integrals."""
        g.energy_mj += g.power_w * dt * 1000.0
        for reason, bit in THROTTLE_COUNTER_BITS.items():
            if reasons & bit:
                g.throttle_ns[reason] += dt * 1e9
        integ = g.gpm_integrals
        integ[0] += dt
        integ[1] += f.sm * dt * (1.0 + 0.02 * nz)
        integ[2] += f.occupancy * dt
        integ[3] += f.tensor * dt
        integ[4] += f.dram * dt

    def _nvlink_traffic(
        self, g: GpuState, f: Factors, nz: float, dt: float, nvlink_down: bool, affected: bool
    ) -> None:
        """Links dropped (and their errors) while nvlink_down holds this GPU, restored after; the
        collective traffic spread over the links that are up."""
        if nvlink_down and affected and any(g.link_up):
            g.link_up = [False] * len(g.link_up)
            g.fabric_state = 1  # NOT_STARTED: the fabric manager dropped this GPU
            for errs in g.link_errors:
                errs["replay"] += 1200
                errs["recovery"] += 5
                errs["crc_flit"] += 300
        elif not nvlink_down and not all(g.link_up):
            g.link_up = [True] * len(g.link_up)
            g.fabric_state = 3
        up = sum(g.link_up)
        nv_share = f.nvlink * (0.3 if nvlink_down else 1.0)
        if up:
            per_link = self.board.nvlink_peak_bytes_s * nv_share / up * dt * (1.0 + 0.05 * nz)
            for link in range(len(g.link_up)):
                if g.link_up[link]:
                    g.link_tx[link] += per_link
                    g.link_rx[link] += per_link * 0.98

    @staticmethod
    def _pcie_traffic(
        g: GpuState,
        f: Factors,
        phases: list[Phase],
        nz: float,
        dt: float,
        sc: Scenario,
        name: str,
        affected: bool,
    ) -> None:
        """PCIe bytes: the input pipeline, collectives falling back from NVLink, host-to-device copies of a
        starving rank (which also raise its memory utilization)."""
        active = any(p in FED for p in phases)
        pcie_rx = (1.0e9 if active else 2e6) + f.pcie_rx * 1e9 * (1.0 + 0.05 * nz)
        pcie_tx = (0.1e9 if active else 1e6) + f.pcie_tx * 1e9 * (1.0 + 0.05 * nz)
        if name == "nvlink_down" and f.nvlink > 0:
            pcie_rx += (12e9 if affected else 4e9) * f.nvlink
            pcie_tx += (12e9 if affected else 4e9) * f.nvlink
        if name in ("data_starvation", "data_starvation_all") and sc.effective_cause() == "host_transfer":
            starving_now = Phase.DATA_WAIT in phases and (affected or name == "data_starvation_all")
            if starving_now:
                pcie_rx += 6e9
                g.mem_util = max(g.mem_util, 30)
        g.pcie_rx += pcie_rx * dt
        g.pcie_tx += pcie_tx * dt

    def _step_host(self, t: float, dt: float, sc: Scenario, faulty: bool, x: float, plan: _Plan) -> None:
        name = plan.name
        cause = sc.effective_cause() if name in ("data_starvation", "data_starvation_all") else ""
        phase = self._phase(plan, 0, t)
        job = phase not in (Phase.OFF, Phase.IDLE)
        saving = phase == Phase.CHECKPOINT  # the ranks' writers stream the checkpoint to disk
        offload = name == "offload_starvation"  # the optimizer steps on the host: cores busy, none pinned
        self._host_cpu(dt, cause, job, saving, offload)
        self._host_io(dt, cause, job, saving, offload)
        self._host_shm(sc, name, x)

    def _host_cpu(self, dt: float, cause: str, job: bool, saving: bool, offload: bool) -> None:
        """Every core's jiffies: the data loaders' cores busy while a job runs, all of them waiting on the
        disk when the input is slow (cause io)."""
        h = self.host
        for core in range(h.cores):
            nz = noise(1000 + core, self.tick)
            busy, iow = 0.04 + 0.02 * nz, 0.02 + 0.01 * nz
            if offload:
                busy = 0.35 + 0.10 * nz
            if saving:
                busy, iow = 0.10 + 0.03 * nz, 0.08 + 0.03 * nz
            if core < LOADER_CORES and job and not saving:
                busy, iow = _loader_core(cause, nz, iow)
            if cause == "io" and core >= LOADER_CORES:
                iow = 0.38 + 0.05 * nz
            busy, iow = max(0.0, min(busy, 1.0)), max(0.0, min(iow, 1.0 - busy))
            j = h.jiffies[core]
            ticks = dt * 100.0
            j[0] += busy * 0.85 * ticks
            j[2] += busy * 0.15 * ticks
            j[4] += iow * ticks
            j[3] += (1.0 - busy - iow) * ticks

    def _host_io(self, dt: float, cause: str, job: bool, saving: bool, offload: bool) -> None:
        """Disk reads (the input pipeline) and writes (checkpoints), and pressure stall information."""
        h = self.host
        rate = 900 * MiB * (1.0 + 0.2 * noise(77, self.tick)) if job else 2 * MiB
        if cause == "io":
            rate = 140 * MiB * (1.0 + 0.3 * noise(78, self.tick))
        if saving:
            rate = 2 * MiB
        h.disk_read_bytes += rate * dt
        h.disk_write_bytes += (1500 * MiB * (1.0 + 0.2 * noise(79, self.tick)) if saving else 20 * MiB) * dt
        h.psi_avg10 = {
            "io": 0.45 if cause == "io" else 0.08 if saving else 0.01,
            "cpu": 0.35 if cause == "cpu" else 0.05 if offload else 0.02,
            "memory": 0.0,
        }
        for res, avg in h.psi_avg10.items():
            h.psi_total_us[res] += avg * dt * 1e6

    def _host_shm(self, sc: Scenario, name: str, x: float) -> None:
        """/dev/shm: filling from the onset of shm_exhaustion, small before it, the default otherwise."""
        h = self.host
        if name == "shm_exhaustion":
            h.shm_size = sc.shm_size_bytes
            fill = min(max((x - sc.onset_s) / sc.fill_s, 0.0), 1.0) if sc.fill_s > 0 else 1.0
            h.shm_used = int(BASE_SHM_USED + (h.shm_size - BASE_SHM_USED) * fill)
        elif sc.name == "shm_exhaustion":  # before onset: the small volume, lightly used
            h.shm_size, h.shm_used = sc.shm_size_bytes, BASE_SHM_USED
        else:
            h.shm_size, h.shm_used = DEFAULT_SHM_BYTES, BASE_SHM_USED


def _loader_core(cause: str, nz: float, iow: float) -> tuple[float, float]:
    """A data loader's core while its job runs: (busy, iowait) shares of the tick."""
    busy = 0.55 + 0.15 * nz
    if cause == "cpu":
        busy = 0.995
    elif cause == "io":
        busy, iow = 0.25 + 0.05 * nz, 0.40 + 0.05 * nz
    return busy, iow


def _offload_phase(plan: _Plan, t: float) -> Phase:
    """Host-bound offload: every rank in lockstep (the FSDP collectives keep them together), a short burst
    of kernels at a varying point of each cycle."""
    cycle, at = divmod(t - plan.onset, OFFLOAD_CYCLE_S)
    k = int(cycle)
    burst = OFFLOAD_BURST_S + 0.09 * noise(0x0FF1, k)
    begin = (OFFLOAD_CYCLE_S - burst) * (0.5 + 0.5 * noise(0x0FF2, k))
    return Phase.OFFLOAD_BURST if begin <= at < begin + burst else Phase.OFFLOAD_WAIT


def _checkpointing(plan: _Plan, t: float) -> bool:
    """Whether the ranks are writing the checkpoint: the end of each cycle, for a varying time."""
    cycle, at = divmod(t - plan.onset, CHECKPOINT_CYCLE_S)
    save = CHECKPOINT_SAVE_S + 2.5 * (1.0 + noise(0xC4E, int(cycle)))
    return at >= CHECKPOINT_CYCLE_S - save


def _step_phase(plan: _Plan, g: int, t: float) -> Phase:
    """Where GPU g is in its training step: waiting for data, computing, waiting for a slower peer in a
    collective, or moving data in it."""
    step, pos = divmod(t - plan.start, plan.period)
    if pos < GAP_S:
        return Phase.DATA_WAIT
    pos -= GAP_S
    if plan.name == "comm_bound":
        compute = SOCKET_COMPUTE_S + 0.1 * noise(0x50C, int(step))
        return Phase.TP_COMPUTE if pos < compute else Phase.SOCKET_COMM
    wait = plan.wait
    if g in plan.starving:
        if pos < wait:
            return Phase.DATA_WAIT
        return Phase.COMPUTE if pos < wait + COMPUTE_S else Phase.COMM
    if g in plan.hot:  # a throttled GPU computes the whole time its peers wait for it
        return Phase.COMPUTE if pos < wait + COMPUTE_S else Phase.COMM
    if g not in plan.waiting:  # another job on the node: its own healthy step
        wait = 0.0
        pos = (t - plan.start) % (GAP_S + COMPUTE_S + plan.comm)
        if pos < GAP_S:
            return Phase.DATA_WAIT
        pos -= GAP_S
    if pos < COMPUTE_S:
        return Phase.COMPUTE
    if pos < COMPUTE_S + wait:
        return Phase.NCCL_WAIT
    return Phase.COMM
