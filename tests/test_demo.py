"""The demo's plan and its pages: what a new user reads while `make demo` runs. One tour pages what its
plan promises, in its phases, and nothing else; the demo stops after it; nothing is left behind however
the demo ends (at the tour's end, on Ctrl-C, on an error)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from exporter.policy.thresholds import ALERT_POLICIES
from exporter.sim.scenarios import SHORT_TOUR, tour_seconds
from scripts.demo import DEMO_FOR_S, PAGES, Pager, demo_rules, paged_alerts, plan
from scripts.stack import Notification, Page, PageReceiver, Stack, free_port
from tests.conftest import REPO, default_signals, require_tool


def test_the_short_tour_pages_every_phase_and_lasts_about_thirteen_minutes():
    lines = plan("short_tour", shortened=True)
    faults = [name for name, _ in SHORT_TOUR if name != "healthy"]
    assert faults and all(name in PAGES for name in faults)
    for name in faults:
        line = next(line for line in lines if f" {name} " in line)
        assert line.endswith(f"pages {PAGES[name]}")
    assert 8 * 60 <= tour_seconds("short_tour") <= 13 * 60
    assert "the tour ends (--loop starts it over)" in lines[-1] and "shortened to 30s" in lines[-1]
    assert "the tour starts over" in plan("short_tour", shortened=True, loop=True)[-1]
    assert lines[0].startswith("  00:00")


def test_the_demo_rules_shorten_only_the_alerts_the_plan_promises():
    rules = {
        r["alert"]: r.get("for", "0s")
        for g in yaml.safe_load(demo_rules("short_tour"))["groups"]
        for r in g["rules"]
        if "alert" in r
    }
    promised = paged_alerts("short_tour")
    for name, policy in ALERT_POLICIES.items():
        shipped = policy.for_text
        if name in promised and policy.for_.value > DEMO_FOR_S:
            assert rules[name] == f"{DEMO_FOR_S}s", name
        else:  # the raw-signal rules keep the hold that keeps them from paging during a short phase
            assert rules[name] == shipped, name
    assert rules["GpuUtilizationLow"] == ALERT_POLICIES["GpuUtilizationLow"].for_text != "30s"


@pytest.mark.parametrize("full", [False, True], ids=["short-tour", "full-tour"])
def test_the_demo_pages_link_runbooks_that_open_on_this_checkout(full):
    tour = "tour" if full else "short_tour"
    rules = [r for g in yaml.safe_load(demo_rules(tour, full=full))["groups"] for r in g["rules"]]
    alerting = [r for r in rules if "alert" in r]
    assert len(alerting) == len(ALERT_POLICIES)
    for rule in alerting:
        url = urllib.parse.urlparse(rule["annotations"]["runbook_url"])
        assert url.scheme == "file", rule["annotations"]["runbook_url"]
        page = Path(urllib.request.url2pathname(url.path))
        assert page.parent == REPO / "docs" / "runbooks"
        assert page.read_text().startswith(f"# {rule['alert']}\n")
        if full:  # the full tour keeps every hold as shipped
            assert rule.get("for", "0s") == ALERT_POLICIES[rule["alert"]].for_text


def _page(gpu: int, status: str = "firing") -> Page:
    labels = {
        "alertname": "GpuCommHang",
        "severity": "critical",
        "node": "sim-node-1",
        "gpu": str(gpu),
        "namespace": "ml",
        "pod": "llm-train-0",
        "cause": "all_ranks",
    }
    annotations = {
        "summary": "GPU is stuck in a collective (NCCL hang).",
        "runbook_url": "https://x/GpuCommHang.md",
    }
    return Page(status, labels, annotations)


def test_one_alert_on_one_node_is_one_page_and_its_updates_are_not_new_pages(capsys):
    pager, group = Pager(), {"alertname": "GpuCommHang", "node": "sim-node-1"}
    pager.show(Notification("firing", group, [_page(g) for g in (3, 0, 1, 2)]))
    # Alertmanager notifies the group again as GPUs join and leave: the page stays one page
    pager.show(Notification("firing", group, [_page(g) for g in (0, 1, 2, 3, 4)]))
    pager.show(Notification("firing", group, [_page(g) for g in (0, 1, 2, 3, 4)]))
    pager.show(Notification("firing", group, [_page(0, "resolved"), *(_page(g) for g in (1, 2, 3, 4))]))
    pager.show(Notification("resolved", group, [_page(g, "resolved") for g in range(5)]))
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 6, out  # firing: head, summary, runbook; a GPU joins; one resolves; the rest
    assert (
        "PAGE FIRING" in out[0] and "GpuCommHang on sim-node-1 GPUs 0, 1, 2, 3 (pod ml/llm-train-0)" in out[0]
    )
    assert "cause all_ranks" in out[0] and out[2].strip() == "runbook: https://x/GpuCommHang.md"
    assert "PAGE UPDATE" in out[3] and "GPU 4 " in out[3] and "joins the page" in out[3]
    assert "PAGE RESOLVED" in out[4] and "GPU 0 " in out[4]
    assert "PAGE RESOLVED" in out[5] and "GPUs 1, 2, 3, 4 " in out[5]
    assert sum("PAGE FIRING" in line for line in out) == 1


def test_a_node_level_critical_alert_silences_no_other_alert_of_its_node(tmp_path):
    """The demo's Alertmanager silences a GPU's warnings under a critical alert on that GPU, and nothing
    else: GpuShmFull (no gpu label) leaves the node's other warnings paging."""
    require_tool("prometheus")
    require_tool("prometheus-alertmanager")
    rules = tmp_path / "rules.yml"
    rules.write_text("groups: []\n")
    receiver = PageReceiver()
    stack = Stack(tmp_path / "stack", rules, [], receiver.url)
    node = {"instance": "n1:9612", "node": "n1"}
    alerts = [
        {"alertname": "GpuShmFull", "severity": "critical", "mountpoint": "/dev/shm"},
        {"alertname": "GpuShmNearlyFull", "severity": "warning", "mountpoint": "/dev/shm"},
        {"alertname": "GpuPodShmDefault", "severity": "warning", "pod": "p"},
        {"alertname": "GpuCommHang", "severity": "critical", "gpu": "1"},
        {"alertname": "GpuPowerFarBelowTdp", "severity": "warning", "gpu": "1"},
        {"alertname": "GpuPowerFarBelowTdp", "severity": "warning", "gpu": "2"},
    ]
    try:
        stack.start()
        body = json.dumps([{"labels": {**node, **a}} for a in alerts]).encode()
        url = f"http://127.0.0.1:{stack.alertmanager_port}/api/v2/alerts"
        urllib.request.urlopen(
            urllib.request.Request(url, body, {"Content-Type": "application/json"}), timeout=10
        )
        # Alertmanager lists an alert before its inhibitor has marked it: wait for the marks to settle
        expected = {("GpuShmNearlyFull", ""), ("GpuPowerFarBelowTdp", "1")}
        deadline, states, suppressed = time.monotonic() + 30, {}, set()
        while time.monotonic() < deadline and (len(states) < len(alerts) or suppressed != expected):
            with urllib.request.urlopen(url, timeout=10) as r:
                states = {
                    (a["labels"]["alertname"], a["labels"].get("gpu", "")): a["status"]["state"]
                    for a in json.load(r)
                }
            suppressed = {key for key, state in states.items() if state == "suppressed"}
            time.sleep(0.2)
    finally:
        stack.stop()
        receiver.close()
    assert len(states) == len(alerts), states
    assert suppressed == expected, states


