"""The whole chain: simulated nodes -> exporter -> real Prometheus with the rules -> real Alertmanager
-> a webhook receiver inside the test. Each failure scenario delivers its page; healthy delivers none."""

from __future__ import annotations

import time

import pytest

from devtools.artifacts import alerts
from exporter.analysis.kinds import KINDS
from exporter.offline.promhistory.history import Request, replay_prometheus
from exporter.offline.replay import ReplayResult
from exporter.policy.thresholds import ALERT_POLICIES
from scripts.stack import simulated_fleet
from tests.conftest import require_tool

POD = {"namespace": "ml", "pod": "llm-train-0"}  # the simulated pod that holds every GPU of a node
# the starving pod of GPU 0 shared by three pods (time-slicing or MPS): its page's labels
SHARED_STARVING = {
    "gpu": "0",
    "kind": "data_starvation",
    "cause": "cpu",
    "namespace": "research",
    "pod": "shared-starving",
}

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
    # the node doctor's live checks: no fabric manager on an NVSwitch node, a node-level page
    "no_fabric": ("no_fabric_manager", "GpuNodeCheckFailed", {"check": "fabric", "detail": "not_started"}),
    # a deleted pod's process lives on, holding GPU 1's memory: the page names its PID and its last pod
    "zombie": (
        "zombie_process",
        "GpuMemoryUnowned",
        {"gpu": "1", "pid": "4252", "reason": "pod_gone", "namespace": "ml", "pod": "llm-train-prev"},
    ),
    # GPU 0 shared by three pods (time-slicing replicas): the starving pod pages as itself, once; its GPU
    # and the two busy pods page nothing
    "time_slicing": (
        "time_slicing",
        "GpuDataStarvation",
        SHARED_STARVING,
    ),
    # the same three pods through MPS: their processes are the MPS server's clients, sampled apart; the
    # starving one pages as itself, once, and the server (a host process of no pod, holding memory of its
    # own) is the node's daemon, never memory nobody owns
    "mps": (
        "mps",
        "GpuDataStarvation",
        SHARED_STARVING,
    ),
    # GPU 0 in MIG mode (3g + 2g + 1g + 1g): the starving instance pages as itself, with its GPU instance
    # and its pod; the busy one, the free one and the GPU page nothing (the idle one's idle_allocated needs
    # ten minutes: longer than this test, so its ledger is checked below)
    "mig": (
        "mig_h100",
        "GpuDataStarvation",
        {
            "gpu": "0",
            "kind": "data_starvation",
            "cause": "cpu",
            "mig_instance": "3",
            "namespace": "research",
            "pod": "mig-starving",
        },
    ),
    # its 4g.40gb GPU instance split into two compute instances held by two busy pods: each has series of
    # its own (mig_compute_instance) and neither pages; the starving 2g.20gb beside them does
    "mig_compute": (
        "mig_compute_h100",
        "GpuDataStarvation",
        {
            "gpu": "0",
            "kind": "data_starvation",
            "cause": "cpu",
            "mig_instance": "5",
            "namespace": "research",
            "pod": "mig-starving",
        },
    ),
    "healthy": ("healthy", None, {}),
    # with the pods' logs read: the hung job's log stops and confirms the hang early; the same NVML
    # picture with lines flowing (an idle tensor-parallel server) pages nothing
    "hang_logs": ("comm_hang", "GpuCommHang", {"kind": "comm_hang", "cause": "no_progress", **POD}),
    "serving": ("comm_hang:logs=flow", None, {}),
    # a vLLM pod (its log's engine stats) idling between bursts of requests pages no starvation; the same
    # pod on too few CPU cores, requests queued while its GPUs idle, is starved, for the CPU
    "vllm": ("serving", None, {}),
    # the other work that shares a fleet with training, judged as what it is (its pod's name, a pipeline's
    # turns): no alert of the rules file, the classic table's included, pages warning or critical on it
    "evaluation": ("evaluation", None, {}),
    "pipeline": ("pipeline", None, {}),
    "notebook": ("notebook", None, {}),
    "vllm_starved": (
        "serving_starved",
        "GpuDataStarvation",
        {"kind": "data_starvation", "cause": "cpu", "namespace": "ml", "pod": "vllm-llama-8b-0"},
    ),
}
ONLY = (
    "zombie",
    "time_slicing",
    "mps",
    "mig",
    "mig_compute",
)  # nodes whose one fault must page nothing besides its own alert
# an idle tensor-parallel server seen as a hang's NVML picture with its log flowing: busy at low power now
# and then, which the raw-signal rules report (nothing says it is a server but its log's progress); what it
# must not get is a verdict's page
SERVERS = ("serving",)
# work that is not training, its class known live: no warning or critical page from any alert (info, such
# as the idle capacity of a server without requests, may come)
OTHER_WORK = ("vllm", "evaluation", "pipeline", "notebook")
# on: the simulated pods' logs
POD_LOGS = {name: ["--pod-logs", "on"] for name in ("hang_logs", "serving", "vllm", "vllm_starved")}
# the other work's nodes sample once a second (they judge classes, not timings: the shares above are
# measured on a machine with two cores), the layer split on three GPUs, the fewest that take turns
POD_LOGS["pipeline"] = ["--sim-gpus", "3", "--interval", "1"]
POD_LOGS["evaluation"] = POD_LOGS["notebook"] = ["--interval", "1"]
VERDICT_ALERTS = {kind.alert for kind in KINDS.values()}
# the alerts on the verdicts themselves (not on raw signals) quote when the loss began
ONSET_ALERTS = {kind.alert for kind in KINDS.values() if kind.text is not None}


