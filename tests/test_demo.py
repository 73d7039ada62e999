"""The demo's plan and its pages: what a new user reads while `make demo` runs."""

from __future__ import annotations

from exporter.analysis.kinds import KINDS
from exporter.sim.scenarios import SHORT_TOUR, tour_seconds
from scripts.demo import SHOWS, plan, show_notification
from scripts.stack import Notification, Page


def test_the_short_tour_pages_every_phase_and_lasts_about_ten_minutes():
    lines = plan("short_tour", shortened=True)
    faults = [name for name, _ in SHORT_TOUR if name != "healthy"]
    assert faults and all(name in SHOWS for name in faults)
    for name in faults:
        line = next(line for line in lines if f" {name} " in line)
        assert f"pages {KINDS[SHOWS[name]].alert}" in line
    assert 8 * 60 <= tour_seconds("short_tour") <= 12 * 60
    assert "shortened to 30s" in lines[-1]
    assert lines[0].startswith("  00:00")


def test_one_notification_is_one_block_naming_every_gpu_and_the_pod(capsys):
    pages = [
        Page(
            "firing",
            {
                "alertname": "GpuCommHang",
                "severity": "critical",
                "node": "sim-node-1",
                "gpu": str(g),
                "namespace": "ml",
                "pod": "llm-train-0",
                "cause": "all_ranks",
            },
            {
                "summary": "GPU is stuck in a collective (NCCL hang).",
                "runbook_url": "https://x/GpuCommHang.md",
            },
        )
        for g in (3, 0, 1, 2)
    ]
    show_notification(Notification("firing", {"alertname": "GpuCommHang", "node": "sim-node-1"}, pages))
    show_notification(Notification("resolved", {}, [Page("resolved", pages[0].labels, {})]))
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 4  # firing: head, summary, runbook; resolved: one line
    assert (
        "PAGE FIRING" in out[0] and "GpuCommHang on sim-node-1 GPUs 0, 1, 2, 3 (pod ml/llm-train-0)" in out[0]
    )
    assert "cause all_ranks" in out[0] and out[2].strip() == "runbook: https://x/GpuCommHang.md"
    assert "PAGE RESOLVED" in out[3] and "GPU 3" in out[3]
