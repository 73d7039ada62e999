"""The node doctor's checks: one pure function per check, from ``NodeFacts`` to a ``Result``.

They turn the NCCL bring-up checklist and the usual NVSwitch-node faults (no fabric manager on an A100
NVSwitch node, P2P writes blocked by the hypervisor, NCCL on ``P2P/CUMEM/read``, a pod on the 64 MiB /dev/shm)
into pass / warn / fail with the evidence and the fix. Every number is in exporter/policy/thresholds/.
"""

from __future__ import annotations

from collections.abc import Iterable

from exporter.doctor.facts import GpuFacts, NodeFacts, PodFacts
from exporter.doctor.model import Check, Result, Status
from exporter.policy import thresholds as th

MiB = 1 << 20

# What each NCCL variable the doctor reads does, and when it hurts (printed with --json and in the docs).
NCCL_VARS: dict[str, tuple[str, str]] = {
    "NCCL_P2P_DISABLE": (
        "1 turns off peer-to-peer (NVLink/PCIe) transport between GPUs of a node",
        "on any NVLink node: traffic goes through host shared memory at a fraction of NVLink's speed",
    ),
    "NCCL_IB_DISABLE": (
        "1 turns off the IB/RDMA network plugin (EFA through aws-ofi-nccl included)",
        "on multi-node jobs: NCCL falls back to TCP sockets; harmless for a single-node job",
    ),
    "NCCL_P2P_LEVEL": (
        "how far apart two GPUs may be and still use P2P: LOC, NVL, PIX, PXB, PHB, SYS (or 0-5)",
        "LOC (0) disables P2P like NCCL_P2P_DISABLE=1; NVL keeps P2P on NVLink only",
    ),
    "NCCL_SOCKET_IFNAME": (
        "which network interfaces NCCL's bootstrap and socket transport use (e.g. eth0, ^docker,lo)",
        "naming an interface the pod does not have, or only lo, stops multi-node jobs at start-up "
        "('No usable listening interface found')",
    ),
    "NCCL_CUMEM_HOST_ENABLE": (
        "0 makes NCCL allocate host memory without cuMem (the legacy path)",
        "a workaround for P2P/CUMEM/read fallbacks under some hypervisors; not needed otherwise",
    ),
    "NCCL_DEBUG": (
        "log level: WARN, INFO (bring-up: version, transports, rings), TRACE",
        "TRACE logs every call and slows training; INFO is the bring-up level of the NCCL checklist",
    ),
}


def _gpus(g: Iterable[int]) -> str:
    items = sorted(g)
    return "GPU " + ", ".join(map(str, items)) if len(items) == 1 else "GPUs " + ", ".join(map(str, items))


def _r(check: str, status: Status, detail: str, evidence: Iterable[str] = ()) -> Result:
    fix = CHECKS[check].fixes.get(detail, "") if status in (Status.WARN, Status.FAIL) else ""
    return Result(check, status, detail, tuple(evidence), fix)


def _live(facts: NodeFacts) -> list[GpuFacts]:
    return [g for g in facts.nvml.gpus if not g.lost]


# ---- driver and GPUs ---------------------------------------------------------------------------


def check_driver(facts: NodeFacts) -> Result:
    nv = facts.nvml
    if not nv.usable:
        pci = facts.host.pci_gpus or ()
        if facts.expected_gpus:  # the operator says this node has GPUs: no NVML is a broken node
            return _r(
                "driver",
                Status.FAIL,
                "driver_broken",
                [f"NVML cannot be loaded ({nv.error}) but --expected-gpus says {facts.expected_gpus} GPU(s)"],
            )
        if pci and nv.error not in ("BindingsNotInstalled",):
            return _r(
                "driver",
                Status.FAIL,
                "driver_broken",
                [f"NVML is not usable ({nv.error}) but the PCI bus has {len(pci)} NVIDIA GPU(s)"],
            )
        return _r("driver", Status.SKIPPED, "no_nvml", [f"no NVML ({nv.error})"])
    versions = (
        f"driver {nv.driver_version or '?'}, CUDA {nv.cuda_version or '?'}, NVML {nv.nvml_version or '?'}"
    )
    off = [g.index for g in _live(facts) if g.persistence is False]
    if off:
        return _r(
            "driver", Status.WARN, "persistence_off", [versions, f"persistence mode off on {_gpus(off)}"]
        )
    known = [g for g in _live(facts) if g.persistence is not None]
    mode = f"persistence mode on for {len(known)} GPU(s)" if known else "persistence mode not reported"
    return _r("driver", Status.PASS, "ok", [versions, mode])


