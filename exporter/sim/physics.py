"""A small physical model of a GPU node running distributed training, and the other work that shares a
fleet with it (an inference server, an evaluation, a pipeline-split model, a notebook).

The node advances in driver-sample ticks (default 0.2 s). Each tick works out, per GPU, which phase of
a training step it is in (compute, all-reduce, waiting in NCCL for a peer, waiting for data, hung,
idle, a collective crawling over sockets, a checkpoint being written, host-bound offload), or of the
workload's own cycle (a request decoding, a pipeline stage's turn, a notebook cell), and from that
its utilization, SM/tensor/DRAM activity, power (smoothed, capped by the enforced limit), temperature
(first-order, with thermal clock reduction), clocks, clock-event reasons and the cumulative counters
NVML exposes (energy, NVLink/PCIe bytes, throttle time, GPM integrals).
The host side (CPU jiffies, disk reads and writes, PSI, /dev/shm fill) is advanced on the same ticks.

Everything is deterministic for a given clock: noise comes from a hash of (gpu, tick), not a RNG; the
workloads' random events (request arrivals, pauses, cells) from a hash of (gpu, event number), counted
from the workload's onset, so a scenario always sees the same events.
"""

from __future__ import annotations

import math
import threading
import time
from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple

from exporter.policy.nvml_vocab import GPU_IDLE, HW_THERMAL, SW_POWER_CAP, SW_THERMAL, THROTTLE_COUNTER_BITS
from exporter.sim import mig
from exporter.sim.scenarios import TOURS, WORKLOADS, Scenario, tour_seconds, tour_timeline

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
    # the workloads beside training
    LOADING = 12  # weights copied in from the host: copies are not kernels, so util stays 0; PCIe busy
    WARMUP = 13  # an inference engine's start-up: profiling passes and CUDA-graph capture, short kernels
    HELD = 14  # memory held, no kernels, for seconds or more: clocks drop to idle
    PREFILL = 15  # a request's prompt: compute-bound
    DECODE = 16  # one request decoding: a kernel nearly always resident, bound by memory bandwidth
    DECODE_BATCH = 17  # several requests decoding together: the same, a little more compute per byte
    STARVED_STEP = 18  # engine steps wait on a starved CPU: a short forward now and then
    EVAL = 19  # evaluation batches back to back: compute-bound, near TDP
    PIPE_STAGE = 20  # this GPU's layers of a pipeline-split model, its turn in the token
    PIPE_WAIT = 21  # the other GPUs' turns: idle for under a second, clocks stay up
    CELL = 22  # a notebook cell running


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
    jitter: float = 0.0  # how much utilization varies from sample to sample (a share of itself)


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
    # 3.5 GB/s: a safetensors shard read from local NVMe and copied in
    Phase.LOADING: Factors(0.0, 0.0, 0.0, 0.0, 0.03, 0.04, 0.14, 0.0, pcie_rx=3.5),
    Phase.WARMUP: Factors(0.55, 0.35, 0.20, 0.20, 0.30, 0.30, 0.40, 0.0, jitter=0.5),
    Phase.HELD: Factors(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.105, 0.0),
    Phase.PREFILL: Factors(1.0, 0.85, 0.50, 0.60, 0.45, 0.45, 0.75, 0.0),
    # decode streams the weights and the KV cache every token: memory controller busy, SMs half idle
    Phase.DECODE: Factors(0.88, 0.38, 0.20, 0.12, 0.70, 0.65, 0.50, 0.0, jitter=0.12),
    Phase.DECODE_BATCH: Factors(0.95, 0.47, 0.28, 0.20, 0.78, 0.75, 0.60, 0.0, jitter=0.05),
    Phase.STARVED_STEP: Factors(0.12, 0.05, 0.03, 0.02, 0.08, 0.08, 0.15, 0.0),
    Phase.EVAL: Factors(0.95, 0.82, 0.45, 0.50, 0.45, 0.42, 0.88, 0.0, jitter=0.05),
    # the hidden states handed on and the logits sent to the host are a few MB a token: a trickle
    Phase.PIPE_STAGE: Factors(1.0, 0.55, 0.30, 0.30, 0.60, 0.55, 0.72, 0.0, pcie_rx=0.02, pcie_tx=0.02),
    Phase.PIPE_WAIT: Factors(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.13, 0.0),
    Phase.CELL: Factors(0.93, 0.70, 0.40, 0.40, 0.45, 0.40, 0.65, 0.0, jitter=0.07),
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
# phases in which the SM clock drops to idle (no kernels for long enough)
CLOCKS_DOWN = frozenset({Phase.IDLE, Phase.OFF, Phase.HELD, Phase.LOADING})


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
    work: Workload | None = None  # a workload other than training (serving, evaluation, ...)
    stall_until: float = 0.0  # rank_stall: absolute time the stopped rank resumes


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


