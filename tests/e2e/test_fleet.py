"""A job across 40 nodes, through the whole chain: the fleet simulator (40 simulated 2-GPU nodes and
kube-state-metrics' kube_pod_labels, served from one process through the exporter's renderer) -> a real
Prometheus with the recording and alert rules -> a real Alertmanager -> a webhook receiver. The job's
rank on node 17 starves for input; its pods on the other 39 nodes wait for it in NCCL, and their own
exporters call them comm-bound. Only the straggler pages: GpuJobStraggler names the job, the pod on
node 17 and node 17, and no alert names any of the other 39 nodes."""

from __future__ import annotations

import time

import pytest

from devtools.artifacts import alerts
from exporter.sim.fleet import Fleet, FleetServer, FleetSpec, scrape_configs
from scripts.stack import PageReceiver, Stack
from tests.conftest import require_tool

SPEC = FleetSpec(nodes=40, gpus=2, straggler=17)
FOR = "15s"  # every alert's `for`, shortened: the waiting nodes' comm-bound verdicts hold from the start


@pytest.mark.slow
def test_one_straggler_rank_on_node_17_of_40_pages_once_naming_its_pod_and_node(tmp_path):
    require_tool("prometheus")
    require_tool("prometheus-alertmanager")
    rules = tmp_path / "rules.yml"
    rules.write_text(alerts.render(for_override=FOR))
    fleet = Fleet(SPEC)
    server = FleetServer(fleet, 0)
    receiver = PageReceiver()
    stack = Stack(
        tmp_path / "stack",
        rules,
        [],
        receiver.url,
        interval="2s",
        scrape_configs=scrape_configs(SPEC, server.port),
    )
    straggler = {
        "node": SPEC.node_name(17),
        "pod": SPEC.pod_name(17),
        "namespace": "ml",
        "job_name": SPEC.job,
    }
    try:
        deadline = time.monotonic() + 60
        while not fleet.ready() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert fleet.ready(), "the fleet's simulated nodes did not start"
        stack.start()
        start = time.monotonic()
        paged_after = None
        while time.monotonic() < start + 150:
            firing = [p for p in receiver.snapshot() if p.status == "firing"]
            if any(p.labels.get("alertname") == "GpuJobStraggler" for p in firing):
                paged_after = paged_after or time.monotonic() - start
                # the waiting nodes' verdicts held all along: one more `for` passes without their pages
                if time.monotonic() - start > paged_after + 20:
                    break
            time.sleep(2)
        print(f"GpuJobStraggler paged after {paged_after and round(paged_after)} s")
        waiting = stack.query('sum(node_kind:gpu_bottleneck:count{kind="comm_bound"})')
        assert waiting and float(waiting[0]["value"][1]) == 2 * (SPEC.nodes - 1), waiting
        pages = [p for p in receiver.snapshot() if p.status == "firing"]
        job_pages = [p for p in pages if p.labels["alertname"] == "GpuJobStraggler"]
        assert job_pages, f"no GpuJobStraggler page; got {sorted({p.labels['alertname'] for p in pages})}"
        for page in job_pages:
            assert straggler.items() <= page.labels.items(), page.labels
            assert (
                f"Pod {SPEC.pod_name(17)} on {SPEC.node_name(17)} of job ml/{SPEC.job}"
                in (page.annotations["description"])
            )
        others = [p.labels for p in pages if p.labels.get("node") != SPEC.node_name(17)]
        assert others == [], f"the waiting nodes paged: {others}"
        print("pages:", sorted({(p.labels["alertname"], p.labels.get("node", "")) for p in pages}))
    finally:
        stack.stop()
        server.close()
        fleet.close()
        receiver.close()