def check_gpu_count(facts: NodeFacts) -> Result:
    gpus = facts.nvml.gpus
    lost = [g for g in gpus if g.lost]
    seen = len(gpus)
    pci = facts.host.pci_gpus
    if facts.expected_gpus is not None:
        expected, why = facts.expected_gpus, "--expected-gpus"
    elif pci is not None and pci:
        expected, why = len(pci), "NVIDIA GPUs on the PCI bus"
    else:
        expected, why = None, ""
    evidence = [
        f"NVML lists {seen} GPU(s)" + (f"; expected {expected} ({why})" if expected is not None else "")
    ]
    if lost:
        evidence.append(
            f"{_gpus(g.index for g in lost)} do(es) not answer: " + ", ".join(sorted({g.lost for g in lost}))
        )
        return _r("gpu_count", Status.FAIL, "lost", evidence)
    if expected is not None and seen < expected:
        if pci:
            nvml_buses = {g.pci_bus_id.lower()[-12:] for g in gpus}
            missing = [p.bdf for p in pci if p.bdf.lower()[-12:] not in nvml_buses]
            if missing:
                evidence.append("on the PCI bus but not in NVML: " + ", ".join(missing))
        return _r("gpu_count", Status.FAIL, "missing", evidence)
    if expected is not None and seen > expected:
        return _r("gpu_count", Status.WARN, "extra", evidence)
    return _r("gpu_count", Status.PASS, "ok", evidence)


def check_ecc(facts: NodeFacts) -> Result:
    gpus = _live(facts)
    failed = [g.index for g in gpus if g.remapped and g.remapped[3]]
    pending = [g.index for g in gpus if g.remapped and g.remapped[2]]
    retired = [g.index for g in gpus if g.retired_pending]
    if failed:
        return _r("ecc", Status.FAIL, "remap_failed", [f"row remapping failed on {_gpus(failed)}"])
    if pending:
        rows = {g.index: g.remapped for g in gpus if g.index in pending}
        return _r(
            "ecc",
            Status.FAIL,
            "remap_pending",
            [
                f"GPU {i}: row remapping pending ({r[1]} uncorrectable, {r[0]} correctable rows)"
                for i, r in rows.items()
            ],  # type: ignore[index]
        )
    if retired:
        return _r("ecc", Status.FAIL, "retired_pending", [f"page retirement pending on {_gpus(retired)}"])
    off = [g.index for g in gpus if g.ecc_current is False]
    if off:
        return _r("ecc", Status.WARN, "ecc_off", [f"ECC off on {_gpus(off)}"])
    changing = [g.index for g in gpus if g.ecc_pending is not None and g.ecc_pending != g.ecc_current]
    if changing:
        return _r(
            "ecc",
            Status.WARN,
            "ecc_mode_pending",
            [f"ECC mode change waits for a reset on {_gpus(changing)}"],
        )
    known = [g for g in gpus if g.ecc_current is not None or g.remapped is not None]
    if not known:
        return _r(
            "ecc", Status.SKIPPED, "not_applicable", ["the GPUs report neither ECC mode nor remapped rows"]
        )
    return _r(
        "ecc", Status.PASS, "ok", [f"ECC on, no pending or failed row remapping on {len(known)} GPU(s)"]
    )


def _xid_gpu(facts: NodeFacts, key: int) -> str:
    if key >= 0:
        return f"GPU {key}"
    bus = facts.host.xid_buses.get(key)
    return f"the GPU at {bus} (NVML cannot identify it)" if bus else "a GPU NVML cannot identify"


def check_xid(facts: NodeFacts) -> Result:
    xids = facts.host.xids
    if xids is None:
        return _r(
            "xid",
            Status.SKIPPED,
            "no_data",
            [
                f"no XID history here ({facts.host.xid_source or 'nothing to read'} not readable); "
                "the live exporter counts XIDs as they happen"
            ],
        )
    seen = {(gpu, xid): n for gpu, counts in xids.items() for xid, n in counts.items() if n > 0}
    if not seen:
        return _r("xid", Status.PASS, "ok", [f"no XID in {facts.host.xid_source}"])
    lines = [
        f"{_xid_gpu(facts, gpu)}: XID {xid} x{n}"
        + (f" ({th.CRITICAL_XIDS[xid]})" if xid in th.CRITICAL_XIDS else "")
        for (gpu, xid), n in sorted(seen.items())
    ]
    critical = any(xid in th.CRITICAL_XIDS for _, xid in seen)
    return _r("xid", Status.FAIL if critical else Status.WARN, "critical_xid" if critical else "xid", lines)


# ---- NVLink, fabric, P2P -----------------------------------------------------------------------