@pytest.mark.slow
def test_each_failure_pages_with_its_labels_and_healthy_pages_nothing(tmp_path):
    require_tool("prometheus")
    require_tool("promtool")
    require_tool("prometheus-alertmanager")
    rules = tmp_path / "rules.yml"
    rules.write_text(alerts.render(for_override="0s"))  # the verdicts carry their own hold times
    scenarios = {name: simulate for name, (simulate, _, _) in SCENARIOS.items()}
    with simulated_fleet(tmp_path, rules, scenarios, label="scenario", extra_args=POD_LOGS) as (
        stack,
        receiver,
    ):
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
        assert paged["hang_logs"] < paged["hang"], "a log that stops must confirm the hang sooner"
        pages = receiver.snapshot()
        for name, (_, expected, labels) in SCENARIOS.items():
            mine = [p for p in pages if p.labels.get("scenario") == name and p.status == "firing"]
            if expected is None:
                mine = [p for p in mine if name not in SERVERS or p.labels["alertname"] in VERDICT_ALERTS]
                if name in OTHER_WORK:
                    mine = [p for p in mine if p.labels.get("severity") in ("warning", "critical")]
                assert mine == [], f"{name} node paged: {[p.labels for p in mine]}"
                continue
            hits = [p for p in mine if p.labels["alertname"] == expected]
            if name in ONLY:
                assert {p.labels["alertname"] for p in mine} == {expected}, [p.labels for p in mine]
                assert len(hits) == 1, [p.labels for p in hits]  # one page: one pod, one GPU
            assert hits, f"{name}: no {expected} page; got {[p.labels.get('alertname') for p in mine]}"
            for page in hits:  # every page of the alert on that node, not only the first, is the right one
                assert labels.items() <= page.labels.items(), page.labels
                assert page.labels["severity"] == ALERT_POLICIES[expected].severity.value
                assert page.annotations["summary"]
                assert page.annotations["runbook_url"].endswith(f"/{expected}.md")
                description = page.annotations["description"]
                assert "127.0.0.1" in description  # names the node (the target here)...
                if "pod" in labels:  # ...and the pod, for a GPU's alert (a node check has none)
                    assert f"(pod {labels['namespace']}/{labels['pod']})" in description
                if expected in ONSET_ALERTS:  # ...and when the loss began (the exporter's onset series)
                    assert "The loss began at 20" in description, description
        # the time-sliced (and MPS) pods' shares of GPU 0 sum to its wall time (within the first slow read's
        # seconds); the MPS server has no share of its own
        for name in ("time_slicing", "mps"):
            shares = stack.query(f'sum(gpu_pod_time_seconds_total{{scenario="{name}"}}) by (pod)')
            pods = {s["metric"]["pod"] for s in shares}
            assert pods == {"shared-busy-a", "shared-busy-b", "shared-starving"}, (name, pods)
            (gpu,) = stack.query(f'sum(gpu_time_seconds_total{{scenario="{name}", gpu="0"}})')
            total = sum(float(s["value"][1]) for s in shares)
            assert total == pytest.approx(float(gpu["value"][1]), rel=0.05), (name, total, gpu)
        assert stack.query('gpu_memory_unowned_bytes{scenario="mps"}') == []  # the server is no zombie
        # the compute instances of one GPU instance: a ledger each, at its own 2 of the GPU's 7 slices
        by = "mig_instance, mig_compute_instance, pod"
        split = stack.query(f'sum(gpu_mig_time_seconds_total{{scenario="mig_compute"}}) by ({by})')
        got = {
            (
                s["metric"]["mig_instance"],
                s["metric"].get("mig_compute_instance", ""),
                s["metric"].get("pod", ""),
            )
            for s in split
        }
        assert got == {
            ("1", "0", "mig-ci-a"),
            ("1", "1", "mig-ci-b"),
            ("5", "", "mig-starving"),
            ("13", "", ""),
        }
        seconds = {s["metric"].get("pod", ""): float(s["value"][1]) for s in split}
        assert seconds["mig-ci-a"] == pytest.approx(seconds["mig-starving"], rel=0.05), seconds
        assert seconds["mig-ci-b"] == pytest.approx(seconds["mig-starving"], rel=0.05), seconds
        # the MIG instances' ledgers sum to GPU 0's wall time (every slice given out); the idle one idles
        instances = stack.query('sum(gpu_mig_time_seconds_total{scenario="mig"}) by (mig_instance, pod)')
        assert {(s["metric"]["mig_instance"], s["metric"].get("pod", "")) for s in instances} == {
            ("2", "mig-busy"),
            ("3", "mig-starving"),
            ("9", "mig-idle"),
            ("10", ""),
        }
        (gpu,) = stack.query('sum(gpu_time_seconds_total{scenario="mig", gpu="0"})')
        total = sum(float(s["value"][1]) for s in instances)
        assert total == pytest.approx(float(gpu["value"][1]), rel=0.05), (total, gpu)
        idle = stack.query('sum(gpu_mig_time_seconds_total{scenario="mig", pod="mig-idle", state="idle"})')
        held = stack.query('sum(gpu_mig_time_seconds_total{scenario="mig", pod="mig-idle"})')
        assert float(idle[0]["value"][1]) > 0.9 * float(held[0]["value"][1])
        # the vLLM pods are judged as inference servers, as their logs say (the dashboards' workload table)
        for name in ("vllm", "vllm_starved"):
            series = stack.query(f'gpu_workload_class{{scenario="{name}"}}')
            classes = {(s["metric"]["workload"], s["metric"]["source"]) for s in series}
            assert classes == {("serving", "log")}, f"{name}: {classes}"
        _read_back(stack, time.time() - (time.monotonic() - start) - 30)


