"""The whole chain: simulated nodes -> exporter -> real Prometheus with the rules -> real Alertmanager
-> a webhook receiver inside the test. Each failure scenario delivers its page; healthy delivers none."""

from __future__ import annotations

import time

import pytest

from exporter.artifacts import alerts
from exporter.thresholds import ALERT_POLICIES
from scripts.stack import simulated_fleet
from tests.conftest import require_tool

POD = {"namespace": "ml", "pod": "llm-train-0"}  # the simulated pod that holds every GPU of a node

SCENARIOS = {
    # scenario name in the target label -> (--simulate, expected alert, expected labels)
    "starvation": (
        "data_starvation:gpus=1",
        "GpuDataStarvation",
        {"gpu": "1", "kind": "data_starvation", "cause": "cpu", **POD},
    ),
    "hang": ("comm_hang", "GpuCommHang", {"kind": "comm_hang", "cause": "all_ranks", **POD}),
    "comm_bound": ("comm_bound", "GpuCommBound", {"kind": "comm_bound", **POD}),
    # the verdict needs the second checkpoint pause: the slowest of the lot (about two minutes)
    "checkpoint": (
        "checkpoint_stall",
        "GpuDataStarvation",
        {"kind": "data_starvation", "cause": "checkpoint", **POD},
    ),
    "shm": (
        "shm_exhaustion:fill=40,shm_gib=16",
        "GpuShmNearlyFull",
        {"namespace": "ml", "pod": "llm-train-0", "volume": "dshm"},
    ),
    "thermal": (
        "thermal_throttle:gpus=1",
        "GpuThermalThrottling",
        {"gpu": "1", "kind": "thermal_throttle", **POD},
    ),
    # the node doctor's live checks: no fabric manager on an NVSwitch node (seed 003), a node-level page
    "no_fabric": ("no_fabric_manager", "GpuNodeCheckFailed", {"check": "fabric", "detail": "not_started"}),
    "healthy": ("healthy", None, {}),
}


@pytest.mark.slow
def test_each_failure_pages_with_its_labels_and_healthy_pages_nothing(tmp_path):
    require_tool("prometheus")
    require_tool("promtool")
    require_tool("prometheus-alertmanager")
    rules = tmp_path / "rules.yml"
    rules.write_text(alerts.render(for_override="0s"))  # the verdicts carry their own hold times
    scenarios = {name: simulate for name, (simulate, _, _) in SCENARIOS.items()}
    with simulated_fleet(tmp_path, rules, scenarios, label="scenario") as (_, receiver):
        wanted = {name: exp for name, (_, exp, _) in SCENARIOS.items() if exp}
        start = time.monotonic()
        deadline = start + 300  # the checkpoint and hang verdicts need about two minutes of evidence
        paged: dict[str, float] = {}  # scenario -> seconds until its page arrived
        while time.monotonic() < deadline and set(paged) < set(wanted):
            for p in receiver.snapshot():
                name = p.labels.get("scenario")
                if p.status == "firing" and p.labels.get("alertname") == wanted.get(name):
                    paged.setdefault(name, time.monotonic() - start)
            time.sleep(2)
        print("paged after (s):", {name: round(t) for name, t in sorted(paged.items(), key=lambda i: i[1])})
        pages = receiver.snapshot()
        for name, (_, expected, labels) in SCENARIOS.items():
            mine = [p for p in pages if p.labels.get("scenario") == name and p.status == "firing"]
            if expected is None:
                assert mine == [], f"healthy node paged: {[p.labels for p in mine]}"
                continue
            hits = [p for p in mine if p.labels["alertname"] == expected]
            assert hits, f"{name}: no {expected} page; got {[p.labels.get('alertname') for p in mine]}"
            for page in hits:  # every page of the alert on that node, not only the first, is the right one
                assert labels.items() <= page.labels.items(), page.labels
                assert page.labels["severity"] == ALERT_POLICIES[expected].severity.value
                assert page.annotations["summary"]
                assert page.annotations["runbook_url"].endswith(f"/{expected}.md")
                description = page.annotations["description"]
                assert "127.0.0.1" in description  # names the node (the target here)...
                if "pod" in labels:  # ...and the pod, for a GPU's alert (a node check has none)
                    assert "(pod ml/llm-train-0)" in description