def check_nvlink(facts: NodeFacts) -> Result:
    gpus = _live(facts)
    with_links = [g for g in gpus if g.link_count or g.links_up]
    expected_any = [g for g in gpus if th.board_nvlinks(g.name)]
    if not with_links and not expected_any:
        return _r("nvlink", Status.SKIPPED, "not_applicable", ["no NVLink on these GPUs"])
    down, short, noisy = [], [], []
    for g in gpus:
        want = th.board_nvlinks(g.name)
        links = [link for link, up in sorted(g.links_up.items()) if not up]
        if links:
            down.append(
                f"GPU {g.index}: link {', '.join(map(str, links))} down ({len(g.links_up) - len(links)} of "
                f"{len(g.links_up)} up)"
            )
        if want is not None and g.link_count < want:
            short.append(f"GPU {g.index}: {g.link_count} NVLinks reported, the board has {want}")
        for link, errs in sorted(g.link_errors.items()):
            total = sum(errs.values())
            if total >= th.DOCTOR_NVLINK_ERRORS.value:
                noisy.append(f"GPU {g.index} link {link}: {total} errors since the driver loaded ({errs})")
    if down:
        return _r("nvlink", Status.FAIL, "link_down", down + short)
    if short:
        return _r("nvlink", Status.FAIL, "links_missing", short)
    if noisy:
        return _r("nvlink", Status.WARN, "link_errors", noisy)
    links = sum(len(g.links_up) for g in gpus)
    return _r(
        "nvlink", Status.PASS, "ok", [f"{links} NVLinks up on {len(with_links)} GPU(s), error counters low"]
    )


def _nvswitch(g: GpuFacts) -> bool:
    return any(board in g.name for board in th.NVSWITCH_BOARDS)


def _nvlink_p2p(facts: NodeFacts) -> tuple[int, int] | None:
    """(pairs OK, pairs) of P2P over NVLink, where the matrix was read."""
    pairs = [ok for (_, _, cap), ok in (facts.nvml.p2p or {}).items() if cap == "nvlink"]
    return (sum(pairs), len(pairs)) if pairs else None


def check_fabric(facts: NodeFacts) -> Result:
    gpus = _live(facts)
    states = {g.index: g.fabric_state for g in gpus if g.fabric_state}
    if not states:
        blind = [g.index for g in gpus if _nvswitch(g)]
        if not blind:
            return _r(
                "fabric", Status.SKIPPED, "not_applicable", ["not an NVSwitch system (no fabric to register)"]
            )
        # an NVSwitch board whose driver reports no fabric state (A100): NVLink P2P tells
        why = f"{_gpus(blind)}: NVSwitch board, but the driver reports no fabric state"
        p2p = _nvlink_p2p(facts)
        if p2p is None:
            return _r("fabric", Status.WARN, "unknown", [why, "the P2P matrix has not been read yet"])
        ok, n = p2p
        evidence = [why, f"P2P over NVLink: {ok} of {n} GPU pairs OK"]
        if ok == 0:
            return _r("fabric", Status.FAIL, "not_started", evidence)
        return _r("fabric", Status.PASS, "ok", evidence)
    by_state: dict[str, list[int]] = {}
    for index, state in states.items():
        by_state.setdefault(state, []).append(index)
    evidence = [f"{_gpus(idx)}: fabric state {state}" for state, idx in sorted(by_state.items())]
    if "not_started" in by_state:
        return _r("fabric", Status.FAIL, "not_started", evidence)
    if "in_progress" in by_state:
        return _r("fabric", Status.WARN, "in_progress", evidence)
    return _r(
        "fabric", Status.PASS, "ok", [f"{len(states)} GPU(s) registered with the NVSwitch fabric (completed)"]
    )


def check_p2p(facts: NodeFacts) -> Result:
    p2p = facts.nvml.p2p
    gpus = _live(facts)
    if p2p is None:
        return _r("p2p", Status.SKIPPED, "no_data", ["the P2P matrix was not read this round"])
    if len(gpus) < 2:
        return _r("p2p", Status.SKIPPED, "not_applicable", ["fewer than two GPUs"])
    if check_fabric(facts).status in (Status.FAIL, Status.WARN):  # P2P follows the fabric: judged there
        return _r(
            "p2p",
            Status.SKIPPED,
            "fabric_pending",
            ["the NVSwitch fabric is not registered: see the fabric check"],
        )
    nvlink_node = any(g.links_up for g in gpus)
    counts: dict[str, tuple[int, int]] = {}
    for cap in ("nvlink", "read", "write"):
        pairs = [ok for (_, _, c), ok in p2p.items() if c == cap]
        if pairs:
            counts[cap] = (sum(pairs), len(pairs))
    evidence = [f"{cap}: {ok} of {n} GPU pairs OK" for cap, (ok, n) in counts.items()]
    if not counts:
        return _r("p2p", Status.SKIPPED, "no_data", ["the driver reports no P2P status"])
    read_ok = counts.get("read", (0, 0))
    write_ok = counts.get("write", (0, 0))
    if write_ok[0] < write_ok[1] and read_ok[0] == read_ok[1] and read_ok[1]:
        blocked = sorted({(a, b) for (a, b, c), ok in p2p.items() if c == "write" and not ok})
        evidence.append("writes refused, e.g. " + ", ".join(f"{a}->{b}" for a, b in blocked[:4]))
        return _r("p2p", Status.FAIL, "write_blocked", evidence)
    failing = {cap for cap, (ok, n) in counts.items() if ok < n}
    if failing and (nvlink_node or failing != {"nvlink"}):
        status = Status.FAIL if nvlink_node else Status.WARN
        return _r("p2p", status, "blocked", evidence)
    return _r("p2p", Status.PASS, "ok", evidence)


