"""What each board is: its NVLinks, whether it sits on an NVSwitch, its power envelope and framebuffer."""

from __future__ import annotations

import re

# NVLinks each board should have up (its NVLink generation's per-GPU count), for the doctor's link check.
# Matched on the NVML name, longest match first; boards not listed (PCIe cards) are not held to a count.
NVLINKS_BY_BOARD: dict[str, int] = {
    "H100 80GB HBM3": 18,
    "H100 SXM": 18,
    "H200": 18,
    "GH200": 18,
    "B200": 18,
    "A100-SXM4": 12,
    "A100-SXM": 12,
    "V100-SXM2": 6,
}
# Boards built into NVSwitch systems (HGX/DGX): they need a running fabric manager before NVLink P2P works.
NVSWITCH_BOARDS = ("H100 80GB HBM3", "H100 SXM", "H200", "B200", "A100-SXM4", "A100-SXM")


def board_nvlinks(name: str) -> int | None:
    for key in sorted(NVLINKS_BY_BOARD, key=len, reverse=True):
        if key in name:
            return NVLINKS_BY_BOARD[key]
    return None


# What a board draws: its default power limit (TDP) and its idle draw with the driver loaded and no work,
# as nvidia-smi reports them, for logs that carry no power limit column (TDP) and for GPUs seen busy from
# their first sample (idle). Matched on the nvidia-smi name, longest match first. Live, NVML's own default
# limit is used, and the idle floor a GPU shows in its own samples always wins over this table's.
BOARD_POWER_W: dict[str, tuple[float, float | None]] = {
    "H100 80GB HBM3": (700.0, 70.0),
    "H100 SXM": (700.0, 70.0),
    "H100 NVL": (400.0, 60.0),
    "H100 PCIe": (350.0, 50.0),
    "H200": (700.0, 75.0),
    "GH200": (900.0, None),
    "B200": (1000.0, None),
    "A100-SXM4": (400.0, 55.0),
    "A100-SXM": (400.0, 55.0),
    "A100 80GB PCIe": (300.0, 45.0),
    "A100-PCIE-40GB": (250.0, 35.0),
    "A10G": (300.0, 25.0),
    "A30": (165.0, 30.0),
    "A40": (300.0, 30.0),
    "L40S": (350.0, 35.0),
    "L40": (300.0, 35.0),
    "L4": (72.0, 16.0),
    "T4": (70.0, 10.0),
    "V100-SXM2": (300.0, 40.0),
    "V100-SXM3": (350.0, 50.0),
    "V100-PCIE": (250.0, 30.0),
    "V100S": (250.0, 30.0),
    "P100-SXM2": (300.0, 35.0),
    "P100-PCIE": (250.0, 30.0),
    "RTX 4090": (450.0, 25.0),
    "RTX 3090": (350.0, 25.0),
    "RTX 3080": (320.0, 20.0),
    "RTX 3060 Ti": (200.0, 15.0),
    "RTX 2080 Ti": (250.0, 20.0),
    "RTX A6000": (300.0, 25.0),
    "RTX A5000": (230.0, 25.0),
    "RTX A4000": (140.0, 15.0),
    "TITAN X": (250.0, 15.0),
    "TITAN RTX": (280.0, 20.0),
}
BOARD_TDP_W: dict[str, float] = {name: tdp for name, (tdp, _) in BOARD_POWER_W.items()}


def _board(name: str) -> tuple[float, float | None] | None:
    if not name:
        return None
    upper = name.upper()
    for key in sorted(BOARD_POWER_W, key=len, reverse=True):
        if key.upper() in upper:
            return BOARD_POWER_W[key]
    return None


_BOARD_GB = re.compile(r"(?<![0-9])([0-9]{1,3}) ?GB\b", re.IGNORECASE)
GIB = 1 << 30


def board_memory_bytes(name: str) -> float | None:
    """A board's framebuffer from a name that states it (``A100-SXM4-80GB``, ``H100 80GB HBM3``,
    ``Tesla V100-SXM2-32GB``), for logs without memory.total; None where the name does not say (no
    table fills it in: a "Tesla V100-PCIE" came with 16 or 32 GB). The name's GB are the driver's GiB
    within half a percent (an 80GB H100 reports 81,559 MiB, an A100 81,920). A name that states more
    than the GPU's own (GH200 480GB counts its CPU's memory) only lowers the share reserved: never a
    server by mistake."""
    match = _BOARD_GB.search(name or "")
    return float(int(match.group(1)) * GIB) if match else None


def board_tdp(name: str) -> float | None:
    board = _board(name)
    return board[0] if board else None


def board_idle(name: str) -> float | None:
    board = _board(name)
    return board[1] if board else None


# The highest SM clock each board runs at (nvidia-smi's clocks.max.sm, MHz), for logs without that column:
# a clock far under it while the board draws its enforced limit is a power cap. Matched on the nvidia-smi
# name, longest match first; a board not listed is measured against the highest clock it showed under load.
BOARD_SM_CLOCK_MAX_MHZ: dict[str, float] = {
    "H100 80GB HBM3": 1980.0,
    "H100 SXM": 1980.0,
    "H100 NVL": 1785.0,
    "H100 PCIe": 1755.0,
    "H200": 1980.0,
    "A100-SXM4": 1410.0,
    "A100-SXM": 1410.0,
    "A100 80GB PCIe": 1410.0,
    "A100-PCIE-40GB": 1410.0,
    "A10G": 1710.0,
    "A30": 1440.0,
    "A40": 1740.0,
    "L40S": 2520.0,
    "L4": 2040.0,
    "T4": 1590.0,
    "V100-SXM2": 1530.0,
    "V100-PCIE": 1380.0,
}


def board_sm_clock_max_hz(name: str) -> float | None:
    """The board's highest SM clock from its name (None: not in the table)."""
    if not name:
        return None
    upper = name.upper()
    for key in sorted(BOARD_SM_CLOCK_MAX_MHZ, key=len, reverse=True):
        if key.upper() in upper:
            return BOARD_SM_CLOCK_MAX_MHZ[key] * 1e6
    return None
