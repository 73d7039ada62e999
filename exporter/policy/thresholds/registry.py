"""The registry of the threshold table: what an entry is (a number with its unit and reason, or a policy
word with its reason), the one table every section module registers into, and its readers."""

from __future__ import annotations

from dataclasses import dataclass

GiB = 1 << 30


@dataclass(frozen=True)
class Threshold:
    key: str
    value: float
    unit: str
    reason: str


@dataclass(frozen=True)
class Choice:
    """A policy word rather than a number (an alert's severity), with its reason."""

    key: str
    value: str
    reason: str


_TABLE: dict[str, Threshold] = {}
_CHOICES: dict[str, Choice] = {}


def _t(key: str, value: float, unit: str, reason: str) -> Threshold:
    if key in _TABLE:
        raise ValueError(f"threshold {key} defined twice")
    entry = _TABLE[key] = Threshold(key, value, unit, reason)
    return entry


def _c(key: str, value: str, reason: str) -> Choice:
    if key in _CHOICES or key in _TABLE:
        raise ValueError(f"policy {key} defined twice")
    entry = _CHOICES[key] = Choice(key, value, reason)
    return entry


def table() -> dict[str, Threshold]:
    """Every threshold, by key."""
    return dict(_TABLE)


def choices() -> dict[str, Choice]:
    """Every policy word (alert severities), by key."""
    return dict(_CHOICES)
