"""A MIG-partitioned GPU of the simulator (scenario ``mig_h100``): GPU 0 of the node in MIG mode, carved into
GPU instances (one compute instance each) that run loads of their own. The driver (driver.py) answers for
each instance through its MIG device handle; the kubelet gives each held instance to a pod by its MIG UUID.

What a real driver offers per instance, and so what the fake one does: its identity (UUID, GPU and compute
instance ids, its slices and memory: nvmlDeviceGetAttributes), its memory in use, and its GPM metrics
(nvmlGpmMigSampleGet on the parent). Utilization rates and samples are the GPU's only (NOT_SUPPORTED on an
instance's handle); power, temperatures, clocks and links are the GPU's."""

from __future__ import annotations

from dataclasses import dataclass, field

MIG_H100 = "mig_h100"
GPU_SLICES = 7  # the compute slices of an A100 or H100: an instance's share of the GPU is its slices over 7
MIG_PERIOD_S = 6.0  # the starving instance's step: computes its batch, then waits for the next one
MIG_FED_S = 2.0  # ... computing this long of each step
GIB = 1 << 30
PID_BASE = 5300  # the process in GPU instance gi is PID_BASE + gi (the host's /proc holds the same PIDs)


@dataclass(frozen=True)
class MigSlice:
    """One GPU instance of the partition: its profile, GPU instance id (as nvidia-smi mig -lgi lists it
    for this placement), compute slices, memory, the pod holding it ("" free) and its load."""

    profile: str
    gi: int
    slices: int
    mem_total: int
    pod: str
    load: str  # busy, starving, idle (memory held, no kernels), free (no pod)
    mem_held: int

    @property
    def ci(self) -> int:
        return 0  # one compute instance spanning the GPU instance, as the device plugin's profiles make


# 3g.40gb + 2g.20gb + 1g.10gb + 1g.10gb: all 7 compute slices given out, so the instances' shares sum to 1
LAYOUT: tuple[MigSlice, ...] = (
    MigSlice("3g.40gb", 2, 3, 40 * GIB, "mig-busy", "busy", 31 * GIB),
    MigSlice("2g.20gb", 3, 2, 20 * GIB, "mig-starving", "starving", 14 * GIB),
    MigSlice("1g.10gb", 9, 1, 10 * GIB, "mig-idle", "idle", 7 * GIB),
    MigSlice("1g.10gb", 10, 1, 10 * GIB, "", "free", 0),
)
# GPM integrals per unit of SM activity: SM occupancy, tensor and DRAM activity follow the SMs'
_GPM_FOLLOW = (0.55, 0.45, 0.35)


def mig_uuid(gpu_uuid: str, k: int) -> str:
    """The MIG device UUID of instance ``k`` (the MIG-<uuid> form of R470+ drivers)."""
    return f"MIG-{gpu_uuid[4:12]}-{k:04x}-5{k:03x}-8000-{gpu_uuid[-12:]}"


@dataclass
class MigState:
    """One instance now: its memory in use, SM activity of the last tick and GPM integrals
    (t, sm, occupancy, tensor, dram), as GpuState keeps them for the GPU."""

    spec: MigSlice
    uuid: str
    mem_used: int = 0
    sm: float = 0.0
    gpm_integrals: list[float] = field(default_factory=lambda: [0.0] * 5)


def sm_activity(spec: MigSlice, x: float) -> float:
    """The instance's SM activity at ``x`` seconds into the scenario."""
    if spec.load == "busy":
        return 0.93
    if spec.load == "starving":
        return 0.9 if x % MIG_PERIOD_S < MIG_FED_S else 0.0
    return 0.0


def new_instances(gpu_uuid: str) -> list[MigState]:
    return [MigState(spec, mig_uuid(gpu_uuid, k)) for k, spec in enumerate(LAYOUT)]


def step(instances: list[MigState], x: float, dt: float) -> float:
    """Advance each instance one tick ending at ``x``; returns the GPU's SM activity over the tick (the
    instances' slice-weighted sum: the parent's utilization and GPM follow it)."""
    n = 4  # sub-samples, as the GPU's own tick mixes its phases
    total = 0.0
    for inst in instances:
        sm = sum(sm_activity(inst.spec, x - dt + (k + 0.5) * dt / n) for k in range(n)) / n
        inst.sm, inst.mem_used = sm, inst.spec.mem_held
        integ = inst.gpm_integrals
        integ[0] += dt
        integ[1] += sm * dt
        for i, follow in enumerate(_GPM_FOLLOW):
            integ[2 + i] += sm * follow * dt
        total += sm * inst.spec.slices / GPU_SLICES
    return total