# ---- network and pods ----------------------------------------------------------------------------


def _gpu_pods(facts: NodeFacts) -> list[PodFacts] | Result:
    """The pods holding GPUs, or the result that says why the pod checks cannot judge."""
    if facts.pods is None:
        return Result("", Status.SKIPPED, "no_data", (facts.pods_error or "pods not read",))
    pods = [p for p in facts.pods if p.gpus]
    if not pods:
        return Result("", Status.SKIPPED, "not_applicable", ("no pod holds a GPU on this node",))
    return pods


def _skip(check: str, why: Result) -> Result:
    return Result(check, why.status, why.detail, why.evidence)


def check_rdma(facts: NodeFacts) -> Result:
    devices = facts.host.rdma_devices
    if devices is None:
        return _r("rdma", Status.SKIPPED, "no_data", ["/sys/class is not readable here"])
    if not devices:
        return _r("rdma", Status.WARN, "no_devices", ["no device under /sys/class/infiniband"])
    evidence = [f"{len(devices)} EFA/InfiniBand device(s): {', '.join(devices[:8])}"]
    pods = _gpu_pods(facts)
    if isinstance(pods, Result):
        return _r("rdma", Status.PASS, "ok", [*evidence, f"pods not checked: {pods.evidence[0]}"])
    without = [p.key for p in pods if not p.rdma]
    evidence += [f"pod {p.key}: " + ", ".join(f"{r} x{n}" for r, n in p.rdma.items()) for p in pods if p.rdma]
    if without:
        return _r(
            "rdma",
            Status.WARN,
            "pod_without_rdma",
            [*evidence, *(f"pod {k} holds GPUs but no EFA/RDMA device" for k in without)],
        )
    return _r("rdma", Status.PASS, "ok", evidence)


REPLICA = "::"  # the device plugin's time-slicing (and MPS) replicas of a GPU: <uuid>::<n>


def check_sharing(facts: NodeFacts) -> Result:
    """GPUs two or more pods share (the device plugin's replicas): each pod's share is split from the
    GPU's time by which pod each GPU process belongs to, which the exporter reads from the host's /proc
    (processOwners, hostPID). Without it, a shared GPU gets one ledger and its verdicts name no pod."""
    pods = _gpu_pods(facts)
    if isinstance(pods, Result):
        return _skip("sharing", pods)
    holders: dict[str, set[str]] = {}
    replicas: set[str] = set()
    for pod in pods:
        for device in pod.gpu_devices:
            uuid, cut, _ = device.partition(REPLICA)
            holders.setdefault(uuid, set()).add(pod.key)
            if cut:
                replicas.add(uuid)
    shared = {uuid: sorted(keys) for uuid, keys in holders.items() if len(keys) > 1}
    if not shared:
        return _r("sharing", Status.PASS, "ok", ["no GPU is shared by pods"])
    index = {g.uuid: g.index for g in facts.nvml.gpus}
    how = {True: "time-slicing or MPS replicas", False: "the same device"}
    evidence = [
        f"GPU {index.get(uuid, uuid)} is shared by {len(keys)} pods through {how[uuid in replicas]}: "
        + ", ".join(keys)
        for uuid, keys in sorted(shared.items(), key=lambda item: str(index.get(item[0], item[0])))
    ]
    if facts.process_owners is False:
        evidence.append(
            "processOwners is off (--process-owners, GBE_PROCESS_OWNERS): the shared GPUs are judged whole, "
            "not per pod"
        )
        return _r("sharing", Status.WARN, "owners_off", evidence)
    return _r("sharing", Status.PASS, "ok", [*evidence, "split per pod by the processes' owners"])


