"""Two jobs across nodes that land on different Prometheus shards, through a sharded chain: the fleet
simulator -> two Prometheus servers in agent mode, each keeping the nodes that ``hashmod`` on ``node``
gives it -> remote write into VictoriaMetrics -> vmalert evaluating every recording and alert rule of the
generated file against it (recorded series written back) -> a real Alertmanager -> a webhook receiver.

Job ml/llm-pretrain: its rank on node-4 (shard 0) starves for input, its pods on the other nodes (both
shards) wait for it. Job research/moe-train: every rank hangs in a collective but the one on hnode-5
(shard 1). Only the culprits page, named by the global ruler; no waiting or hung node pages its own
comm verdict. One stack serves both cases. A plain Prometheus receives the same samples and evaluates the
same rule file: every series the rules record there, vmalert records from VictoriaMetrics (MetricsQL)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from devtools.artifacts import alerts
from exporter.sim.fleet import Fleet, FleetServer, FleetSpec
from scripts.sharded import SHARD_LABEL, NodeTarget, ShardedStack, shard_of
from scripts.stack import Page, PageReceiver
from tests.conftest import require_tool

SHARDS = 2
STRAGGLER = FleetSpec(nodes=6, gpus=2, straggler=4)
HANG = FleetSpec(nodes=6, gpus=2, hang=5, namespace="research", job="moe-train", prefix="hnode")
# every alert's `for`, shortened as in the single-Prometheus fleet test; longer than that test's 15 s
# because vmalert's recording rules see the rules before them one evaluation later (each result comes
# back through remote write, unlike rules of one Prometheus group), and the job evidence is five levels
# deep: the waiting nodes' comm verdicts must hold longer than it takes to appear
FOR = "30s"
INTERVAL = "2s"
# the recording rules' rate window, shorter than the shipped 5 minutes: over a series younger than its
# window Prometheus' rate extrapolates to the whole window (it reads low) and MetricsQL's divides by the
# time the samples cover; the comparison below runs once every series is older than this
WINDOW = "1m"
SETTLED = 100  # seconds of samples before the engines' recorded values are compared


@dataclass
class Sharded:
    stack: ShardedStack
    receiver: PageReceiver
    started: float

    def firing(self) -> list[Page]:
        return [p for p in self.receiver.snapshot() if p.status == "firing"]


def _nodes(spec: FleetSpec, port: int) -> list[NodeTarget]:
    return [
        NodeTarget(f"127.0.0.1:{port}", f"/nodes/{spec.node_name(i)}/metrics", spec.node_name(i))
        for i in range(1, spec.nodes + 1)
    ]


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> Iterator[Sharded]:
    for name in ("prometheus", "prometheus-alertmanager", "victoria-metrics", "vmalert"):
        require_tool(name)
    workdir = tmp_path_factory.mktemp("sharded")
    rules = workdir / "rules.yml"
    rules.write_text(alerts.render(for_override=FOR, window=WINDOW))
    fleets = [Fleet(STRAGGLER), Fleet(HANG)]
    servers = [FleetServer(f, 0) for f in fleets]
    receiver = PageReceiver()
    stack = ShardedStack(
        workdir / "stack",
        rules,
        _nodes(STRAGGLER, servers[0].port) + _nodes(HANG, servers[1].port),
        receiver.url,
        ksm=[(f"127.0.0.1:{s.port}", "/kube-state-metrics/metrics") for s in servers],
        shards=SHARDS,
        interval=INTERVAL,
        force_flush=True,
        compare=True,  # one Prometheus evaluating the same rule file over the same samples
    )
    try:
        deadline = time.monotonic() + 90
        while not all(f.ready() for f in fleets) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert all(f.ready() for f in fleets), "the fleets' simulated nodes did not start"
        stack.start()
        yield Sharded(stack, receiver, time.monotonic())
    finally:
        stack.stop()
        for server, fleet in zip(servers, fleets, strict=True):
            server.close()
            fleet.close()
        receiver.close()


def _shards_seen(s: Sharded, spec: FleetSpec) -> dict[str, str]:
    """node -> the shard its series came through, as the global store holds them."""
    deadline = time.monotonic() + 60
    seen: dict[str, str] = {}
    while time.monotonic() < deadline:
        result = s.stack.query(f'count by (node, {SHARD_LABEL}) (gpu_info{{node=~"{spec.prefix}-.*"}})')
        seen = {r["metric"]["node"]: r["metric"][SHARD_LABEL] for r in result}
        if len(seen) == spec.nodes:
            break
        time.sleep(1)
    return seen


def _page_then_quiet(s: Sharded, alertname: str, culprit: str) -> list[Page]:
    """Polls until ``alertname`` pages naming ``culprit``, then one more `for` and a margin (the other
    nodes' verdicts held all along: their pages would have come); every firing page at the end."""
    hold = float(FOR.removesuffix("s")) + 10
    paged_at = None
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        problems = s.stack.alive()
        assert not problems, f"exited: {problems}; see {s.stack.workdir / 'stack.log'}"
        named = [
            p
            for p in s.firing()
            if p.labels.get("alertname") == alertname and p.labels.get("node") == culprit
        ]
        if named and paged_at is None:
            paged_at = time.monotonic()
            print(f"{alertname} paged {paged_at - s.started:.0f} s after the stack started")
        if paged_at is not None and time.monotonic() > paged_at + hold:
            break
        time.sleep(1)
    assert paged_at is not None, (
        f"no {alertname} naming {culprit}; firing: {sorted({p.labels['alertname'] for p in s.firing()})}"
    )
    return s.firing()


def test_the_nodes_of_each_job_came_through_both_shards(sharded):
    for spec in (STRAGGLER, HANG):
        seen = _shards_seen(sharded, spec)
        expected = {
            spec.node_name(i): str(shard_of(spec.node_name(i), SHARDS)) for i in range(1, spec.nodes + 1)
        }
        assert seen == expected
        assert set(seen.values()) == {str(i) for i in range(SHARDS)}


@pytest.mark.slow
def test_a_straggler_on_one_shard_pages_once_from_the_global_ruler(sharded):
    spec, node = STRAGGLER, STRAGGLER.node_name(4)
    seen = _shards_seen(sharded, spec)
    waiting_elsewhere = [n for n, shard in seen.items() if shard != seen[node]]
    assert waiting_elsewhere, seen  # the straggler's peers wait on the other shard too
    pages = _page_then_quiet(sharded, "GpuJobStraggler", node)
    straggler = {"node": node, "pod": spec.pod_name(4), "namespace": "ml", "job_name": spec.job}
    job_pages = [p for p in pages if p.labels["alertname"] == "GpuJobStraggler"]
    for page in job_pages:
        assert straggler.items() <= page.labels.items(), page.labels
        assert f"Pod {spec.pod_name(4)} on {node} of job ml/{spec.job}" in page.annotations["description"]
    waiting = sharded.stack.query(
        f'sum(node_kind:gpu_bottleneck:count{{kind="comm_bound", node=~"{spec.prefix}-.*"}})'
    )
    assert waiting and float(waiting[0]["value"][1]) == spec.gpus * (spec.nodes - 1), waiting
    ours = [p.labels for p in pages if p.labels.get("node", "").startswith(f"{spec.prefix}-")]
    assert [p for p in ours if p.get("node") != node] == [], "a waiting node paged"  # any alert at all
    assert not [p for p in pages if p.labels["alertname"] == "GpuCommBound"]


@pytest.mark.slow
def test_a_job_wide_hang_across_shards_names_the_rank_outside_the_collective(sharded):
    spec, node = HANG, HANG.node_name(5)
    pages = _page_then_quiet(sharded, "GpuJobHang", node)
    hang = [p for p in pages if p.labels["alertname"] == "GpuJobHang"]
    assert [p.labels["pod"] for p in hang] == [spec.pod_name(5)], [p.labels for p in hang]
    assert {"node": node, "namespace": spec.namespace, "job_name": spec.job}.items() <= hang[0].labels.items()
    assert f"Pod {spec.pod_name(5)} on {node} is not in the collective" in hang[0].annotations["description"]
    hung = sharded.stack.query(
        f'sum(node_kind:gpu_bottleneck:count{{kind="comm_hang", node=~"{spec.prefix}-.*"}})'
    )
    assert hung and float(hung[0]["value"][1]) == spec.gpus * (spec.nodes - 1), hung
    # the hung nodes' own comm verdicts stay silent (their power far below TDP under a full
    # utilization reading is the symptom the classic threshold rules page on, as on one Prometheus)
    comm = [p.labels for p in pages if p.labels["alertname"] in ("GpuCommHang", "GpuCommBound")]
    assert [p for p in comm if p.get("node", "").startswith(f"{spec.prefix}-")] == [], comm


def test_the_global_ruler_records_what_one_prometheus_records_from_the_same_samples(sharded):
    """The one rule file on both engines: the same recorded series (names and label sets, the cost rules'
    included) and, for the shares and counts, the same values; rates nearly the same."""
    recorded = '{__name__=~".+:.+:.+"}'
    # the two engines evaluate a few seconds apart: with a short history every new sample moves a share a
    # lot, so the comparison waits for some history (the other tests of this stack take longer)
    time.sleep(max(0.0, sharded.started + SETTLED - time.monotonic()))
    deadline = time.monotonic() + 120
    while True:
        # each sees the series it has recorded in the last evaluations
        vm = {_key(r): float(r["value"][1]) for r in sharded.stack.query(recorded)}
        prom = {_key(r): float(r["value"][1]) for r in sharded.stack.prometheus.query(recorded)}
        names = {k[0] for k in prom}
        if {
            "namespace_job_pod:gpu_straggler:lost_share5m",
            "namespace_job_pod:gpu_hang:blamed",
            "namespace_job_state:gpu_cost_per_hour:rate5m",
            "namespace_state:gpu_cost_per_hour:rate5m",
        } <= names and (set(vm) == set(prom) or time.monotonic() > deadline):
            break
        time.sleep(2)
    assert sorted(set(prom) - set(vm)) == [], "recorded by Prometheus only"
    assert sorted(set(vm) - set(prom)) == [], "recorded by vmalert only"
    for key, value in prom.items():
        if any(key[0].endswith(s) for s in (":count", ":info", ":worst")):
            assert vm[key] == value, key
        elif "share" in key[0] or key[0].endswith(":blamed"):
            assert abs(vm[key] - value) < 0.05, (key, vm[key], value)
    # rates: the engines evaluate a second or two apart and MetricsQL's rate reads the sample before
    # the window where Prometheus' extrapolates; typically 1 % apart here, a state that just changed more
    rel = sorted(
        abs(vm[k] - v) / abs(v) for k, v in prom.items() if k[0].endswith(":rate5m") and abs(v) > 1e-6
    )
    assert len(rel) > 50 and rel[len(rel) // 2] < 0.05 and rel[-1] < 0.3, rel


def _key(result: dict) -> tuple[str, tuple[tuple[str, str], ...]]:
    labels = result["metric"]
    return labels["__name__"], tuple(sorted((k, v) for k, v in labels.items() if k != "__name__"))
