"""Scenario definitions for the simulated node: which failure, on which GPUs, from when.

A scenario is written ``NAME[:key=value,...]`` on the command line, e.g.
``data_starvation:gpus=3,cause=io,onset=30``. ``tour`` cycles through the interesting ones,
``short_tour`` through those that page within minutes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

# name -> (what it shows, default affected GPUs (empty = all), default cause)
SCENARIOS: dict[str, tuple[str, tuple[int, ...], str]] = {
    "healthy": ("every rank computes; util ~99 %, power steady near 80 % of TDP", (), ""),
    "data_starvation": (
        "one rank waits for its input every step; its peers wait for it in NCCL",
        (3,),
        "cpu",
    ),
    "remote_straggler": (
        "every rank here computes, then waits in NCCL for a starving rank on another node (the other "
        "nodes of a multi-node job whose straggler is elsewhere)",
        (),
        "",
    ),
    "data_starvation_all": ("every rank waits for its input every step (slow storage)", (), "io"),
    "rank_stall": (
        "one rank stops (no kernel, memory held: its host hung on a read, its loader respawning) for "
        "stall=SECONDS (default 180), then resumes; its peers spin in the collective waiting for it",
        (2,),
        "",
    ),
    "comm_hang": (
        "every rank is stuck in a collective: util 100 %, power near idle, no NVLink traffic",
        (),
        "",
    ),
    "thermal_throttle": ("one GPU runs hot and lowers its clocks", (5,), ""),
    "power_cap": ("every GPU is capped at 450 W (default limit 700 W)", (), ""),
    "shm_exhaustion": ("/dev/shm fills up until DataLoader workers die with Bus error", (), ""),
    "idle_allocated": ("memory resident, no kernels: reserved GPUs doing nothing", (), ""),
    "nvlink_down": (
        "one GPU lost its NVLinks and fabric registration; collectives fall back to PCIe",
        (2,),
        "",
    ),
    "gpu_lost": ("one GPU falls off the bus (XID 79); every NVML call on it fails", (7,), ""),
    "gpu_unresponsive": (
        "one GPU stops answering: every NVML call on it times out while the others (and it) keep computing",
        (6,),
        "",
    ),
    "comm_bound": (
        "slow collectives (NCCL over sockets): every step spends about half its time in all-reduce at "
        "100 % util, low SM activity and power, traffic over PCIe",
        (),
        "",
    ),
    "checkpoint_stall": (
        "every ~50 s of compute, every rank stalls ~30-35 s while a checkpoint is written",
        (),
        "",
    ),
    "offload_starvation": (
        "host-bound FSDP CPU offload: util 10-30 % in short irregular bursts, ~25 % of TDP, PCIe busy",
        (),
        "",
    ),
    "pod_churn": (
        "a new pod takes every GPU every 10 s (churn=SECONDS); the GPUs compute as in healthy",
        (),
        "",
    ),
    # the node doctor's scenarios: healthy training on a node with one bring-up fault (sim/conditions.py)
    "no_fabric_manager": (
        "NVSwitch node without a running fabric manager: fabric state not_started, no NVLink P2P",
        (),
        "",
    ),
    "p2p_blocked": ("a hypervisor blocks P2P writes between GPUs; NCCL falls back to P2P/CUMEM/read", (), ""),
    "nvlink_link_down": ("one NVLink of GPU 2 is down; the others carry the traffic", (2,), ""),
    "shm_default": ("the training pod runs on the container runtime's 64 MiB /dev/shm", (), ""),
    "nccl_p2p_disabled": ("the training container sets NCCL_P2P_DISABLE=1 on an NVLink node", (), ""),
    "pcie_degraded": ("GPU 3's PCIe link trained at x8 instead of x16", (3,), ""),
    "ecc_pending": ("GPU 5 has a DRAM row remapping pending: it needs a reset", (5,), ""),
    "missing_gpu": ("one GPU on the PCI bus is not visible to NVML (7 of 8)", (7,), ""),
    "no_efa": ("the training pod holds GPUs but none of the node's EFA devices", (), ""),
    "zombie_process": (
        "GPU 7's pod was deleted but its process lives on: 17 GiB held at 0 % util, no pod holds the GPU; "
        "the training pod on the other GPUs is healthy",
        (7,),
        "",
    ),
    "persistence_off": ("persistence mode is off on every GPU", (), ""),
    "time_slicing": (
        "GPU 0 is shared by three pods through the device plugin's time-slicing replicas: one starving "
        "(its kernels 5 % of the time, its data loader's core pinned), two busy taking the rest (52 % and "
        "43 %); the training pod holds the other GPUs",
        (0,),
        "cpu",
    ),
    "mps": (
        "GPU 0 is shared by the same three pods through the device plugin's MPS replicas: their processes "
        "are clients of the node's MPS server (nvidia-cuda-mps-server, a host process holding 512 MiB of "
        "its own), each sampled apart by the driver; one starving, two busy, as in time_slicing",
        (0,),
        "cpu",
    ),
    "mig_h100": (
        "GPU 0 is in MIG mode, 3g.40gb + 2g.20gb + 1g.10gb + 1g.10gb, each instance given to a pod by its "
        "MIG UUID: mig-busy computes (93 % SM), mig-starving computes 2 s of every 6 (its loader's core "
        "pinned), mig-idle holds 7 GiB and runs nothing, the last 1g.10gb is free; the training pod holds "
        "the other GPUs",
        (0,),
        "cpu",
    ),
    "mig_compute_h100": (
        "GPU 0 is in MIG mode as in mig_h100, but its 4g.40gb GPU instance is split into two 2c.4g.40gb "
        "compute instances, each a MIG device of its own given to a pod (mig-ci-a and mig-ci-b, both "
        "computing at 93 % SM, sharing the GPU instance's memory); beside them mig-starving's 2g.20gb and a "
        "free 1g.10gb; the training pod holds the other GPUs",
        (0,),
        "cpu",
    ),
    "mig_all_h100": (
        "every GPU is in MIG mode at the finest partition, 7 x 1g.10gb, each instance given to a pod of its "
        "own (56 pods on 8 GPUs): five compute, one starves (its loader's core pinned), one holds 6 GiB "
        "and runs nothing; no training pod holds a whole GPU",
        (),
        "cpu",
    ),
    # the other work that shares a fleet with training (physics.py's workloads): each GPU of the pod outside
    # the workload's GPUs holds no process (with pods=2 the second pod trains on its half)
    "serving": (
        "a vLLM server, one engine per GPU (data parallel): its KV cache holds 90 % of memory; Poisson "
        "requests (rate=PER_S per GPU, default 0.125) decode at 70-100 % util, 40-70 % of TDP; idle between",
        (),
        "",
    ),
    "serving_starved": (
        "the same server on too few CPU cores (rate default 0.5): requests queue (Waiting grows), the GPUs "
        "sit mostly idle, the pod's four cores are pinned",
        (),
        "cpu",
    ),
    "evaluation": (
        "data-parallel evaluation, one shard per GPU: ~95 % util near TDP, a 5-10 s pause every 60-120 s "
        "(scoring, loading the next subset); mean util ~87 %",
        (),
        "",
    ),
    "pipeline": (
        "a 70B model split layer-wise over GPUs 0-3 (accelerate device_map=auto): one GPU computes at a "
        "time, in turn; each ~22 % util, together about one GPU",
        (0, 1, 2, 3),
        "",
    ),
    "notebook": (
        "a Jupyter kernel on GPU 0: 20-40 % of memory held, idle for minutes between 10-60 s cells",
        (0,),
        "",
    ),
}
POD_CHURN_S = 10.0  # pod_churn's default: a new pod every 10 s
# the scenarios of physics.py's workloads (everything else is training); their default request rates
WORKLOADS = frozenset({"serving", "serving_starved", "evaluation", "pipeline", "notebook"})
REQUEST_RATES = {"serving": 0.125, "serving_starved": 0.5}  # requests per second per GPU (engine)
MAX_RATE = 10.0  # requests per second per engine: about what an 8B engine decodes at all (~25 at once)
POD_NAME = re.compile(r"[a-z]([-a-z0-9]{0,38}[a-z0-9])?")  # pod=: a DNS label, room left for "-<generation>"
MAX_SHM_GIB = 1024.0  # /dev/shm is node memory: a few TiB at most

CAUSES = ("io", "cpu", "shm", "host_transfer", "unknown")

# The tours: (scenario, seconds). Healthy stretches between faults let verdicts resolve. ``tour`` shows
# every scenario with the shipped alert timings; ``short_tour`` is the demo's default: the phases that page
# within a few minutes each (with the demo's shortened `for`), about thirteen minutes in all.
TOUR: tuple[tuple[str, float], ...] = (
    ("healthy", 90.0),
    ("data_starvation", 240.0),
    ("healthy", 90.0),
    ("comm_hang", 300.0),
    ("healthy", 90.0),
    ("comm_bound", 240.0),
    ("healthy", 90.0),
    ("thermal_throttle", 240.0),
    ("healthy", 60.0),
    ("checkpoint_stall", 240.0),
    ("healthy", 90.0),
    ("shm_exhaustion", 420.0),
    ("healthy", 60.0),
    ("offload_starvation", 240.0),
    ("healthy", 90.0),
    ("idle_allocated", 420.0),
)


@dataclass(frozen=True)
class Scenario:
    name: str = "healthy"
    onset_s: float = 0.0  # seconds after the scenario starts when the fault begins
    gpus: tuple[int, ...] = ()  # affected GPUs; empty means the scenario's default
    cause: str = ""
    fill_s: float = 300.0  # shm_exhaustion: seconds from onset until the volume is full
    shm_size_bytes: int = 16 << 30  # shm_exhaustion: size of /dev/shm
    cap_w: float = 450.0  # power_cap: enforced limit
    pods: int = 1  # jobs on the node: 1 pod holding every GPU, or 2 splitting them (the 2nd on default shm)
    churn_s: float = 0.0  # a new pod (or pair) takes the GPUs every this many seconds; 0 = never
    logs: str = "stop"  # comm_hang: the job's log stops (a hang), or keeps flowing (an idle server)
    rate: float = 0.0  # serving, serving_starved: requests per second to each GPU's engine; 0 = the default
    stall_s: float = 180.0  # rank_stall: how long the rank stays stopped
    pod_name: str = ""  # the first pod's name (and "main" its container's): one that says nothing of its work
    params: dict[str, str] = field(default_factory=dict)

    def affected(self, n_gpus: int) -> tuple[int, ...]:
        chosen = self.gpus or SCENARIOS[self.name][1]
        if not chosen:
            return tuple(range(n_gpus))
        return tuple(g for g in chosen if 0 <= g < n_gpus) or (n_gpus - 1,)

    def effective_cause(self) -> str:
        return self.cause or SCENARIOS[self.name][2]

    def effective_churn(self) -> float:
        return self.churn_s or (POD_CHURN_S if self.name == "pod_churn" else 0.0)

    def effective_rate(self) -> float:
        return self.rate or REQUEST_RATES.get(self.name, REQUEST_RATES["serving"])


class ScenarioError(ValueError):
    """A scenario string that cannot be understood."""


def parse_scenario(text: str) -> Scenario:
    """Parse ``NAME[:key=value,...]``; raise ScenarioError with a helpful message."""
    name, _, rest = text.strip().partition(":")
    if name not in SCENARIOS and name not in TOURS:
        raise ScenarioError(f"unknown scenario {name!r}; choose one of: {', '.join(scenario_names())}")
    scenario = Scenario(name=name)
    if not rest:
        return scenario
    for item in rest.split(","):
        key, sep, value = item.partition("=")
        if not sep:
            raise ScenarioError(f"scenario parameter {item!r} is not key=value")
        scenario = _apply_param(scenario, key.strip(), value.strip())
    return scenario


def _apply_param(s: Scenario, key: str, value: str) -> Scenario:
    if key == "rate":
        return replace(s, rate=_rate(value))
    try:
        if key == "onset":
            return replace(s, onset_s=_number(key, value, "a number of seconds, at least 0", zero=True))
        if key == "gpus":
            return replace(s, gpus=tuple(int(g) for g in value.split("+") if g))
        if key == "cause":
            if value not in CAUSES:
                raise ScenarioError(f"cause must be one of {', '.join(CAUSES)}, not {value!r}")
            return replace(s, cause=value)
        if key == "stall":
            return replace(s, stall_s=_number(key, value, "a number of seconds, above 0"))
        if key == "fill":
            return replace(s, fill_s=_number(key, value, "a number of seconds, at least 0", zero=True))
        if key == "shm_gib":
            gib = _number(key, value, f"a size in GiB, above 0 and at most {MAX_SHM_GIB:g}")
            if gib > MAX_SHM_GIB:
                raise ScenarioError(f"shm_gib must be a size in GiB, above 0 and at most {MAX_SHM_GIB:g}")
            return replace(s, shm_size_bytes=int(gib * (1 << 30)))
        if key == "cap":
            return replace(s, cap_w=_number(key, value, "a power limit in watts, above 0"))
        if key == "logs":
            if value not in ("stop", "flow"):
                raise ScenarioError("logs must be stop or flow")
            return replace(s, logs=value)
        if key == "pods":
            if value not in ("1", "2"):
                raise ScenarioError("pods must be 1 or 2")
            return replace(s, pods=int(value))
        if key == "pod":
            if not POD_NAME.fullmatch(value):
                raise ScenarioError("pod must be a lowercase name of letters, digits and dashes (at most 40)")
            return replace(s, pod_name=value)
        if key == "churn":
            churn = float(value)
            if not churn >= 1.0 or churn == float("inf"):  # also rejects nan
                raise ScenarioError("churn must be a number of seconds, at least 1")
            return replace(s, churn_s=churn)
    except ValueError as exc:
        if isinstance(exc, ScenarioError):
            raise
        raise ScenarioError(f"bad value {value!r} for scenario parameter {key!r}") from exc
    raise ScenarioError(
        f"unknown scenario parameter {key!r} "
        "(onset, gpus, cause, fill, shm_gib, cap, pods, churn, logs, rate, stall, pod)"
    )


def _number(key: str, value: str, what: str, zero: bool = False) -> float:
    """A finite number above 0 (``zero``: at least 0); else a ScenarioError saying what ``key`` takes."""
    try:
        number = float(value)
    except ValueError:
        raise ScenarioError(f"bad value {value!r} for scenario parameter {key!r}") from None
    if not math.isfinite(number) or number < 0 or (number == 0 and not zero):  # also nan and inf
        raise ScenarioError(f"{key} must be {what}, not {value!r}")
    return number


def _rate(value: str) -> float:
    """A request rate: a positive number of requests per second, at most MAX_RATE."""
    try:
        rate = float(value)
    except ValueError:
        raise ScenarioError(f"bad value {value!r} for scenario parameter 'rate'") from None
    if not 0.0 < rate <= MAX_RATE:  # also rejects nan and inf
        raise ScenarioError(f"rate must be requests per second per GPU, above 0 and at most {MAX_RATE:g}")
    return rate


# Each fault phase of the short tour lasts until its page has arrived with room to spare: the verdict's
# evidence (about 30-80 s), the demo's 30 s `for`, a scrape, an evaluation and Alertmanager's group_wait.
# comm_bound needs the most: the hang before it resolves only after its phase has begun, and one run
# beside the test suite paged 141 s into it.
SHORT_TOUR: tuple[tuple[str, float], ...] = (
    ("healthy", 30.0),
    ("data_starvation", 100.0),
    ("healthy", 30.0),
    ("comm_hang", 150.0),
    ("healthy", 30.0),
    ("comm_bound", 180.0),
    ("healthy", 30.0),
    ("thermal_throttle", 100.0),
    ("healthy", 30.0),
    ("shm_exhaustion", 100.0),
)
TOURS: dict[str, tuple[tuple[str, float], ...]] = {"tour": TOUR, "short_tour": SHORT_TOUR}
SHM_FILL_S = {"tour": 240.0, "short_tour": 60.0}  # how fast /dev/shm fills in each tour


def scenario_names() -> list[str]:
    return [*SCENARIOS, *TOURS]


def tour_timeline(name: str = "tour") -> list[tuple[float, Scenario]]:
    """A tour as (start second, scenario) segments."""
    out, start = [], 0.0
    for scenario, seconds in TOURS[name]:
        fill = SHM_FILL_S[name] if scenario == "shm_exhaustion" else Scenario.fill_s
        out.append((start, Scenario(name=scenario, fill_s=fill)))
        start += seconds
    return out


def tour_seconds(name: str = "tour") -> float:
    return sum(seconds for _, seconds in TOURS[name])


TOUR_SECONDS = tour_seconds("tour")
