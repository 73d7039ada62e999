"""The threshold table: every number the analysis, the alert rules, the dashboards and the Helm values
use, each with the reason it has that value. Generated artifacts read this module; nothing else may
type these numbers again.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Threshold:
    key: str
    value: float
    unit: str  # ratio, celsius, seconds, watts, bytes, count
    area: str
    reason: str


_TABLE: dict[str, Threshold] = {}


def _t(key: str, value: float, unit: str, area: str, reason: str) -> Threshold:
    entry = Threshold(key, value, unit, area, reason)
    if key in _TABLE:
        raise ValueError(f"threshold {key} defined twice")
    _TABLE[key] = entry
    return entry


UTIL_IDLE_LINE = _t(
    "util_idle_line",
    0.10,
    "ratio",
    "GPU",
    "A driver utilization sample below 10 % means no kernel ran for most of its sample period: the GPU "
    "was waiting, not working. Samples are whole percents over 1/6-1 s periods, so a real gap reads 0-10 %.",
)


# XID codes that mean trouble with the GPU or its driver rather than with a user's program. Their
# counters are exported from zero, so that increase() sees the first event.
CRITICAL_XIDS: dict[int, str] = {
    46: "GPU stopped processing",
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    63: "ECC page retirement / row remapping event",
    64: "ECC page retirement / row remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}


def table() -> dict[str, Threshold]:
    """Every threshold, by key."""
    return dict(_TABLE)
