"""Node conditions of the simulated node: how it was built and configured, as opposed to what its
workload does (physics.py). The node doctor's scenarios are healthy training on a node with one thing
wrong in its bring-up: no fabric manager, P2P blocked by a hypervisor, one NVLink down, a pod on the
default /dev/shm, NCCL told not to use P2P, a PCIe link trained narrow, a row remapping pending, a GPU
NVML cannot see, a pod without EFA devices.

The fake driver, the simulated /sys tree, the pods and their runtime bundles all read one
``NodeConditions``, so every source the doctor reads tells the same story.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from exporter.sim.scenarios import Scenario

FABRIC_COMPLETED = 3  # NVML_GPU_FABRIC_STATE_COMPLETED
FABRIC_NOT_STARTED = 1
PCIE_GEN, PCIE_WIDTH = 5, 16  # H100 SXM5: PCIe Gen5 x16
EFA_DEVICES = ("rdmap16s27", "rdmap32s27", "rdmap48s27", "rdmap64s27")  # as a p5 names its EFA devices


@dataclass(frozen=True)
class NodeConditions:
    fabric_state: int = FABRIC_COMPLETED  # every GPU's fabric registration
    p2p_write_blocked: bool = False  # a hypervisor refuses P2P writes; reads still work
    links_down: frozenset[tuple[int, int]] = frozenset()  # (gpu, link)
    pcie_width: dict[int, int] = field(default_factory=dict)  # gpu -> trained width below x16
    remap_pending: frozenset[int] = frozenset()  # GPUs with a row remapping waiting for a reset
    hidden: frozenset[int] = frozenset()  # GPUs on the PCI bus that NVML does not enumerate
    pod_shm_default: bool = False  # the training pod mounts no memory-backed emptyDir at /dev/shm
    pod_env: tuple[tuple[str, str], ...] = ()  # extra environment of the training container
    pod_efa: bool = True  # the training pod holds the node's EFA devices
    persistence: bool = True


# the training container's environment on a well set-up EFA node (NCCL's bring-up checklist)
BASE_ENV: tuple[tuple[str, str], ...] = (
    ("NCCL_DEBUG", "WARN"),
    ("FI_PROVIDER", "efa"),
    ("FI_EFA_USE_DEVICE_RDMA", "1"),
)


def conditions_for(scenario: Scenario, n_gpus: int) -> NodeConditions:
    """The bring-up conditions a scenario describes (healthy for every workload scenario)."""
    name = scenario.name
    affected = scenario.affected(n_gpus)
    if name == "no_fabric_manager":
        return NodeConditions(fabric_state=FABRIC_NOT_STARTED)
    if name == "p2p_blocked":
        return NodeConditions(p2p_write_blocked=True)
    if name == "nvlink_link_down":
        return NodeConditions(links_down=frozenset((g, 4) for g in affected))
    if name == "shm_default":
        return NodeConditions(pod_shm_default=True)
    if name == "nccl_p2p_disabled":
        return NodeConditions(pod_env=(("NCCL_P2P_DISABLE", "1"),))
    if name == "pcie_degraded":
        return NodeConditions(pcie_width=dict.fromkeys(affected, PCIE_WIDTH // 2))
    if name == "ecc_pending":
        return NodeConditions(remap_pending=frozenset(affected))
    if name == "missing_gpu":
        return NodeConditions(hidden=frozenset(affected) if n_gpus > 1 else frozenset())
    if name == "no_efa":
        return NodeConditions(pod_efa=False)
    if name == "persistence_off":
        return NodeConditions(persistence=False)
    return NodeConditions()
