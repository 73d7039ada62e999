"""Detail levels of the exposition: what ``--detail`` turns on beyond the per-GPU defaults.

A node exposes a bounded number of series by default (the series budget, ``SERIES_BUDGET`` in
thresholds/serving.py): per-GPU aggregates that every alert, recording rule and dashboard reads. The
fine-grained families below (per NVLink, per GPU pair, per XID code, ...) are the same readings broken
down further; they are added, never substituted, when their category is named, so a query on the
aggregates works the same with or without them.
"""

from __future__ import annotations

from exporter.policy import catalog

# category -> (the families it adds, why one would turn it on)
DETAIL: dict[str, tuple[tuple[str, ...], str]] = {
    "nvlink": (
        ("gpu_nvlink_up", "gpu_nvlink_bytes_total", "gpu_nvlink_errors_total"),
        "per-link state, traffic and error counters by type (18 links per H100): which link is down or "
        "degrading",
    ),
    "p2p": (("gpu_p2p_status",), "per GPU pair and capability P2P status: which pair cannot talk"),
    "xid": (("gpu_xid_errors_total",), "one counter per XID code, the critical codes from zero"),
    "scores": (
        ("gpu_bottleneck_score",),
        "the strength of the evidence for every verdict kind, 0-1, also while no verdict holds",
    ),
    "window": (
        ("gpu_utilization_window_ratio", "gpu_power_window_watts"),
        "every window statistic (min, max, p05, p95) besides the mean, which is always exported",
    ),
    "clocks": (
        ("gpu_clock_event_active", "gpu_clock_event_seconds_total", "gpu_clock_max_hertz", "gpu_clock_hertz"),
        "clock-event (throttle) reasons, their counted time, the memory clock and the clocks' maxima; "
        "the SM clock, the ledger's throttled state and the thermal verdict are exported without them",
    ),
    "fabric": (("gpu_fabric_state",), "every NVSwitch fabric state (gpu_fabric_registered is always on)"),
    "profiling": (
        ("gpu_sm_occupancy_ratio", "gpu_tensor_active_ratio", "gpu_dram_active_ratio"),
        "GPM profiling beyond SM activity",
    ),
    "processes": (
        (
            "gpu_process_count",
            "gpu_process_memory_bytes",
            "gpu_process_sm_utilization_ratio",
            "gpu_process_memory_utilization_ratio",
        ),
        "compute processes holding each GPU, and the top ones by memory one series each (pid, command, pod): "
        "their memory and utilization",
    ),
}


def _with_catalog(table: dict[str, tuple[tuple[str, ...], str]]) -> dict[str, tuple[tuple[str, ...], str]]:
    """The table above, plus the categories and families the signal catalog declares
    (exporter/policy/catalog.py)."""
    out = dict(table)
    for category, why in catalog.DETAIL_CATEGORIES.items():
        out.setdefault(category, ((), why))
    for category, names in catalog.detail_families().items():
        listed, why = out[category]
        out[category] = ((*listed, *(n for n in names if n not in listed)), why)
    return out


DETAIL = _with_catalog(DETAIL)
CATEGORIES = tuple(DETAIL)


def parse_detail(text: str) -> frozenset[str]:
    """``nvlink,p2p`` -> the categories; ``all`` names every one; unknown names raise ValueError."""
    names = {p.strip().lower() for p in text.split(",") if p.strip()}
    if "all" in names:
        return frozenset(CATEGORIES)
    unknown = sorted(names - set(CATEGORIES))
    if unknown:
        raise ValueError(f"unknown detail {', '.join(unknown)}: choose from {', '.join(CATEGORIES)} or all")
    return frozenset(names)


def detail_family(name: str) -> str | None:
    """The category that turns ``name`` on, or None for a family that is always exported."""
    for category, (names, _) in DETAIL.items():
        if name in names:
            return category
    return None
