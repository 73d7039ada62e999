"""The time ledger's PromQL, shared by the dashboards and the demo (which prints the ledger from its
Prometheus): plain strings, no Grafana SDK, so the demo runs on the exporter's own dependencies."""

from __future__ import annotations

LEDGER_METRIC = "gpu_time_seconds_total"


def ledger_rates(selector: str, by: str) -> str:
    """Seconds per second of the ledger's time, summed by ``by`` (everything when empty)."""
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} (rate({LEDGER_METRIC}{{{selector}}}[$__rate_interval]))"


def ledger_share(selector: str, by: str = "") -> str:
    """The share (0-1) of the GPUs' time in each state per ``by`` group: the states add up to 1."""
    keys = f"{by}, state" if by else "state"
    return f"{ledger_rates(selector, keys)} / ignoring (state) group_left {ledger_rates(selector, by)}"
