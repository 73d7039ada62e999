"""podLogs and progressApi in the chart: off by default; on, the node's pod log directory is mounted
read-only, the exporter is pointed at it, and user patterns reach it through a ConfigMap."""

from __future__ import annotations

import yaml

from tests.helm.chart import container, core_problems, env, one, render


def test_off_by_default():
    docs = render()
    pod = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    assert "pod-logs" not in {v["name"] for v in pod["volumes"]}
    e = env(docs)
    assert e["GBE_POD_LOGS"] == "" and e["GBE_PROGRESS_API"] == "off" and "GBE_LOG_PATTERNS" not in e


def test_on_mounts_the_pod_logs_read_only_and_passes_the_patterns(tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "podLogs": {
                    "enabled": True,
                    "patterns": [{"name": "myloop", "regex": r"it=(?P<it>\d+)", "step": "it"}],
                },
                "progressApi": {"enabled": True},
            }
        )
    )
    docs = render(values)
    assert core_problems(docs) == []
    pod = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["pod-logs"]["hostPath"] == {"path": "/var/log/pods", "type": "Directory"}
    mounts = {m["name"]: m for m in container(docs)["volumeMounts"]}
    assert mounts["pod-logs"] == {"name": "pod-logs", "mountPath": "/var/log/pods", "readOnly": True}
    assert mounts["log-patterns"]["readOnly"] is True
    e = env(docs)
    assert e["GBE_POD_LOGS"] == "/var/log/pods" and e["GBE_PROGRESS_API"] == "on"
    patterns_file = e["GBE_LOG_PATTERNS"]
    assert patterns_file.startswith(mounts["log-patterns"]["mountPath"] + "/")
    config = next(
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-log-patterns")
    )
    from exporter.podlogs.logparse import load_patterns

    # the exporter reads what the chart wrote
    assert load_patterns(config["data"][patterns_file.rsplit("/", 1)[1]])[0].name == "myloop"