class Demo:
    """scripts/demo.py as a user runs it, with its own temporary folder, its output collected."""

    def __init__(self, *args: str, port: int | None = None) -> None:
        # a short path: the simulated kubelet's socket must fit a unix socket address
        self.tmp = Path(tempfile.mkdtemp(prefix="gbe-test-"))
        self.port = port or free_port()
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-u", "scripts/demo.py", "--port", str(self.port), *args],
            cwd=REPO,
            env={**os.environ, "TMPDIR": str(self.tmp)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own process group, as a terminal gives it
            preexec_fn=default_signals,  # and Ctrl-C's default, however the suite was started
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            hit = next((line for line in list(self.lines) if text in line), None)
            if hit is not None:
                return hit
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError(f"the demo never said {text!r}:\n" + "\n".join(self.lines[-30:]))

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            raise

    def left_behind(self) -> list[str]:
        return sorted(p.name for p in self.tmp.iterdir())

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


def _refused(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_ctrl_c_stops_everything_and_leaves_nothing_behind():
    require_tool("prometheus")
    require_tool("prometheus-alertmanager")
    demo = Demo()
    try:
        prometheus = demo.wait_for("prometheus:", 90)
        demo.wait_for("Ctrl-C stops the demo", 30)
        assert demo.left_behind(), "the demo keeps its files in the temporary folder it was given"
        os.killpg(demo.proc.pid, signal.SIGINT)  # what a terminal sends on Ctrl-C
        assert demo.wait(60) == 0
        assert demo.lines[-1] == "stopped."
        assert demo.left_behind() == []
        assert _refused(demo.port)
        assert _refused(int(re.search(r":(\d+)/alerts", prometheus).group(1)))
    finally:
        demo.close()


def test_an_error_is_one_line_and_leaves_nothing_behind():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        demo = Demo("--exporter-only", port=taken.getsockname()[1])
        try:
            assert demo.wait(90) == 1
            errors = [line for line in demo.lines if "the demo stopped:" in line]
            assert len(errors) == 1 and "Address already in use" in errors[0], demo.lines[-10:]
            assert demo.lines[-1] == "stopped."
            assert demo.left_behind() == []
        finally:
            demo.close()


TOUR_TEST = "test_one_tour_pages_what_its_plan_promises_in_its_phases_then_stops"


def start_tour() -> Demo:
    """The whole tour takes thirteen minutes of wall time, nearly all of it waiting: tests/conftest.py starts
    it as soon as the test is collected, so it runs beside the rest of the suite, and the test (run
    last) only reads what it printed."""
    return Demo()


@pytest.mark.slow
def test_one_tour_pages_what_its_plan_promises_in_its_phases_then_stops(request):
    """The whole short tour (about thirteen minutes), as `make demo` runs it: each fault phase pages its
    alert once, while the node is in that phase; nothing else pages; the demo ends by itself and
    removes its files."""
    require_tool("prometheus")
    require_tool("prometheus-alertmanager")
    demo = getattr(request.config, "demo_tour", None) or start_tour()
    try:
        # the demo says where the exporter is once it is ready; the tour may be over by now (it runs
        # beside the suite), so this reads what it printed rather than asking the exporter
        demo.wait_for(f"exporter:      http://localhost:{demo.port}/metrics", 90)
        assert demo.wait(tour_seconds("short_tour") + 180) == 0
        assert demo.left_behind() == []
    finally:
        demo.close()
    out = "\n".join(demo.lines)
    print("\n".join(line for line in demo.lines if re.search(r"PAGE|node now:|tour is over", line)))
    phase, fired, updates = "", [], []
    for line in demo.lines:
        if m := re.search(r"the simulated node now: (\w+)", line):
            phase = m.group(1)
        elif m := re.search(r"PAGE (FIRING|UPDATE) +\w+ +(\w+) ", line):
            (fired if m.group(1) == "FIRING" else updates).append((phase, m.group(2)))
    promised = [(name, PAGES[name]) for name, _ in SHORT_TOUR if name in PAGES]
    assert fired == promised, out
    assert set(updates) <= set(promised), out  # GPUs joining a page late, in its phase
    n = len(paged_alerts("short_tour"))
    assert f"the tour is over: paged {n} of the {n} alerts the plan promised." in out
    assert demo.lines[-1] == "stopped."
