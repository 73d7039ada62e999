"""The Helm chart, rendered by the real helm binary: lint, schema validation of every manifest, and the
behaviour each value promises."""

from __future__ import annotations

import json

import pytest
import yaml

from devtools.artifacts import alerts, chart, dashboards
from exporter import __version__
from exporter.config.settings import DURATION_RANGES
from tests.helm.chart import (
    CHART,
    VALUES_FILES,
    container,
    core_problems,
    cr_problems,
    env,
    helm,
    one,
    render,
    render_error,
)

ALL = pytest.mark.parametrize(
    "files", [(), *((f,) for f in VALUES_FILES)], ids=lambda f: f[0].stem if f else "defaults"
)


def test_values_files_cover_the_four_setups():
    assert {f.name for f in VALUES_FILES} == {
        "everything-on-values.yaml",
        "kube-prometheus-stack-values.yaml",
        "hardened-values.yaml",
        "sharded-values.yaml",
    }


@ALL
def test_lint_strict(files):
    args = ["lint", "--strict", str(CHART)]
    for f in files:
        args += ["-f", str(f)]
    result = helm(*args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


@ALL
def test_every_manifest_is_valid_kubernetes(files, tmp_path):
    docs = render(*files)
    assert core_problems(docs) == []
    assert cr_problems(docs, tmp_path) == []


def test_validation_catches_unknown_and_mistyped_fields(tmp_path):
    docs = render(CHART / "ci" / "everything-on-values.yaml")
    broken = json.loads(json.dumps(docs))
    container(broken)["imagePullPolicyy"] = "Always"
    assert any("imagePullPolicyy" in p for p in core_problems(broken))
    monitor = one(broken, "ServiceMonitor")
    monitor["spec"]["endpoints"][0]["intervall"] = "15s"
    assert any("intervall" in p for p in cr_problems(broken, tmp_path))
    monitor["spec"]["endpoints"][0].pop("intervall")
    monitor["spec"]["endpoints"][0]["relabelings"][1]["action"] = "labeldropp"
    assert any("action" in p for p in cr_problems(broken, tmp_path))


def test_defaults_are_a_daemonset_on_gpu_nodes_that_takes_no_gpu():
    docs = render(operator=False)
    assert sorted(d["kind"] for d in docs) == ["ConfigMap"] * 3 + [
        "DaemonSet",
        "ResourceQuota",  # admits system-node-critical outside kube-system (criticalPodsQuota)
        "Service",
        "ServiceAccount",
    ]
    pod = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    keys = {t["matchExpressions"][0]["key"] for t in terms}
    assert {"nvidia.com/gpu.present", "feature.node.kubernetes.io/pci-10de.present"} <= keys
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["priorityClassName"] == "system-node-critical"
    assert "runtimeClassName" not in pod
    assert pod["automountServiceAccountToken"] is False
    c = pod["containers"][0]
    assert env(docs)["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env(docs)["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    for section in ("requests", "limits"):
        assert not any("nvidia.com" in k for k in c["resources"].get(section, {}))
    ds = one(docs, "DaemonSet")["spec"]
    assert ds["updateStrategy"]["type"] == "RollingUpdate"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["ports"] == [{"name": "metrics", "containerPort": 9612, "protocol": "TCP"}]
    assert one(docs, "Service")["spec"]["ports"][0]["targetPort"] == "metrics"


def test_container_is_locked_down_and_host_mounts_read_only():
    docs = render()
    c = container(docs)
    sc = c["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["privileged"] is False
    pod = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    assert not pod.get("hostPID") and not pod.get("hostNetwork") and not pod.get("hostIPC")
    host_volumes = {v["name"] for v in pod["volumes"] if "hostPath" in v}
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert host_volumes == {
        "host-proc", "host-sys", "host-dev-shm", "kubelet-pods", "pod-resources",
        "containerd-bundles", "containerd-sandboxes",
    }  # fmt: skip
    for name in host_volumes:
        assert mounts[name]["readOnly"] is True, name
    for name in ("kubelet-pods", "containerd-bundles", "containerd-sandboxes"):  # hold no stale mounts
        assert mounts[name]["mountPropagation"] == "HostToContainer", name
    paths = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert "/run/containerd" not in paths  # never the runtime's socket directory
    e = env(docs)
    assert e["GBE_PROC_ROOT"] == "/host/proc" and e["GBE_HOST_ROOT"] == "/host"
    assert e["GBE_POD_RESOURCES_SOCKET"] == "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert e["GBE_PROCESS_OWNERS"] == "off"  # it would need hostPID


def test_process_owners_cost_host_pid_and_nothing_else():
    docs = render(sets={"processOwners.enabled": "true"})
    pod = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    assert pod["hostPID"] is True and not pod.get("hostNetwork") and not pod.get("hostIPC")
    assert container(docs)["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert env(docs)["GBE_PROCESS_OWNERS"] == "on"
    # without the node's /proc the PIDs cannot be read: off, whatever the value says
    off = render(sets={"processOwners.enabled": "true", "hostMounts.proc.enabled": "false"})
    assert env(off)["GBE_PROCESS_OWNERS"] == "off"


def test_each_host_mount_is_behind_its_value():
    docs = render(
        sets={
            "hostMounts.proc.enabled": "false",
            "hostMounts.devShm.enabled": "false",
            "podResources.enabled": "false",
            "containerRuntime.type": "none",
            "hostMounts.kubeletPods.hostPath": "/var/lib/k0s/kubelet/pods",
        }
    )
    pod = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    assert {v["name"] for v in pod["volumes"] if "hostPath" in v} == {"host-sys", "kubelet-pods"}
    mounts = {m["name"]: m["mountPath"] for m in container(docs)["volumeMounts"]}
    assert mounts["kubelet-pods"] == "/host/var/lib/k0s/kubelet/pods"  # the node's path, under /host
    e = env(docs)
    assert e["GBE_PROC_ROOT"] == "/proc" and e["GBE_SHM_PATHS"] == "" and e["GBE_POD_RESOURCES_SOCKET"] == ""


def test_crio_and_a_moved_containerd_mount_their_state_where_the_exporter_reads_it():
    docs = render(sets={"containerRuntime.containerdRoot": "/run/k3s/containerd"})
    pod = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    mounts = {m["name"]: m["mountPath"] for m in container(docs)["volumeMounts"]}
    assert volumes["containerd-bundles"] == "/run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io"
    assert mounts["containerd-bundles"] == "/host/run/containerd/io.containerd.runtime.v2.task/k8s.io"
    assert mounts["containerd-sandboxes"] == "/host/run/k3s/containerd/io.containerd.grpc.v1.cri/sandboxes"
    docs = render(sets={"containerRuntime.type": "crio"})
    mounts = [m["mountPath"] for m in container(docs)["volumeMounts"] if m["name"] == "crio-containers"]
    assert mounts == ["/host/run/containers/storage/overlay-containers"]


def test_hardened_runs_as_non_root_without_the_root_only_sources():
    docs = render(CHART / "ci" / "hardened-values.yaml")
    sc = container(docs)["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 65532
    pod = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    names = {v["name"] for v in pod["volumes"]}
    assert not names & {"pod-resources", "kubelet-pods", "containerd-bundles", "containerd-sandboxes"}
    assert env(docs)["GBE_POD_RESOURCES_SOCKET"] == ""
    assert not [d for d in docs if d["kind"] == "Service"]
    assert one(docs, "PodMonitor")["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"


def test_runtime_class_simulation_and_fractional_seconds_from_set():
    docs = render(
        sets={"runtimeClassName": "nvidia", "exporter.simulate": "tour", "exporter.interval": "0.5"}
    )
    assert env(docs)["GBE_INTERVAL"] == "0.5"
    assert one(docs, "DaemonSet")["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia"
    assert env(docs)["GBE_SIMULATE"] == "tour"


def test_monitors_add_node_and_keep_the_exporters_pod_labels():
    for kind, key, endpoints in (
        ("ServiceMonitor", "serviceMonitor", "endpoints"),
        ("PodMonitor", "podMonitor", "podMetricsEndpoints"),
    ):
        sets = {f"{key}.enabled": "true", f"{key}.interval": "30s", f"{key}.scrapeTimeout": "25s"}
        monitor = one(render(sets=sets), kind)
        assert monitor["spec"]["jobLabel"] == "app.kubernetes.io/name"
        endpoint = monitor["spec"][endpoints][0]
        assert endpoint["interval"] == "30s" and endpoint["scrapeTimeout"] == "25s"
        relabel = endpoint["relabelings"]
        assert relabel[0] == {
            "sourceLabels": ["__meta_kubernetes_pod_node_name"],
            "targetLabel": "node",
            "action": "replace",
        }
        assert relabel[1]["action"] == "labeldrop"
        assert {"namespace", "pod", "container"} <= set(relabel[1]["regex"].split("|"))
        assert endpoint["honorLabels"] is False


def test_kube_prometheus_stack_values_carry_the_release_label_everywhere_it_selects():
    docs = render(CHART / "ci" / "kube-prometheus-stack-values.yaml")
    for kind in ("ServiceMonitor", "PrometheusRule"):
        assert one(docs, kind)["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    maps = [d for d in docs if d["kind"] == "ConfigMap"]
    assert len(maps) == 3
    for cm in maps:
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["metadata"]["annotations"]["grafana_folder"] == "GPU"


def test_dashboards_in_the_configmaps_equal_the_dashboard_files():
    docs = render(sets={"dashboards.enabled": "true", "dashboards.label": "grafana_dash"})
    shipped = {}
    for cm in (d for d in docs if d["kind"] == "ConfigMap"):
        assert cm["metadata"]["labels"]["grafana_dash"] == "1"
        (name, text), *_ = cm["data"].items()
        shipped[name] = json.loads(text)
    assert shipped == {
        path.split("/")[-1]: json.loads((CHART.parent.parent / path).read_text())
        for path in dashboards.DASHBOARDS
    }


def test_the_pod_monitor_takes_the_service_monitors_place():
    """One monitor, so each exporter is scraped once: the PodMonitor replaces the default ServiceMonitor."""
    kinds = [d["kind"] for d in render(sets={"podMonitor.enabled": "true"})]
    assert "PodMonitor" in kinds and "ServiceMonitor" not in kinds


@pytest.mark.parametrize(
    ("sets", "set_json", "words"),
    [
        ({"exporter.intervall": "2"}, None, "intervall"),
        ({"prometheusRule.rules.GpuDataStarvaton.enabled": "false"}, None, "GpuDataStarvaton"),
        ({"prometheusRule.rules.GpuCommHang.severity": "page"}, None, "severity"),
        ({"prometheusRule.rules.GpuCommHang.for": "5 minutes"}, None, "for"),
        ({"prometheusRule.thresholds.shmWarning": "1.5"}, None, "shmWarning"),
        ({"exporter.port": "70000"}, None, "port"),
        ({"exporter.interval": "0"}, None, "interval"),
        ({"exporter.window": "soon"}, None, "window"),
        ({"containerRuntime.type": "docker"}, None, "type"),
        ({"exporter.logLevel": "verbose"}, None, "logLevel"),
        (None, {"serviceMonitor.interval": '"15 seconds"'}, "interval"),
    ],
)
def test_schema_refuses_bad_values_with_a_clear_error(sets, set_json, words):
    error = render_error(sets, set_json)
    assert words in error, error


@pytest.mark.parametrize(
    ("sets", "got"),
    [
        ({"exporter.interval": "0"}, "got 0"),
        ({"exporter.interval": "-1"}, "got -1"),
        ({"exporter.interval": "0.01"}, "got 0.01"),
        ({"exporter.window": "soon"}, "got soon"),
        ({"exporter.window": "7200"}, "got 7200"),
        ({"exporter.collectTimeout": "0"}, "got 0"),
    ],
)
def test_a_duration_out_of_the_exporters_range_fails_with_one_line_that_says_what_is_wanted(sets, got):
    """The exporter's own range and reason, not JSON schema's 'exclusiveMinimum: got 0, want 0'."""
    (name,) = sets
    field = chart.DURATION_VALUES[name]
    low, low_allowed, high, why = DURATION_RANGES[field]
    error = render_error(sets)
    lowest = f"at least {low:g}" if low_allowed else f"more than {low:g}"
    assert f"{name} must be a number of seconds, {lowest} and at most {high:g} ({why}); {got}" in error, error
    assert "want" not in error and "anyOf" not in error, error
    # one line, helm's own hint aside
    assert len([line for line in error.splitlines() if name in line]) == 1, error


def test_a_window_shorter_than_one_interval_is_refused():
    error = render_error({"exporter.interval": "2", "exporter.window": "1.5"})
    assert "exporter.window (1.5 s) must be at least one exporter.interval (2 s)" in error, error


def test_durations_in_range_from_set_and_from_a_values_file_reach_the_exporter(tmp_path):
    found = env(render(sets={"exporter.interval": "0.05", "exporter.window": "3600"}))
    assert (found["GBE_INTERVAL"], found["GBE_WINDOW"]) == ("0.05", "3600")
    values = tmp_path / "values.yaml"
    values.write_text("exporter: {interval: 0.25, window: 30, collectTimeout: 2.5}\n")
    found = env(render(values))
    assert (found["GBE_INTERVAL"], found["GBE_WINDOW"], found["GBE_COLLECT_TIMEOUT"]) == ("0.25", "30", "2.5")


def test_every_value_is_documented_in_the_chart_readme():
    text = (CHART / "values.yaml").read_text()
    data = yaml.safe_load(text)
    documented = {v.path for v in chart.documented(text)}

    def leaves(node, path=()):
        if isinstance(node, dict) and node and path not in documented:
            for key, value in node.items():
                yield from leaves(value, (*path, key))
        else:
            yield path

    undocumented = [".".join(p) for p in leaves(data) if not any(p[: len(d)] == d for d in documented)]
    assert undocumented == []
    readme = (CHART / "README.md").read_text()
    for path in documented:
        name = ".".join(path)
        if path[:2] == ("prometheusRule", "rules"):
            assert f"[{path[-1]}]" in readme, name
        else:
            assert f"`{name}`" in readme, name


def test_chart_versions_follow_the_package():
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert meta["appVersion"] == __version__
    assert meta["apiVersion"] == "v2"


def test_rules_in_values_cover_every_alert():
    values = yaml.safe_load((CHART / "values.yaml").read_text())["prometheusRule"]
    assert list(values["rules"]) == [a.name for a in alerts.ALERTS]
    for a in alerts.ALERTS:
        assert values["rules"][a.name] == {"enabled": True, "for": a.for_, "severity": a.severity}
    assert values["thresholds"] == {chart.camel(k): t.value for k, t in alerts.PARAMS.items()}


@ALL
def test_install_notes_render_and_say_what_was_created(files):
    args = ["install", "gbe", str(CHART), "--dry-run=client", "--namespace", "monitoring"]
    for f in files:
        args += ["-f", str(f)]
    result = helm(*args)
    assert result.returncode == 0, result.stderr
    notes = result.stdout.split("NOTES:", 1)[1]
    assert "port-forward ds/gbe-gpu-bottleneck-exporter 9612" in notes
    values = yaml.safe_load(files[0].read_text()) if files else {}
    # `helm install --dry-run` sees no Prometheus Operator: the notes say so and print a scrape config
    assert "does not serve the Prometheus Operator's API" in notes
    assert "ServiceMonitor " not in notes.split("does not serve", 1)[0]
    assert ("Dashboards: ConfigMaps" in notes) == values.get("dashboards", {}).get("enabled", True)


# a host mount whose files only the node's root may read -> the value that turns it on
ROOT_READS = {
    "kubelet-pods": "hostMounts.kubeletPods",
    "containerd-bundles": "containerRuntime",
    "containerd-sandboxes": "containerRuntime",
    "pod-resources": "podResources",
}


def test_what_root_can_read_through_the_default_mounts_is_documented_mount_by_mount():
    """The defaults run as uid 0 with the root-only mounts: the chart's README says, for each, what the
    process could read there, what it reads, and what turning it off costs; the values say the bound."""
    docs = render()
    assert container(docs)["securityContext"]["runAsUser"] == 0
    pod = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    mounted = {v["name"] for v in pod["volumes"] if "hostPath" in v} & set(ROOT_READS)
    assert mounted == set(ROOT_READS)
    readme = (CHART / "README.md").read_text()
    table = readme[readme.index("**What the defaults expose, and the bound.**") :]
    rows = {line.split("|")[1].strip(" `") for line in table.splitlines() if line.startswith("| `")}
    assert {ROOT_READS[name] for name in mounted} <= rows
    assert "Secret" in table and "environment" in table and "hardened-values.yaml" in table
    values = (CHART / "values.yaml").read_text()
    context = values[: values.index("\nsecurityContext:")].rsplit("# -- Container security context", 1)[1]
    assert "Secret" in context and "environment" in context and "hardened-values.yaml" in context
