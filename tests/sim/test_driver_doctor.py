"""The simulated driver's entry points for the node doctor, called through the real nvidia-ml-py
functions (argument packing, return codes, the real NVMLError classes), and the simulated /sys tree."""

from __future__ import annotations

import pynvml as N
import pytest


def test_health_and_link_state_of_a_healthy_board(make_node):
    node = make_node("healthy", n_gpus=2)
    N.nvmlInit()
    try:
        h = N.nvmlDeviceGetHandleByIndex(1)
        assert N.nvmlDeviceGetPersistenceMode(h) == N.NVML_FEATURE_ENABLED
        assert N.nvmlDeviceGetEccMode(h) == [1, 1]
        assert N.nvmlDeviceGetRemappedRows(h) == (0, 0, 0, 0)
        with pytest.raises(N.NVMLError_NotSupported):  # Hopper remaps rows; it retires no pages
            N.nvmlDeviceGetRetiredPagesPendingStatus(h)
        assert N.nvmlDeviceGetMaxPcieLinkGeneration(h) == N.nvmlDeviceGetGpuMaxPcieLinkGeneration(h) == 5
        assert N.nvmlDeviceGetCurrPcieLinkWidth(h) == N.nvmlDeviceGetMaxPcieLinkWidth(h) == 16
        assert N.nvmlDeviceGetCurrPcieLinkGeneration(h) in (1, 5)  # Gen1 while idle, as real boards
        assert N.nvmlDeviceGetNumaNodeId(h) == 1
    finally:
        N.nvmlShutdown()
    bus = node.model.gpus[1].pci_bus_id[4:].lower()
    pci = node.host.root / "sys/bus/pci/devices" / bus
    assert (pci / "vendor").read_text() == "0x10de\n" and (pci / "current_link_width").read_text() == "16\n"
    assert sorted(p.name for p in (node.host.root / "sys/class/infiniband").iterdir())[0] == "rdmap16s27"


@pytest.mark.parametrize(
    ("scenario", "gpu", "call", "expected", "others"),
    [
        ("persistence_off", 0, "nvmlDeviceGetPersistenceMode", 0, 0),  # every GPU
        ("ecc_pending", 5, "nvmlDeviceGetRemappedRows", (0, 1, 1, 0), (0, 0, 0, 0)),
        ("pcie_degraded", 3, "nvmlDeviceGetCurrPcieLinkWidth", 8, 16),
    ],
)
def test_each_scenario_changes_what_the_driver_reports(make_node, scenario, gpu, call, expected, others):
    make_node(scenario)
    N.nvmlInit()
    try:
        assert getattr(N, call)(N.nvmlDeviceGetHandleByIndex(gpu)) == expected
        other = (gpu + 1) % 8
        assert getattr(N, call)(N.nvmlDeviceGetHandleByIndex(other)) == others
    finally:
        N.nvmlShutdown()


def test_fabric_p2p_and_links_of_the_interconnect_scenarios(make_node):
    node = make_node("no_fabric_manager", n_gpus=2)
    N.nvmlInit()
    try:
        a, b = N.nvmlDeviceGetHandleByIndex(0), N.nvmlDeviceGetHandleByIndex(1)
        info = N.c_nvmlGpuFabricInfoV_t()
        info.version = N.nvmlGpuFabricInfo_v2
        N.nvmlDeviceGetGpuFabricInfoV(a, info)
        assert info.state == N.NVML_GPU_FABRIC_STATE_NOT_STARTED
        assert N.nvmlDeviceGetP2PStatus(a, b, 2) == N.NVML_P2P_STATUS_NOT_SUPPORTED
    finally:
        N.nvmlShutdown()
        node.close()
    make_node("p2p_blocked", n_gpus=2)
    N.nvmlInit()
    try:
        a, b = N.nvmlDeviceGetHandleByIndex(0), N.nvmlDeviceGetHandleByIndex(1)
        assert N.nvmlDeviceGetP2PStatus(a, b, 0) == N.NVML_P2P_STATUS_OK  # reads
        assert N.nvmlDeviceGetP2PStatus(a, b, 1) == N.NVML_P2P_STATUS_NOT_SUPPORTED  # writes
    finally:
        N.nvmlShutdown()


def test_missing_gpu_is_on_the_bus_but_not_in_nvml(make_node):
    node = make_node("missing_gpu", n_gpus=4)
    N.nvmlInit()
    try:
        assert N.nvmlDeviceGetCount() == 3
        uuids = [N.nvmlDeviceGetUUID(N.nvmlDeviceGetHandleByIndex(i)) for i in range(3)]
        with pytest.raises(N.NVMLError_InvalidArgument):
            N.nvmlDeviceGetHandleByIndex(3)
    finally:
        N.nvmlShutdown()
    assert uuids == [g.uuid for g in node.model.gpus[:3]]
    assert len(list((node.host.root / "sys/bus/pci/devices").iterdir())) == 4


def test_a_link_down_shows_in_the_link_state_calls(make_node):
    make_node("nvlink_link_down:gpus=1", n_gpus=2)
    N.nvmlInit()
    try:
        h = N.nvmlDeviceGetHandleByIndex(1)
        states = [N.nvmlDeviceGetNvLinkState(h, link) for link in range(18)]
        assert [i for i, up in enumerate(states) if not up] == [4]
    finally:
        N.nvmlShutdown()
