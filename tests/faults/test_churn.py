"""Pod churn: a new pod takes the GPUs every 10 s. Series stay bounded and old pods' series leave."""

from __future__ import annotations

from exporter.sim import parse_scenario
from exporter.sim.scenarios import POD_CHURN_S
from tests.faults.conftest import cycle, scrape

CHURNS = 60


def pod_labels(metrics: dict[str, list]) -> set[str]:
    return {s.labels["pod"] for samples in metrics.values() for s in samples if s.labels.get("pod")}


def test_pod_churn_keeps_series_bounded_and_old_pods_leave(make_node, faulty, clock):
    node = make_node("pod_churn", n_gpus=2)
    sampler, errors = faulty(node, pods=True, pod_resources_interval_s=1.0)
    counts, seen = [], set()
    step_s = POD_CHURN_S / 2  # two collections per pod
    for _ in range(2 * CHURNS):
        snap = cycle(sampler, clock, seconds=step_s)
        metrics = scrape(snap)
        counts.append(sum(len(samples) for samples in metrics.values()))
        pods = pod_labels(metrics)
        current = {p.name for p in node.current_pods()}
        assert pods <= current, f"series of ended pods: {pods - current}"
        seen |= pods
        assert len(snap.pod_shm_default) <= 1 and len(sampler.analyzer.gpus()) == 2
    assert len(seen) >= CHURNS - 2  # every generation was seen, and each left again
    settled = counts[10:]
    assert max(settled) - min(settled) <= 2 * len(snap.gpus), counts  # no growth with the pods
    assert max(counts[-20:]) <= max(counts[10:30])
    assert not {e for (src, e) in errors.snapshot() if e == "InternalError"}


def test_churn_is_a_scenario_parameter():
    assert parse_scenario("healthy:churn=30").effective_churn() == 30.0
    assert parse_scenario("pod_churn").effective_churn() == POD_CHURN_S
    assert parse_scenario("healthy").effective_churn() == 0.0
