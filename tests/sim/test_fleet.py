"""The fleet simulator's parts that need no process: a node waiting for a straggler elsewhere, the
per-node identities it gives one role's snapshot, kube-state-metrics' text and the scrape jobs."""

from __future__ import annotations

import yaml
from prometheus_client.parser import text_string_to_metric_families

from exporter.serve.metrics import Renderer
from exporter.sim.fleet import FleetSpec, for_node, scrape_configs, stepped_snapshot

SPEC = FleetSpec(nodes=40, gpus=2, straggler=17)


def test_a_node_waiting_for_a_remote_straggler_looks_comm_bound_to_its_own_exporter():
    snap = stepped_snapshot("remote_straggler", n_gpus=2, seconds=150)
    for view in snap.gpus:
        held = sum(view.ledger.values())
        assert view.ledger["comm_wait"] / held > 0.3 and view.ledger["input_wait"] / held < 0.05
        # what the job rules exist for: locally it can only say comm-bound
        assert [kind for kind, state in view.verdicts.items() if state.firing] == ["comm_bound"]


def test_each_fleet_node_renders_its_own_gpus_and_pod_of_the_job():
    snap = stepped_snapshot("healthy", n_gpus=2, seconds=5)
    bodies = {i: Renderer().render(for_node(snap, SPEC, i))[0].decode() for i in (1, 17)}
    seen = {}
    for i, body in bodies.items():
        samples = [s for f in text_string_to_metric_families(body) for s in f.samples]
        util = [s for s in samples if s.name == "gpu_utilization_ratio"]
        assert {s.labels["pod"] for s in util} == {SPEC.pod_name(i)}
        seen[i] = {s.labels["uuid"] for s in util}
        assert len(seen[i]) == 2
        info = [s for s in samples if s.name == "gpu_pod_info"]
        assert {(s.labels["pod"], s.labels["device"]) for s in info} == {
            (SPEC.pod_name(i), u) for u in seen[i]
        }
    assert not seen[1] & seen[17]
    assert SPEC.node_name(17) == "node-17" and SPEC.role(17) == "straggler" and SPEC.role(3) == "waiting"


def test_scrape_jobs_name_every_node_and_kube_state_metrics():
    jobs = yaml.safe_load(scrape_configs(SPEC, 9999))
    exporter, ksm = jobs
    assert len(exporter["static_configs"]) == 40
    labels = exporter["static_configs"][16]["labels"]
    assert labels == {"__metrics_path__": "/nodes/node-17/metrics", "node": "node-17", "instance": "node-17"}
    assert ksm["honor_labels"] is True and ksm["metrics_path"] == "/kube-state-metrics/metrics"


def test_kube_state_metrics_names_each_pod_of_the_job_as_the_rules_read_it():
    from devtools.artifacts.recording import JOB_LABELS
    from exporter.policy.kube_labels import ksm_label
    from exporter.sim.fleet import kube_state_metrics

    families = {f.name: f for f in text_string_to_metric_families(kube_state_metrics(SPEC).decode())}
    labels = families["kube_pod_labels"].samples
    assert len(labels) == 40 and SPEC.job_label in JOB_LABELS
    assert {s.labels[ksm_label(SPEC.job_label)] for s in labels} == {SPEC.job}
    nodes = {s.labels["pod"]: s.labels["node"] for s in families["kube_pod_info"].samples}
    assert nodes[SPEC.pod_name(17)] == "node-17"