class SimProcess(NamedTuple):
    """A compute process on a simulated GPU: what the driver lists and the host's /proc describes."""

    pid: int
    kind: str  # compute, or mps (a client of an MPS server)
    mem_bytes: int
    sm_share: float  # its share of the GPU's utilization samples
    pod: str = ""  # the pod it runs in, by name, on a GPU pods share ("": the pod holding the GPU)
    command: str = ""  # its command line when not the job's (the MPS server's)


PID_BASE = 4242  # GPU g's processes are PID_BASE + 10 g + i (the host's /proc holds the same PIDs)
PID_GENERATION_STEP = 1000  # the PIDs of each new generation of pods (pod churn) start this much higher
TIME_SLICING = "time_slicing"
# mps: the same pods share the GPU through the device plugin's MPS replicas: their processes are the MPS
# server's clients (the driver's MPS list), and the server, a host process, holds a context of its own
MPS = "mps"
SHARED_SCENARIOS = (TIME_SLICING, MPS)
MPS_SERVER = "nvidia-cuda-mps-server"
MPS_SERVER_BYTES = 512 << 20  # the server's own context on the GPU
# time_slicing: the pods sharing the GPU through the device plugin's replicas (pod name, the share of the
# GPU's time its kernels run, the memory it holds): two busy, one starving (its loader's core pinned),
# whose unused turns the busy ones take (the GPU itself is never idle)
SLICES: tuple[tuple[str, float, int], ...] = (
    ("shared-busy-a", 0.52, 24 << 30),
    ("shared-busy-b", 0.43, 20 << 30),
    ("shared-starving", 0.05, 10 << 30),
)
SLICED_BUSY = sum(load for _, load, _ in SLICES)  # the GPU runs someone's kernel this share of the time
SLICE_PERIOD_S = 1.0  # the pods' kernels take their turns within each second


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
    sliced: bool = False  # shared by the pods of SLICES (time_slicing, mps)
    mps: bool = False  # through an MPS server (mps)
    mig: list[mig.MigState] = field(default_factory=list)  # its GPU instances in MIG mode (mig_h100)
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
        self.process_generation = 0  # new pods run new processes: each generation has PIDs of its own
        self.xid_raised = threading.Condition(self.lock)  # notified with every new XID event
        self._xid_sent: set[tuple[float, int]] = set()
        self._works: dict[tuple[int, int], Workload] = {}  # per scenario run: its workload's events
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

    def workload(self, t: float) -> Workload | None:
        """The workload running at absolute time t (None for training, or before its onset)."""
        with self.lock:
            return self._plan(t).work

    def _pid(self, g: GpuState, i: int) -> int:
        return PID_BASE + self.process_generation * PID_GENERATION_STEP + g.index * 10 + i

    def renew_processes(self) -> None:
        """New pods took the GPUs: their processes are new ones, with PIDs of their own."""
        with self.lock:
            self.process_generation += 1

    def processes(self, g: GpuState) -> list[SimProcess]:
        """The compute processes on ``g`` now: its job's (``processes`` of them), sharing its memory and
        its utilization evenly."""
        if g.mig:  # one process in each held instance, in the pod holding it
            return [
                SimProcess(mig.pid(m.spec, m.gpu), "compute", m.mem_used, m.sm, mig.pod_name(m.spec, m.gpu))
                for m in g.mig
                if m.spec.pod
            ]
        if g.sliced:  # each pod's process, its kernels' share of the GPU's busy time
            kind = "mps" if g.mps else "compute"  # under MPS: the server's clients, each sampled apart
            pods = [
                SimProcess(self._pid(g, i), kind, mem, load / SLICED_BUSY, pod)
                for i, (pod, load, mem) in enumerate(SLICES)
            ]
            if not g.mps:
                return pods
            # the MPS server: a compute process of the host, its context only; no kernel of its own
            server = SimProcess(self._pid(g, len(SLICES)), "compute", MPS_SERVER_BYTES, 0.0, "", MPS_SERVER)
            return [server, *pods]
        n = g.processes
        return [SimProcess(self._pid(g, i), "compute", g.mem_used_bytes // n, 1.0 / n) for i in range(n)]

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
        work = self._workload(sc, t - x + sc.onset_s, affected, split, t) if name in WORKLOADS else None
        onset = t - x + sc.onset_s
        return _Plan(
            name,
            affected,
            starving,
            hot,
            wait,
            comm,
            period,
            off,
            t - x,
            onset,
            waiting,
            work,
            onset + sc.stall_s,
        )

    def _workload(
        self, sc: Scenario, begin: float, affected: frozenset[int], split: int, t: float
    ) -> Workload:
        """The workload of this run of the scenario, made once: its events are generated as time passes."""
        run = int((t - self.start) // self.cycle_s) if self.cycle_s else 0
        key = (id(sc), run)
        work = self._works.get(key)
        if work is None:
            gpus = frozenset(g for g in affected if g < split)  # a second pod (pods=2) trains on its half
            work = self._works[key] = make_workload(sc, begin, gpus, split, self.board)
        return work

    @staticmethod
    def _phase(plan: _Plan, g: int, t: float) -> Phase:
        if plan.work is not None:
            return plan.work.phase(plan, g, t)
        name = plan.name
        if name == "comm_hang":
            return Phase.HANG
        if name == "idle_allocated" or (name == "zombie_process" and g in plan.affected):
            return Phase.IDLE  # a zombie: the process of a deleted pod holds memory and runs nothing
        if plan.off or (name == "gpu_lost" and g in plan.affected):
            return Phase.OFF
        if name == "offload_starvation":
            return _offload_phase(plan, t)
        if name in mig.LAYOUTS and g in plan.affected:
            return Phase.COMPUTE  # its busy instance always computes (its utilization: mig.step)
        if name in SHARED_SCENARIOS and g in plan.affected:  # the pods' kernels in turn, then none
            busy = (t - plan.onset) % SLICE_PERIOD_S < SLICED_BUSY * SLICE_PERIOD_S
            return Phase.COMPUTE if busy else Phase.DATA_WAIT
        if name == "checkpoint_stall" and _checkpointing(plan, t):
            return Phase.CHECKPOINT
        if name == "rank_stall" and t < plan.stall_until:  # the stopped rank, and its peers waiting for it
            # a collective waiting for a rank that never arrives moves nothing, and the peers' loops, blocked
            # in it, copy no batch: a quiet collective, as a hang's (a step-level wait's traffic flows)
            return Phase.DATA_WAIT if g in plan.affected else Phase.HANG
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
        if plan.work is not None and g.index in plan.work.gpus:
            g.mem_used_bytes = plan.work.memory(g.index, t)
        g.sliced = name in SHARED_SCENARIOS and affected
        g.mps = g.sliced and name == MPS
        if g.sliced:
            g.mem_used_bytes, g.processes = sum(mem for _, _, mem in SLICES), len(SLICES)
            if g.mps:
                g.mem_used_bytes, g.processes = g.mem_used_bytes + MPS_SERVER_BYTES, len(SLICES) + 1
        gpm = list(g.gpm_integrals)
        self._counters(g, f, nz, dt, reasons)
        layout = mig.LAYOUTS.get(sc.name) if g.index in sc.affected(self.n_gpus) else None
        self._step_mig(g, layout, t - plan.start, dt, gpm)
        self._nvlink_traffic(g, f, nz, dt, name == "nvlink_down", affected)
        self._pcie_traffic(g, f, phases, nz, dt, sc, name, affected)
        if record:
            g.samples.append(DriverSample(int(t * 1e6), g.util, g.mem_util, int(g.power_w * 1000)))

    @staticmethod
    def _step_mig(
        g: GpuState, layout: tuple[mig.MigSlice, ...] | None, x: float, dt: float, gpm: list[float]
    ) -> None:
        """A GPU in MIG mode (mig_h100, mig_compute_h100: its ``layout``): its instances run loads of their
        own; the GPU's utilization, memory, processes and GPM SM activity are theirs summed (SM activity
        weighted by their slices)."""
        if layout is None:
            g.mig = []
            return
        if not g.mig:
            g.mig = mig.new_instances(g.uuid, layout, g.index)
        busy = mig.step(g.mig, x, dt)
        g.util = round(100 * busy)
        g.mem_used_bytes = sum(m.mem_used for m in g.mig)
        g.processes = sum(1 for m in g.mig if m.spec.pod)
        g.gpm_integrals[1] = gpm[1] + busy * dt

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
        if f.jitter:
            util = min(100.0, util * (1.0 + f.jitter * nz))
        g.util = round(util)
        g.mem_util = round(100 * f.mem * (1.0 + 0.05 * nz)) if f.mem > 0 else 0
        all_idle = all(p in CLOCKS_DOWN for p in phases)
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
        if plan.work is not None:
            self._host_workload(t, dt, plan.work)
            self._host_shm(sc, name, x)
            return
        # time_slicing, mig_h100, mig_compute_h100: one pod starves
        starving = ("data_starvation", "data_starvation_all", *SHARED_SCENARIOS, *mig.LAYOUTS)
        cause = sc.effective_cause() if name in starving else ""
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

    def _host_workload(self, t: float, dt: float, work: Workload) -> None:
        """The host under a workload: the cores its processes keep busy (the GPUs' utilization of this tick
        says which are working), disk reads while weights load, CPU pressure when the pod's cores are too
        few."""
        h = self.host
        loading = work.loading(t)
        cores = work.host_cores(t, [g.util for g in self.gpus])
        ticks = dt * 100.0
        for core in range(h.cores):
            nz = noise(1000 + core, self.tick)
            share = cores.get(core, 0.04)
            busy = share if share >= 0.99 else max(0.0, share + 0.02 * nz)  # a pinned core stays pinned
            iow = min((0.12 if loading else 0.02) + 0.01 * nz, 1.0 - busy)
            j = h.jiffies[core]
            j[0] += busy * 0.85 * ticks
            j[2] += busy * 0.15 * ticks
            j[4] += iow * ticks
            j[3] += (1.0 - busy - iow) * ticks
        rate = 3 * GiB if loading else work.disk_read_rate(t)
        h.disk_read_bytes += rate * (1.0 + 0.2 * noise(77, self.tick)) * dt
        h.disk_write_bytes += 20 * MiB * dt
        h.psi_avg10 = {"io": 0.05 if loading else 0.01, "cpu": work.cpu_pressure, "memory": 0.0}
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


# ---- the workloads beside training ---------------------------------------------------------------------
# Each runs on its GPUs from its onset (``begin``); the random events of each (request arrivals, pauses,
# cells) are generated on demand from a hash of (GPU, event number), so they are the same in every run.
# The model calls phase() for every sub-sample (a bisect and a step or two) and memory() once a tick; the
# pod logs read the same events (under the model's lock, since both extend them).

CONTEXT_BYTES = 512 * MiB  # a process's CUDA context and its first allocations
KEEP_S = 1200.0  # events that ended longer ago than this are forgotten

# serving: a vLLM server, one engine per GPU (data parallel, one API server in front); its start-up,
# seconds after the onset
SERVE_LOAD_S = (3.0, 8.0)  # the weights are copied in
SERVE_KV_S = 13.0  # profiling done: the KV cache takes what gpu_memory_utilization leaves
SERVE_GRAPHS_S = 25.0  # CUDA graphs captured
SERVE_READY_S = 28.0  # the API server accepts requests
SERVE_MEMORY_SHARE = 0.9  # vLLM's gpu_memory_utilization, kept for the server's life
SERVE_WEIGHTS_BYTES = 15 * GiB  # an 8B model in bf16
SERVE_ACTIVATION_BYTES = 2 * GiB  # the profiling pass's peak beside the weights
KV_BYTES_PER_TOKEN = 128 * 1024  # an 8B Llama: 32 layers x 8 KV heads x 128 x (K, V) x 2 bytes
PROMPT_TOKENS = (200.0, 1200.0)
DECODE_S = (1.0, 4.0)  # a request's decode on a healthy engine
DECODE_TOKENS_S = 110.0  # tokens per second of one request
PREFILL_TOKENS_S = 12000.0
# serving_starved: the engine's host side (tokenizing, scheduling, detokenizing) shares the pod's few cores
# with every engine's loop; it works through prompts at ~230 tokens/s (about 3 s a request), one request
# at a time, so requests arriving faster wait; its decode steps crawl at ~25 a second, each a ~5 ms forward
# (about 12 % of the time busy: STARVED_STEP)
STARVED_CORES = 4
STARVED_PROMPT_TOKENS_S = 230.0  # +- 20 % from request to request
STARVED_DECODE_TOKENS_S = 25.0
CLIENT_TIMEOUT_S = 60.0  # a client (the router) gives up on a request still waiting after this

# evaluation: one shard per GPU (data parallel, no collective until the end), its start-up, then cycles
EVAL_LOAD_S = (2.0, 8.0)
EVAL_READY_S = 12.0  # the dataset is tokenized: the first batch
EVAL_CYCLE_S = (60.0, 120.0)  # a subset evaluated, then scored on the host while the next one loads
EVAL_PAUSE_S = (5.0, 10.0)
EVAL_WEIGHTS_BYTES = 16 * GiB
EVAL_MEMORY_SHARE = 0.6  # weights, the batch's activations and the allocator's cache
EVAL_BATCHES_S = 2.5  # batches a second while busy (what the progress bar counts)

# pipeline: a 70B model split layer-wise (accelerate's device_map="auto"): stage s is the s-th GPU
PIPE_SHARD_LOAD_S = 10.0  # each GPU's share of the weights (35 GB) at 3.5 GB/s, one GPU after another
PIPE_SLOT_S = 0.21  # a stage's turn in a token: its layers, then the hand-off to the next GPU
PIPE_STAGE_S = 0.2  # +- 5 % from token to token
PIPE_HOST_S = 0.06  # the host samples the next token and feeds it to the first GPU
PIPE_WEIGHTS_SHARE = 0.43  # 140 GB of bf16 weights over four 80 GB GPUs
PIPE_MEMORY_SHARE = 0.70  # with the batch's KV cache and the allocator's cache
PIPE_BATCH_TOKENS = 64  # new tokens per batch of prompts (what the progress bar counts)

# notebook: a Jupyter kernel; its first cell loads a model, later cells grow the allocator's cache
NB_KERNEL_S = 6.0  # the user opens the notebook: its kernel starts
NB_FIRST_GAP_S = (15.0, 45.0)
NB_GAP_S = (30.0, 900.0)  # idle minutes between cells: 30 s plus an exponential of mean NB_GAP_MEAN_S
NB_GAP_MEAN_S = 150.0
NB_CELL_S = (10.0, 60.0)
NB_MEMORY_SHARE = (0.22, 0.04, 0.38)  # after the first cell, the growth per later cell, the most


def _uniform(*key: int) -> float:
    """Deterministic uniform noise in [0, 1]."""
    return (noise(*key) + 1.0) / 2.0


def _between(bounds: tuple[float, float], u: float) -> float:
    return bounds[0] + (bounds[1] - bounds[0]) * u


def _exponential(u: float) -> float:
    """An exponential variable of mean 1 from a uniform one."""
    return -math.log(max(1.0 - u, 1e-9))


def _ramp(x: float, span: tuple[float, float]) -> float:
    return min(max((x - span[0]) / (span[1] - span[0]), 0.0), 1.0)


def _overlap(lo: float, hi: float, a: float, b: float) -> float:
    """How much of [lo, hi) lies in (a, b], as a share of it."""
    return max(0.0, min(hi, b) - max(lo, a)) / (hi - lo)


class Request(NamedTuple):
    id: int  # its number on its engine
    arrive: float
    left: float  # when it left the waiting list: admitted, or its client gave up
    start: float  # admitted (inf: never)
    decode: float  # its prompt is in: the first token
    end: float  # the last token
    prompt: int  # tokens
    tokens: int  # generated


class Requests:
    """One engine's requests in arrival order: a Poisson stream of ``rate`` a second. A healthy engine
    batches continuously (a request starts as it arrives); a starved one takes them in one at a time, and a
    request whose client gives up leaves the queue."""

    def __init__(self, gpu: int, begin: float, rate: float, starved: bool) -> None:
        self.gpu, self.rate, self.starved = gpu, rate, starved
        self.all: list[Request] = []
        self.arrivals: list[float] = []
        self.runs: list[Request] = []  # the admitted ones, in order of admission (FIFO: starts never go back)
        self.starts: list[float] = []
        self.longest = 0.0  # the longest run so far: how far back a request still running can have started
        self._n = 0
        self._free = begin  # when the starved host side can take the next request
        self._next = begin + self._gap(0)

    def _u(self, k: int, what: int) -> float:
        return _uniform(0x5E7 + what, self.gpu, k)

    def _gap(self, k: int) -> float:
        return _exponential(self._u(k, 0)) / self.rate

    def extend(self, t: float) -> None:
        """Every request arriving by t (admissions are FIFO, so every start by t is known then too)."""
        while self._next <= t:
            self._add(self._n, self._next)
            self._n += 1
            self._next += self._gap(self._n)
        if len(self.arrivals) > 4096:
            self._forget(t - KEEP_S)

    def _add(self, k: int, arrive: float) -> None:
        prompt = round(_between(PROMPT_TOKENS, self._u(k, 1)))
        tokens = round(_between(DECODE_S, self._u(k, 2)) * DECODE_TOKENS_S)
        if not self.starved:
            decode = arrive + prompt / PREFILL_TOKENS_S
            self._admit(
                Request(k, arrive, arrive, arrive, decode, decode + tokens / DECODE_TOKENS_S, prompt, tokens)
            )
            return
        start = max(arrive, self._free)
        if start - arrive > CLIENT_TIMEOUT_S:
            gave_up = arrive + CLIENT_TIMEOUT_S
            self._append(Request(k, arrive, gave_up, math.inf, math.inf, math.inf, prompt, tokens))
            return
        decode = start + prompt / (STARVED_PROMPT_TOKENS_S * (0.8 + 0.4 * self._u(k, 3)))
        self._free = decode
        self._admit(
            Request(
                k, arrive, start, start, decode, decode + tokens / STARVED_DECODE_TOKENS_S, prompt, tokens
            )
        )

    def _append(self, r: Request) -> None:
        self.all.append(r)
        self.arrivals.append(r.arrive)

    def _admit(self, r: Request) -> None:
        self._append(r)
        self.runs.append(r)
        self.starts.append(r.start)
        self.longest = max(self.longest, r.end - r.start)

    def _forget(self, before: float) -> None:
        cut = bisect_right(self.arrivals, before)
        del self.all[:cut], self.arrivals[:cut]
        cut = bisect_right(self.starts, before)
        del self.runs[:cut], self.starts[:cut]

    def state(self, t: float) -> tuple[int, bool]:
        """How many requests run at t, and whether one of them is taking in its prompt."""
        self.extend(t)
        starts, runs = self.starts, self.runs
        j = bisect_right(starts, t) - 1
        oldest = t - self.longest
        running, prefill = 0, False
        while j >= 0 and starts[j] >= oldest:
            r = runs[j]
            if r.end > t:
                running += 1
                prefill = prefill or t < r.decode
            j -= 1
        return running, prefill

    def waiting(self, t: float) -> int:
        """Requests arrived by t and not yet admitted (nor given up)."""
        self.extend(t)
        j = bisect_right(self.arrivals, t) - 1
        n = 0
        while j >= 0 and self.arrivals[j] > t - CLIENT_TIMEOUT_S:  # none waits longer
            n += self.all[j].left > t
            j -= 1
        return n

    def runs_between(self, a: float, b: float) -> list[Request]:
        """The admitted requests running at some time in (a, b], oldest first."""
        self.extend(b)
        out = []
        j = bisect_right(self.starts, b) - 1
        while j >= 0 and self.starts[j] >= a - self.longest:
            if self.runs[j].end > a:
                out.append(self.runs[j])
            j -= 1
        return out[::-1]

    def gave_up(self, a: float, b: float) -> list[Request]:
        """The requests whose clients gave up in (a, b]."""
        self.extend(b)
        lo = bisect_right(self.arrivals, a - CLIENT_TIMEOUT_S)
        hi = bisect_right(self.arrivals, b - CLIENT_TIMEOUT_S)
        return [r for r in self.all[lo:hi] if r.start == math.inf]


class Workload:
    """A workload other than training on ``gpus`` from ``begin`` on. The pod's other GPUs hold no process;
    a second pod's (pods=2: from ``split`` on) train as in healthy."""

    cpu_pressure = 0.02  # the host's CPU PSI (some avg10) while it runs

    def __init__(self, begin: float, gpus: frozenset[int], split: int, board: BoardSpec) -> None:
        self.begin, self.gpus, self.split, self.board = begin, gpus, split, board
        self.ranks = sorted(gpus)  # the GPUs in order: engine, rank or stage numbers

    def phase(self, plan: _Plan, g: int, t: float) -> Phase:
        if g not in self.gpus:
            return Phase.OFF if g < self.split else _step_phase(plan, g, t)
        return self._phase(g, t)

    def _phase(self, g: int, t: float) -> Phase:
        raise NotImplementedError

    def memory(self, g: int, t: float) -> int:
        """Framebuffer in use on one of the workload's GPUs."""
        raise NotImplementedError

    def loading(self, t: float) -> bool:
        """Whether weights stream from the disk (the host's reads and iowait)."""
        return False

    def host_cores(self, t: float, utils: list[int]) -> dict[int, float]:
        """The busy share of the cores the workload's processes use (the others idle), from this tick's
        GPU utilizations."""
        raise NotImplementedError

    def disk_read_rate(self, t: float) -> float:
        return 2 * MiB

    def share(self, fraction: float) -> int:
        return int(self.board.mem_total_bytes * fraction)


class Serving(Workload):
    """A vLLM server with one engine per GPU; ``starved``: its host side has too few cores."""

    def __init__(
        self, begin: float, gpus: frozenset[int], split: int, board: BoardSpec, rate: float, starved: bool
    ) -> None:
        super().__init__(begin, gpus, split, board)
        self.rate, self.starved = rate, starved
        self.engines = {g: Requests(g, begin + SERVE_READY_S, rate, starved) for g in self.ranks}
        self.cpu_pressure = 0.6 if starved else 0.02
        kv_bytes = (
            self.share(SERVE_MEMORY_SHARE) - SERVE_WEIGHTS_BYTES - SERVE_ACTIVATION_BYTES - CONTEXT_BYTES
        )
        self.kv_bytes = kv_bytes
        self.kv_tokens = kv_bytes // KV_BYTES_PER_TOKEN  # what the KV cache holds

    def _phase(self, g: int, t: float) -> Phase:
        x = t - self.begin
        if x < SERVE_READY_S:
            return _serving_startup(x)
        running, prefill = self.engines[g].state(t)
        if not running:
            return Phase.HELD
        if self.starved:
            return Phase.STARVED_STEP
        if prefill:
            return Phase.PREFILL
        return Phase.DECODE if running == 1 else Phase.DECODE_BATCH

    def memory(self, g: int, t: float) -> int:
        x = t - self.begin
        if x >= SERVE_KV_S:  # the KV cache is allocated once and never given back
            return self.share(SERVE_MEMORY_SHARE)
        if x >= SERVE_LOAD_S[1]:
            return CONTEXT_BYTES + SERVE_WEIGHTS_BYTES + SERVE_ACTIVATION_BYTES
        return CONTEXT_BYTES + int(SERVE_WEIGHTS_BYTES * _ramp(x, SERVE_LOAD_S))

    def loading(self, t: float) -> bool:
        return SERVE_LOAD_S[0] <= t - self.begin < SERVE_LOAD_S[1]

    def host_cores(self, t: float, utils: list[int]) -> dict[int, float]:
        if self.starved:  # the pod's cpuset: every engine loop and the tokenizer on four cores
            return dict.fromkeys(range(STARVED_CORES), 0.995)
        # each engine's loop runs while it has requests; the API server beside them
        cores = {i: 0.45 if utils[g] > 0 else 0.03 for i, g in enumerate(self.ranks)}
        cores[len(self.ranks)] = 0.10
        return cores

    def queue(self, g: int, t: float) -> tuple[int, int]:
        """(running, waiting) requests of GPU g's engine at t."""
        return self.engines[g].state(t)[0], self.engines[g].waiting(t)

    def throughput(self, g: int, a: float, b: float) -> tuple[float, float]:
        """Prompt and generated tokens a second of GPU g's engine over (a, b]."""
        prompt = generated = 0.0
        for r in self.engines[g].runs_between(a, b):
            prompt += r.prompt * _overlap(r.start, r.decode, a, b)
            generated += r.tokens * _overlap(r.decode, r.end, a, b)
        return prompt / (b - a), generated / (b - a)

    def kv_usage(self, g: int, t: float) -> float:
        """The share of the KV cache that GPU g's running requests hold at t."""
        held = 0.0
        for r in self.engines[g].runs_between(t - 1e-9, t):
            if r.start <= t < r.end:
                held += r.prompt * min(1.0, (t - r.start) / (r.decode - r.start))
                held += r.tokens * max(0.0, (t - r.decode) / (r.end - r.decode))
        return held / self.kv_tokens


def _serving_startup(x: float) -> Phase:
    """An engine's start-up: the process and its CUDA context, the weights, profiling and CUDA-graph
    capture, then the API server starting."""
    if x < SERVE_LOAD_S[0]:
        return Phase.HELD
    if x < SERVE_LOAD_S[1]:
        return Phase.LOADING
    return Phase.WARMUP if x < SERVE_GRAPHS_S else Phase.HELD


class Cycles:
    """One evaluation rank's schedule: cycles of 60-120 s, each a busy stretch then a 5-10 s pause."""

    def __init__(self, gpu: int, begin: float) -> None:
        self.gpu = gpu
        self.starts = [begin]
        self.pauses: list[float] = []  # when each cycle's pause begins
        self.busy_before = [0.0]  # busy seconds before each cycle

    def extend(self, t: float) -> None:
        while self.starts[-1] <= t:
            k = len(self.pauses)
            length = _between(EVAL_CYCLE_S, _uniform(0xE7A1, self.gpu, k))
            pause = _between(EVAL_PAUSE_S, _uniform(0xE7A2, self.gpu, k))
            start = self.starts[-1]
            self.pauses.append(start + length - pause)
            self.starts.append(start + length)
            self.busy_before.append(self.busy_before[-1] + length - pause)

    def _cycle(self, t: float) -> int:
        self.extend(t)
        return bisect_right(self.starts, t) - 1

    def busy(self, t: float) -> bool:
        return t >= self.starts[0] and t < self.pauses[self._cycle(t)]

    def busy_seconds(self, t: float) -> float:
        """Seconds spent busy from the first batch to t."""
        if t <= self.starts[0]:
            return 0.0
        j = self._cycle(t)
        return self.busy_before[j] + min(t, self.pauses[j]) - self.starts[j]

    def pauses_between(self, a: float, b: float) -> list[tuple[float, int]]:
        """(time, cycle number) of the pauses that begin in (a, b]."""
        self.extend(b)
        return [(p, k) for k, p in enumerate(self.pauses) if a < p <= b]


class Evaluation(Workload):
    """Data-parallel evaluation: each GPU works through its own shard and pauses on its own schedule."""

    def __init__(self, begin: float, gpus: frozenset[int], split: int, board: BoardSpec) -> None:
        super().__init__(begin, gpus, split, board)
        self.ranks_cycles = {g: Cycles(g, begin + EVAL_READY_S) for g in self.ranks}

    def _phase(self, g: int, t: float) -> Phase:
        x = t - self.begin
        if x < EVAL_READY_S:
            return Phase.LOADING if EVAL_LOAD_S[0] <= x < EVAL_LOAD_S[1] else Phase.HELD
        return Phase.EVAL if self.ranks_cycles[g].busy(t) else Phase.HELD

    def memory(self, g: int, t: float) -> int:
        x = t - self.begin
        if x >= EVAL_READY_S:
            return self.share(EVAL_MEMORY_SHARE)
        return CONTEXT_BYTES + int(EVAL_WEIGHTS_BYTES * _ramp(x, EVAL_LOAD_S))

    def loading(self, t: float) -> bool:
        return EVAL_LOAD_S[0] <= t - self.begin < EVAL_LOAD_S[1]

    def host_cores(self, t: float, utils: list[int]) -> dict[int, float]:
        # a rank's process feeds its GPU lightly; between subsets it scores on the host
        return {i: 0.3 if utils[g] > 0 else 0.85 for i, g in enumerate(self.ranks)}

    def disk_read_rate(self, t: float) -> float:
        pausing = t - self.begin >= EVAL_READY_S and not all(c.busy(t) for c in self.ranks_cycles.values())
        return 400 * MiB if pausing else 20 * MiB  # the next subset is read while scoring

    def batches(self, g: int, t: float) -> int:
        """Batches rank g has evaluated by t."""
        return int(self.ranks_cycles[g].busy_seconds(t) * EVAL_BATCHES_S)


class Pipeline(Workload):
    """A model split layer-wise over the GPUs: each token passes through them in turn, one at a time."""

    def __init__(self, begin: float, gpus: frozenset[int], split: int, board: BoardSpec) -> None:
        super().__init__(begin, gpus, split, board)
        self.stage = {g: s for s, g in enumerate(self.ranks)}
        self.generating = begin + len(self.ranks) * PIPE_SHARD_LOAD_S  # every shard loaded
        self.period = len(self.ranks) * PIPE_SLOT_S + PIPE_HOST_S  # seconds a token

    def _phase(self, g: int, t: float) -> Phase:
        s = self.stage[g]
        if t < self.generating:
            lo = self.begin + s * PIPE_SHARD_LOAD_S
            return Phase.LOADING if lo <= t < lo + PIPE_SHARD_LOAD_S else Phase.HELD
        token, pos = divmod(t - self.generating, self.period)
        at = pos - s * PIPE_SLOT_S
        busy = PIPE_STAGE_S * (1.0 + 0.05 * noise(0x919E, int(token), s))
        return Phase.PIPE_STAGE if 0.0 <= at < busy else Phase.PIPE_WAIT

    def memory(self, g: int, t: float) -> int:
        if t >= self.generating:
            return self.share(PIPE_MEMORY_SHARE)
        lo = self.begin + self.stage[g] * PIPE_SHARD_LOAD_S
        return CONTEXT_BYTES + int(self.share(PIPE_WEIGHTS_SHARE) * _ramp(t, (lo, lo + PIPE_SHARD_LOAD_S)))

    def loading(self, t: float) -> bool:
        return self.begin <= t < self.generating

    def host_cores(self, t: float, utils: list[int]) -> dict[int, float]:
        # one Python process drives every stage: its thread launches the kernels and samples each token
        return {0: 0.7 if t >= self.generating else 0.5}

    def tokens(self, t: float) -> int:
        """Tokens generated by t (each a pass through every stage)."""
        return max(0, int((t - self.generating) // self.period))


class Cells:
    """A notebook's cells: 10-60 s each, minutes apart."""

    def __init__(self, begin: float) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []
        self._next = begin + _between(NB_FIRST_GAP_S, _uniform(0xCE11, 0))

    def extend(self, t: float) -> None:
        while self._next <= t:
            k = len(self.starts)
            self.starts.append(self._next)
            self.ends.append(self._next + _between(NB_CELL_S, _uniform(0xCE12, k)))
            gap = min(NB_GAP_S[0] + NB_GAP_MEAN_S * _exponential(_uniform(0xCE11, k + 1)), NB_GAP_S[1])
            self._next = self.ends[-1] + gap

    def begun(self, t: float) -> int:
        """Cells started by t."""
        self.extend(t)
        return bisect_right(self.starts, t)

    def ended_between(self, a: float, b: float) -> list[float]:
        self.extend(b)
        return [e for e in self.ends if a < e <= b]


class Notebook(Workload):
    """A Jupyter kernel: it holds its memory from its first cell on and computes only while a cell runs."""

    def __init__(self, begin: float, gpus: frozenset[int], split: int, board: BoardSpec) -> None:
        super().__init__(begin, gpus, split, board)
        self.cells = Cells(begin + NB_KERNEL_S)

    def _phase(self, g: int, t: float) -> Phase:
        n = self.cells.begun(t)
        if not n:
            return Phase.OFF  # the kernel has not touched the GPU yet: no context
        return Phase.CELL if t < self.cells.ends[n - 1] else Phase.HELD

    def memory(self, g: int, t: float) -> int:
        n = self.cells.begun(t)
        if not n:
            return EMPTY_MEM_BYTES
        first, growth, most = NB_MEMORY_SHARE
        return self.share(min(first + growth * (n - 1), most))

    def host_cores(self, t: float, utils: list[int]) -> dict[int, float]:
        running = any(utils[g] > 0 for g in self.ranks)
        return {0: 0.6 if running else 0.02, 1: 0.03}  # the kernel's process; the Jupyter server


def make_workload(sc: Scenario, begin: float, gpus: frozenset[int], split: int, board: BoardSpec) -> Workload:
    if sc.name in ("serving", "serving_starved"):
        return Serving(begin, gpus, split, board, sc.effective_rate(), starved=sc.name == "serving_starved")
    kinds: dict[str, type[Workload]] = {"evaluation": Evaluation, "pipeline": Pipeline, "notebook": Notebook}
    return kinds[sc.name](begin, gpus, split, board)
