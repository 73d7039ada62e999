"""A MIG-partitioned GPU of the simulator (scenarios ``mig_h100`` and ``mig_compute_h100``): GPU 0 of the node
in MIG mode, carved into GPU instances that run loads of their own: one compute instance each (``mig_h100``),
or one GPU instance split into two compute instances held by two pods (``mig_compute_h100``). Each compute
instance is a MIG device of its own. The driver (driver.py) answers for each through its MIG device handle;
the kubelet gives each held one to a pod by its MIG UUID.

What a real driver offers per instance, and so what the fake one does: its identity (UUID, GPU and compute
instance ids, its slices and memory: nvmlDeviceGetAttributes), its memory in use (its GPU instance's:
memory is a GPU instance's, shared by its compute instances), and its GPM metrics (nvmlGpmMigSampleGet on
the parent, per GPU instance: the compute instances of one GPU instance are measured together).
Utilization rates and samples are the GPU's only (NOT_SUPPORTED on an instance's handle); power,
temperatures, clocks and links are the GPU's."""

from __future__ import annotations

from dataclasses import dataclass, field

MIG_H100 = "mig_h100"
MIG_COMPUTE_H100 = "mig_compute_h100"  # mig_h100 with a 4g.40gb GPU instance split into two compute instances
MIG_ALL_H100 = "mig_all_h100"  # every GPU in MIG mode at the finest partition: 7 x 1g.10gb, each held
GPU_SLICES = 7  # the compute slices of an A100 or H100: an instance's share of the GPU is its slices over 7
MIG_PERIOD_S = 6.0  # the starving instance's step: computes its batch, then waits for the next one
MIG_FED_S = 2.0  # ... computing this long of each step
GIB = 1 << 30
PID_BASE = 5300  # the process in GPU instance gi, compute instance ci is PID_BASE + gi + 100 ci (as /proc)
CI_PID_STEP = 100
GPU_PID_STEP = 1000  # ... plus 1000 per GPU index where every GPU is partitioned (mig_all_h100)


@dataclass(frozen=True)
class MigSlice:
    """One MIG device of the partition (a compute instance of a GPU instance): its profile, GPU instance id
    (as nvidia-smi mig -lgi lists it for this placement), compute slices, its GPU instance's memory, the pod
    holding it ("" free), its load, the memory it holds, its compute instance id and its GPU instance's
    slices (0: the same as its own, one compute instance spanning the GPU instance)."""

    profile: str
    gi: int
    slices: int
    mem_total: int
    pod: str
    load: str  # busy, starving, idle (memory held, no kernels), free (no pod)
    mem_held: int
    ci: int = 0  # one compute instance spanning the GPU instance, as the device plugin's profiles make
    gi_slices: int = 0

    @property
    def instance_slices(self) -> int:
        """The compute slices of its GPU instance."""
        return self.gi_slices or self.slices


# 3g.40gb + 2g.20gb + 1g.10gb + 1g.10gb: all 7 compute slices given out, so the instances' shares sum to 1
LAYOUT: tuple[MigSlice, ...] = (
    MigSlice("3g.40gb", 2, 3, 40 * GIB, "mig-busy", "busy", 31 * GIB),
    MigSlice("2g.20gb", 3, 2, 20 * GIB, "mig-starving", "starving", 14 * GIB),
    MigSlice("1g.10gb", 9, 1, 10 * GIB, "mig-idle", "idle", 7 * GIB),
    MigSlice("1g.10gb", 10, 1, 10 * GIB, "", "free", 0),
)
# mig_compute_h100: a 4g.40gb GPU instance split into two 2c.4g.40gb compute instances (two MIG devices with
# UUIDs of their own, sharing the GPU instance's 40 GB), each given to a pod; beside it the starving
# 2g.20gb and a free 1g.10gb of mig_h100. All 7 compute slices given out: 2 + 2 + 2 + 1.
LAYOUT_COMPUTE: tuple[MigSlice, ...] = (
    MigSlice("2c.4g.40gb", 1, 2, 40 * GIB, "mig-ci-a", "busy", 12 * GIB, ci=0, gi_slices=4),
    MigSlice("2c.4g.40gb", 1, 2, 40 * GIB, "mig-ci-b", "busy", 15 * GIB, ci=1, gi_slices=4),
    MigSlice("2g.20gb", 5, 2, 20 * GIB, "mig-starving", "starving", 14 * GIB),
    MigSlice("1g.10gb", 13, 1, 10 * GIB, "", "free", 0),
)
# mig_all_h100: seven 1g.10gb instances (GPU instance ids 7-13, as nvidia-smi gives them), each held by a pod:
# five compute, one starves, one holds memory and runs nothing (the most series an instance has: a verdict
# firing, the process holding its memory named)
_ONE_G_LOADS = ("busy", "starving", "idle", "busy", "busy", "busy", "busy")
LAYOUT_1G: tuple[MigSlice, ...] = tuple(
    MigSlice("1g.10gb", 7 + k, 1, 10 * GIB, f"mig-1g-{k}", load, (6 if load == "idle" else 8) * GIB)
    for k, load in enumerate(_ONE_G_LOADS)
)
LAYOUTS: dict[str, tuple[MigSlice, ...]] = {
    MIG_H100: LAYOUT,
    MIG_COMPUTE_H100: LAYOUT_COMPUTE,
    MIG_ALL_H100: LAYOUT_1G,
}
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
    gpu: int = 0  # the index of its GPU
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


def new_instances(gpu_uuid: str, layout: tuple[MigSlice, ...] = LAYOUT, gpu: int = 0) -> list[MigState]:
    return [MigState(spec, mig_uuid(gpu_uuid, k), gpu) for k, spec in enumerate(layout)]


def pod_name(spec: MigSlice, gpu: int) -> str:
    """The pod holding a MIG device of GPU ``gpu`` ("" free): the layout's name on GPU 0, with the GPU's
    index after it on the others (mig_all_h100 partitions every GPU)."""
    return spec.pod if not spec.pod or gpu == 0 else f"{spec.pod}-gpu{gpu}"


def pid(spec: MigSlice, gpu: int = 0) -> int:
    """The PID of the process in a held MIG device."""
    return PID_BASE + GPU_PID_STEP * gpu + spec.gi + CI_PID_STEP * spec.ci


def gpu_instance_memory(instances: list[MigState], gi: int) -> tuple[int, int]:
    """(total, used) of a GPU instance: what the driver answers on each of its compute instances' handles."""
    mine = [m for m in instances if m.spec.gi == gi]
    return mine[0].spec.mem_total, sum(m.mem_used for m in mine)


def gpu_instance_integrals(instances: list[MigState], gi: int) -> list[float] | None:
    """The GPM integrals of a GPU instance (nvmlGpmMigSampleGet): its compute instances' activities
    weighted by their slices of it (time itself is not summed); None for a GPU instance that is not there."""
    mine = [m for m in instances if m.spec.gi == gi]
    if not mine:
        return None
    out = [mine[0].gpm_integrals[0]] + [0.0] * (len(mine[0].gpm_integrals) - 1)
    for m in mine:
        weight = m.spec.slices / m.spec.instance_slices
        for i in range(1, len(out)):
            out[i] += m.gpm_integrals[i] * weight
    return out


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
