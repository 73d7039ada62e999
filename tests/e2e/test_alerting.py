"""The whole chain: simulated nodes -> exporter -> real Prometheus with the rules -> real Alertmanager
-> a webhook receiver inside the test. Each failure scenario delivers its page; healthy delivers none."""

from __future__ import annotations

import time

import pytest

from exporter.artifacts import alerts
from scripts.stack import simulated_fleet
from tests.conftest import require_tool

SCENARIOS = {
    # scenario name in the target label -> (--simulate, expected alert, expected labels)
    "starvation": (
        "data_starvation:gpus=1",
        "GpuDataStarvation",
        {"gpu": "1", "kind": "data_starvation", "cause": "cpu"},
    ),
    "hang": ("comm_hang", "GpuCommHang", {"kind": "comm_hang", "cause": "all_ranks"}),
    "shm": (
        "shm_exhaustion:fill=40,shm_gib=16",
        "GpuShmNearlyFull",
        {"namespace": "ml", "pod": "llm-train-0", "volume": "dshm"},
    ),
    "thermal": ("thermal_throttle:gpus=1", "GpuThermalThrottling", {"gpu": "1", "kind": "thermal_throttle"}),
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
        deadline = time.monotonic() + 300  # the hang verdict alone needs two minutes of evidence
        while time.monotonic() < deadline:
            got = {
                p.labels.get("scenario")
                for p in receiver.snapshot()
                if p.status == "firing" and p.labels.get("alertname") == wanted.get(p.labels.get("scenario"))
            }
            if got >= set(wanted):
                break
            time.sleep(2)
        pages = receiver.snapshot()
        for name, (_, expected, labels) in SCENARIOS.items():
            mine = [p for p in pages if p.labels.get("scenario") == name and p.status == "firing"]
            if expected is None:
                assert mine == [], f"healthy node paged: {[p.labels for p in mine]}"
                continue
            hits = [p for p in mine if p.labels["alertname"] == expected]
            assert hits, f"{name}: no {expected} page; got {[p.labels.get('alertname') for p in mine]}"
            page = hits[0]
            assert labels.items() <= page.labels.items(), page.labels
            assert page.labels["severity"] in ("critical", "warning", "info")
            assert page.annotations["summary"] and page.annotations["runbook_url"].endswith(f"/{expected}.md")
            assert "127.0.0.1" in page.annotations["description"]  # names the node (the target here)