def check_pod_shm(facts: NodeFacts) -> Result:
    pods = _gpu_pods(facts)
    if isinstance(pods, Result):
        return _skip("pod_shm", pods)
    tiny, small, lines = [], [], []
    for pod in pods:
        for c in pod.judged:
            if c.shm_bytes is None:
                lines.append(
                    f"pod {pod.key} container {c.name}: /dev/shm size unknown ({c.shm_source or 'no mount'})"
                )
                continue
            kind = "memory-backed emptyDir" if c.shm_memory_volume else "the runtime's /dev/shm"
            ipc = {True: ", hostIPC", False: "", None: ""}[c.host_ipc]
            line = f"pod {pod.key} container {c.name}: /dev/shm {c.shm_bytes / MiB:,.0f} MiB ({kind}{ipc})"
            lines.append(line)
            if c.shm_bytes <= th.SHM_DEFAULT_BYTES.value:
                tiny.append(line)
            elif c.shm_bytes < th.DOCTOR_SHM_SMALL.value:
                small.append(line)
        if not pod.containers:
            lines.append(f"pod {pod.key}: no runtime bundle found (containerd/CRI-O state not mounted?)")
    if tiny:
        return _r("pod_shm", Status.FAIL, "default_shm", tiny)
    if small:
        return _r("pod_shm", Status.WARN, "small_shm", small)
    if not any(c.shm_bytes is not None for p in pods for c in p.containers):
        return _r("pod_shm", Status.SKIPPED, "no_data", lines)
    return _r("pod_shm", Status.PASS, "ok", lines)


def check_nccl_env(facts: NodeFacts) -> Result:
    pods = _gpu_pods(facts)
    if isinstance(pods, Result):
        return _skip("nccl_env", pods)
    nvlink_node = any(g.links_up for g in _live(facts))
    rdma_node = bool(facts.host.rdma_devices)
    findings: dict[str, list[str]] = {}  # detail -> lines
    seen = []
    for pod in pods:
        for c in pod.judged:
            where = f"pod {pod.key} container {c.name}"
            env = {k: v for k, v in c.env.items() if k in NCCL_VARS}
            seen.append(
                where + ": " + (" ".join(f"{k}={v}" for k, v in sorted(env.items())) or "no NCCL variable")
            )
            level = env.get("NCCL_P2P_LEVEL", "").upper()
            if env.get("NCCL_P2P_DISABLE", "0") not in ("", "0") and nvlink_node:
                findings.setdefault("p2p_disabled", []).append(
                    f"{where}: NCCL_P2P_DISABLE={env['NCCL_P2P_DISABLE']}"
                )
            if level in ("LOC", "0") and nvlink_node:
                findings.setdefault("p2p_level_loc", []).append(
                    f"{where}: NCCL_P2P_LEVEL={env['NCCL_P2P_LEVEL']}"
                )
            if env.get("NCCL_IB_DISABLE", "0") not in ("", "0") and rdma_node:
                findings.setdefault("ib_disabled", []).append(
                    f"{where}: NCCL_IB_DISABLE={env['NCCL_IB_DISABLE']}"
                )
            if env.get("NCCL_DEBUG", "").upper() == "TRACE":
                findings.setdefault("debug_trace", []).append(f"{where}: NCCL_DEBUG=TRACE")
            names = [n for n in env.get("NCCL_SOCKET_IFNAME", "").lstrip("=").split(",") if n]
            if names and all(n.startswith("lo") for n in names):
                findings.setdefault("socket_ifname_lo", []).append(
                    f"{where}: NCCL_SOCKET_IFNAME={env['NCCL_SOCKET_IFNAME']}"
                )
            if pod.rdma and "CAP_IPC_LOCK" not in c.capabilities:
                findings.setdefault("ipc_lock_missing", []).append(
                    f"{where}: holds {', '.join(pod.rdma)} without IPC_LOCK"
                )
    for detail in ("p2p_disabled", "p2p_level_loc"):
        if detail in findings:
            return _r("nccl_env", Status.FAIL, detail, findings[detail])
    for detail in ("ib_disabled", "ipc_lock_missing", "socket_ifname_lo", "debug_trace"):
        if detail in findings:
            return _r("nccl_env", Status.WARN, detail, findings[detail])
    if not seen:
        return _r("nccl_env", Status.SKIPPED, "no_data", ["no container spec of a GPU pod found"])
    return _r("nccl_env", Status.PASS, "ok", seen)


# ---- host ------------------------------------------------------------------------------------------


def check_pcie(facts: NodeFacts) -> Result:
    gpus = _live(facts)
    narrow, slow, lines = [], [], []
    for g in gpus:
        if g.pcie_width is None or g.pcie_width_max is None:
            continue
        where = f"GPU {g.index}" + (f" (NUMA node {g.numa_node})" if g.numa_node is not None else "")
        line = f"{where}: PCIe Gen{g.pcie_gen} x{g.pcie_width} of Gen{g.pcie_gen_max} x{g.pcie_width_max}"
        busy = g.util is not None and g.util >= th.DOCTOR_PCIE_BUSY_UTIL.value
        if g.pcie_gen is not None and g.pcie_gen_max is not None and g.pcie_gen < g.pcie_gen_max and not busy:
            line += " (idle: the link slows down to save power)"
        lines.append(line)
        if g.pcie_width < g.pcie_width_max:
            narrow.append(line)
        if g.pcie_gen is not None and g.pcie_gen_max is not None and g.pcie_gen < g.pcie_gen_max and busy:
            slow.append(line + f" at {g.util:.0%} utilization")
    if not lines:
        return _r("pcie", Status.SKIPPED, "not_applicable", ["the driver reports no PCIe link state"])
    if narrow:
        return _r("pcie", Status.FAIL, "width_degraded", narrow)
    if slow:
        return _r("pcie", Status.WARN, "gen_degraded", slow)
    return _r("pcie", Status.PASS, "ok", [f"{len(lines)} GPU link(s) at full width", *lines[:1]])