def _read_back(stack, since: float) -> None:
    """replay --prometheus on the stack's own Prometheus: the exporter's ledger and verdicts are read
    back as it judged them (not recomputed from the 1 s samples), pods' shares and MIG instances apart."""
    url = f"http://127.0.0.1:{stack.prometheus_port}"

    def read(scenario: str) -> ReplayResult:
        request = Request(url, since, time.time(), selector=f'scenario="{scenario}"')
        result = replay_prometheus(request, prices=None)
        assert result.fleet and result.fleet["read"]["read_back_nodes"] == 1
        return result

    def episodes(result: ReplayResult) -> set[tuple[str, str, str]]:
        return {(e.gpu, e.kind, e.cause) for e in result.episodes}

    # every target is on 127.0.0.1: the scenario's selector makes it one node
    assert ("127.0.0.1/1", "data_starvation", "cpu") in episodes(read("starvation"))
    assert episodes(read("healthy")) == set()
    shared = read("time_slicing")
    assert episodes(shared) == {("127.0.0.1/0/research/shared-starving", "data_starvation", "cpu")}
    pods = {job for job in shared.job_ledger if job.startswith("research/shared-")}
    assert pods == {"research/shared-busy-a", "research/shared-busy-b", "research/shared-starving"}
    assert episodes(read("mig")) == {("127.0.0.1/0/mig3", "data_starvation", "cpu")}
    # under MPS, as under time-slicing: the starving pod's share, and nothing of the MPS server
    mps = read("mps")
    assert episodes(mps) == {("127.0.0.1/0/research/shared-starving", "data_starvation", "cpu")}
    pods = {job for job in mps.job_ledger if job.startswith("research/")}
    assert pods == {"research/shared-busy-a", "research/shared-busy-b", "research/shared-starving"}
    # two compute instances of one GPU instance: a ledger each, read back apart; only the 2g.20gb starves
    split = read("mig_compute")
    assert episodes(split) == {("127.0.0.1/0/mig5", "data_starvation", "cpu")}
    jobs = {job.rsplit("/", 1)[-1] for job in split.job_ledger}
    assert {"mig-ci-a", "mig-ci-b", "mig-starving"} <= jobs, jobs