def check_host(facts: NodeFacts) -> Result:
    host = facts.host
    lines, low = [], []
    for pid, limit in sorted(host.memlock.items()):
        if limit is not None and limit < th.DOCTOR_MEMLOCK_MIN.value and host.rdma_devices:
            low.append(f"GPU process {pid}: locked-memory limit {limit / MiB:,.1f} MiB")
    if host.memlock:
        unlimited = sum(1 for v in host.memlock.values() if v is None)
        lines.append(f"{len(host.memlock)} GPU process(es): {unlimited} with unlimited locked memory")
    if low:
        return _r("host", Status.WARN, "memlock_low", low)
    clock = host.clock
    if clock is not None:
        error = f", max error {clock.max_error_s * 1000:.0f} ms" if clock.max_error_s is not None else ""
        lines.append(f"kernel clock {'synchronised' if clock.synced else 'NOT synchronised'}{error}")
        if not clock.synced:
            return _r("host", Status.WARN, "clock_unsynced", lines)
        if clock.max_error_s is not None and clock.max_error_s > th.DOCTOR_CLOCK_MAX_ERROR.value:
            return _r("host", Status.WARN, "clock_error", lines)
    if not lines:
        return _r(
            "host",
            Status.SKIPPED,
            "no_data",
            ["neither memlock limits nor the kernel clock are visible here"],
        )
    return _r("host", Status.PASS, "ok", lines)


# ---- the registry ------------------------------------------------------------------------------------

_RESET = "drain the node, then reset the GPU (`nvidia-smi -r -i N`) or reboot"

CHECKS: dict[str, Check] = {
    c.name: c
    for c in (
        Check(
            "driver",
            "NVML loads; driver, CUDA and NVML versions; persistence mode",
            check_driver,
            slow=False,
            details=("driver_broken", "persistence_off"),
            fixes={
                "driver_broken": "NVML fails on a node with NVIDIA GPUs: run `nvidia-smi` and "
                "`dmesg | grep -i nvrm` on the host. LibRmVersionMismatch: the driver was upgraded without a "
                "reboot, reboot the node. LibraryNotFound in the pod: the NVIDIA container runtime did not "
                "inject the library (docs/troubleshooting.md, 'No GPUs').",
                "persistence_off": "Turn persistence mode on so the driver stays initialised between jobs: "
                "`nvidia-smi -pm 1`, or run nvidia-persistenced (the GPU Operator's driver does).",
            },
        ),
        Check(
            "gpu_count",
            "GPUs NVML sees vs expected (--expected-gpus, else the NVIDIA GPUs on the PCI bus); lost GPUs",
            check_gpu_count,
            slow=False,
            details=("missing", "lost", "extra"),
            fixes={
                "missing": "A GPU on the PCI bus is not visible to NVML: fallen off the bus (XID 79), bound "
                "to another driver (vfio-pci), or failed at driver load. Check `nvidia-smi -L`, "
                "`lspci -d 10de:` and `dmesg | grep -i xid`; " + _RESET + ".",
                "lost": "A GPU does not answer NVML (GpuIsLost: fallen off the bus); " + _RESET + ". If it "
                "comes back lost, the board needs service.",
                "extra": "More GPUs than expected: check --expected-gpus for this node type.",
            },
        ),
        Check(
            "ecc",
            "ECC mode; DRAM row remapping (Ampere and later) or page retirement pending or failed",
            check_ecc,
            slow=False,
            details=("remap_pending", "remap_failed", "retired_pending", "ecc_off", "ecc_mode_pending"),
            fixes={
                "remap_pending": "A DRAM row remapping waits for a GPU reset: " + _RESET + "; until then "
                "the faulty row stays in use and uncorrectable errors can recur.",
                "remap_failed": "Row remapping failed (no spare rows left): the GPU needs "
                "replacing. Drain the "
                "node and open an RMA with the GPU's serial number.",
                "retired_pending": "Retired pages wait for a GPU reset: " + _RESET + ".",
                "ecc_off": "Turn ECC on (`nvidia-smi -e 1`, effective after a reset or reboot): training on "
                "data-centre GPUs assumes it.",
                "ecc_mode_pending": "An ECC mode change waits for a reset: " + _RESET + ".",
            },
        ),
        Check(
            "xid",
            "XIDs the driver reported (the exporter's counts live; the kernel log for `doctor`)",
            check_xid,
            slow=False,
            details=("critical_xid", "xid"),
            fixes={
                "critical_xid": "A critical XID is a hardware or driver fault: look it up in "
                "docs/runbooks/GpuXidCritical.md; 79 (fallen off the bus) and the ECC XIDs (48, 63, "
                "64, 94, 95) "
                "need the node drained and the GPU reset.",
                "xid": "Non-critical XIDs are mostly application faults (13, 31, 43: illegal address, page "
                "fault): check the job's own logs.",
            },
        ),
        Check(
            "nvlink",
            "every NVLink up, as many as the board has; NVLink error counters",
            check_nvlink,
            slow=False,
            details=("link_down", "links_missing", "link_errors"),
            fixes={
                "link_down": "An NVLink is down: `nvidia-smi nvlink -s -i N` shows which. "
                + _RESET[0].upper()
                + _RESET[1:]
                + "; a link that stays down is a hardware fault (reseat or RMA).",
                "links_missing": "The GPU reports fewer NVLinks than its board has: links failed to train at "
                "boot. Reboot; if they stay missing, the baseboard needs service.",
                "link_errors": "A link keeps counting replay/recovery/CRC errors (`nvidia-smi nvlink -e`): "
                "reset the GPU at the next drain; if it keeps climbing, reseat or RMA.",
            },
        ),
        Check(
            "fabric",
            "NVSwitch systems (A100/H100/H200 SXM, B200): fabric manager registration completed",
            check_fabric,
            slow=False,
            details=("not_started", "in_progress", "unknown"),
            fixes={
                "not_started": "The fabric manager is not running, so NVSwitch is not programmed and NCCL "
                "cannot use NVLink (NCCL falls back to P2P/CUMEM/read). On the host: `systemctl enable --now "
                "nvidia-fabricmanager`, with exactly the driver's version; on Kubernetes enable the GPU "
                "Operator's fabric manager, or run it as a privileged DaemonSet from the driver's image "
                "(`nvidia-fabricmanager -f`). Confirm with `nvidia-smi -q | grep -A2 -i fabric` "
                "(State: Completed), then restart the GPU pods.",
                "in_progress": "Fabric registration is still running: wait a minute; if it does not "
                "complete, "
                "read the fabric manager's log (`journalctl -u nvidia-fabricmanager`).",
                "unknown": "This driver does not report the fabric state: check on the host that "
                "nvidia-fabricmanager runs (`systemctl status nvidia-fabricmanager`).",
            },
        ),
        Check(
            "p2p",
            "P2P read, write and NVLink status of every GPU pair (a hypervisor blocking P2P shows here)",
            check_p2p,
            slow=True,
            details=("write_blocked", "blocked", "fabric_pending"),
            fixes={
                "write_blocked": "P2P writes between GPUs are refused while reads work: a hypervisor (AWS "
                "Nitro, for one) or the PCIe ACS/IOMMU setup blocks them, and NCCL runs "
                "P2P/CUMEM/read at a "
                "fraction of NVLink's speed. On bare metal turn ACS off for the GPU switches (or IOMMU "
                "passthrough); on a cloud instance it is the platform's: keep NCCL_P2P_LEVEL=NVL and put "
                "tensor parallelism inside the node.",
                "blocked": "GPU pairs cannot use P2P: check `nvidia-smi topo -p2p rw`, the fabric manager on "
                "NVSwitch systems, and ACS/IOMMU settings. NCCL otherwise copies through host memory.",
            },
        ),
        Check(
            "rdma",
            "EFA/InfiniBand devices present; GPU pods holding vpc.amazonaws.com/efa or rdma/* devices",
            check_rdma,
            slow=True,
            details=("no_devices", "pod_without_rdma"),
            fixes={
                "no_devices": "No EFA or InfiniBand device: multi-node NCCL runs over TCP sockets. On EFA "
                "instances install the EFA driver (aws-efa-installer) and the EFA device plugin; on "
                "InfiniBand "
                "nodes the MOFED/rdma-core drivers and the RDMA device plugin. Single-node jobs do "
                "not need it.",
                "pod_without_rdma": "A GPU pod holds no EFA/RDMA device: request `vpc.amazonaws.com/efa` (or "
                "the `rdma/*` resource) in its limits, or its NCCL uses "
                "sockets between "
                "nodes.",
            },
        ),
        Check(
            "sharing",
            "GPUs pods share (time-slicing or MPS replicas): split per pod only with processOwners (hostPID)",
            check_sharing,
            slow=True,
            details=("owners_off",),
            fixes={
                "owners_off": "Pods share a GPU, and each pod's share of its time (ledger, verdicts, cost) "
                "is split by which pod each GPU process belongs to: install the chart with "
                "`--set processOwners.enabled=true` (the exporter's pod then runs with hostPID and reads "
                "the host's /proc; docs/configuration.md), or run with `--process-owners on` "
                "(GBE_PROCESS_OWNERS=on). Until then the shared GPU is judged whole and its verdicts "
                "name no pod.",
            },
        ),
        Check(
            "pod_shm",
            "per GPU pod: /dev/shm size, memory-backed emptyDir size limit, hostIPC",
            check_pod_shm,
            slow=True,
            details=("default_shm", "small_shm"),
            fixes={
                "default_shm": "The pod runs on the runtime's 64 MiB /dev/shm: mount an emptyDir with "
                "`medium: Memory` and a `sizeLimit` (64Gi is common for training pods) at /dev/shm; "
                "DataLoader workers and NCCL's SHM transport otherwise die with 'Bus error'.",
                "small_shm": "Raise the `sizeLimit` of the pod's memory-backed /dev/shm volume (64Gi is "
                "common for training pods).",
            },
        ),
        Check(
            "nccl_env",
            "per GPU pod: NCCL_P2P_DISABLE, NCCL_IB_DISABLE, NCCL_P2P_LEVEL, NCCL_SOCKET_IFNAME, "
            "NCCL_CUMEM_HOST_ENABLE, NCCL_DEBUG from the runtime bundle; IPC_LOCK",
            check_nccl_env,
            slow=True,
            details=(
                "p2p_disabled",
                "p2p_level_loc",
                "ib_disabled",
                "ipc_lock_missing",
                "socket_ifname_lo",
                "debug_trace",
            ),
            fixes={
                "p2p_disabled": "NCCL_P2P_DISABLE=1 turns NVLink P2P off: NCCL copies through host shared "
                "memory. Remove it (or set 0) and fix what it was set for (fabric manager, blocked P2P).",
                "p2p_level_loc": "NCCL_P2P_LEVEL=LOC disables P2P: set NVL or leave it unset.",
                "ib_disabled": "NCCL_IB_DISABLE=1 turns EFA/InfiniBand off: multi-node jobs fall back to TCP "
                "sockets. Keep it only for single-node jobs.",
                "ipc_lock_missing": "The container holds EFA/RDMA devices without IPC_LOCK: add "
                "`securityContext.capabilities.add: [IPC_LOCK]` so it may pin its buffers.",
                "socket_ifname_lo": "NCCL_SOCKET_IFNAME names only the loopback: multi-node jobs cannot "
                "connect. Name the pod's network interface (e.g. eth0) or exclude lo and docker "
                "(^lo,docker).",
                "debug_trace": "NCCL_DEBUG=TRACE logs every call and slows training: use INFO for bring-up, "
                "WARN in production.",
            },
        ),
        Check(
            "pcie",
            "each GPU's PCIe link generation and width vs its maximum; its NUMA node",
            check_pcie,
            slow=False,
            details=("width_degraded", "gen_degraded"),
            fixes={
                "width_degraded": "The GPU's PCIe link trained narrower than its maximum: host transfers run "
                "at a fraction of their speed. Check `lspci -vv -s BUS | grep -E 'LnkCap|LnkSta'`; "
                "reseat the "
                "GPU or its riser at the next drain; a link that keeps training narrow needs service.",
                "gen_degraded": "A busy GPU's PCIe link runs below its maximum generation: check "
                "the BIOS PCIe "
                "settings and `lspci -vv` (LnkSta vs LnkCap); a riser or retimer fault shows like this.",
            },
        ),
        Check(
            "host",
            "locked-memory limit of the GPU processes; kernel clock synchronisation (warn only)",
            check_host,
            slow=False,
            details=("memlock_low", "clock_unsynced", "clock_error"),
            fixes={
                "memlock_low": "Raise the locked-memory limit of GPU processes for EFA/RDMA: "
                "`LimitMEMLOCK=infinity` in the container runtime's systemd unit (containerd), and IPC_LOCK "
                "for the pod.",
                "clock_unsynced": "Synchronise the clock: run chrony or NTP (on AWS, the Amazon Time Sync "
                "Service at 169.254.169.123).",
                "clock_error": "The clock's error bound is large: check chrony's sources (`chronyc "
                "tracking`).",
            },
        ),
    )
}


def run_checks(facts: NodeFacts, names: Iterable[str] | None = None) -> list[Result]:
    """The named checks (default: all) over ``facts``. Without NVML every check but the driver's is
    skipped: there is no GPU to judge (the driver's fails where the bus or --expected-gpus says the node
    has GPUs). A check that raises is reported, never propagated."""
    out = []
    for name in names if names is not None else CHECKS:
        check = CHECKS[name]
        if not facts.nvml.usable and name != "driver":
            out.append(Result(name, Status.SKIPPED, "no_nvml", (f"no NVML ({facts.nvml.error})",)))
            continue
        try:
            out.append(check.fn(facts))
        except Exception as exc:  # noqa: BLE001 - one broken check must not hide the others
            out.append(Result(name, Status.SKIPPED, "error", (f"the check failed: {exc!r}",)))
    return out
