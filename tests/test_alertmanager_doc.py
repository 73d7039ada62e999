"""docs/alertmanager.md's routing example: Alertmanager accepts it, every alert of the rules lands with
the receiver the page says, the alert names it matches exist, and a real Alertmanager applies its inhibit
rules (a job's hang holds its ranks' starvation pages back, not another namespace's)."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from devtools.artifacts import alerts
from scripts.stack import ALERTMANAGER, free_port, wait_http
from tests.conftest import REPO, require_tool

DOC = REPO / "docs" / "alertmanager.md"


def _config_text() -> str:
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S) if "inhibit_rules" in b]
    return block


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "alertmanager.yml"
    path.write_text(_config_text())
    return path


def _amtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([require_tool("amtool"), *args], capture_output=True, text=True, timeout=60)


def test_alertmanager_accepts_the_example(config):
    result = _amtool("check-config", str(config))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def _matched_names() -> list[str]:
    """Every alert-name pattern in the example's matchers, one alternative each."""
    found = re.findall(r'alertname\s*=~?\s*"([^"]+)"', _config_text())
    return [alt for pattern in found for alt in pattern.split("|")]


def test_every_alert_name_it_matches_exists():
    names = [a.name for a in alerts.ALERTS]
    missing = [alt for alt in _matched_names() if not any(re.fullmatch(alt, n) for n in names)]
    assert missing == []


def _platform(name: str) -> bool:
    route = yaml.safe_load(_config_text())["route"]["routes"][0]
    (matcher,) = route["matchers"]
    return re.fullmatch(matcher.split("=~", 1)[1].strip('"'), name) is not None


def test_every_alert_goes_to_the_receiver_the_page_describes(config):
    seen = set()
    for a in alerts.ALERTS:
        result = _amtool(
            "config",
            "routes",
            "test",
            f"--config.file={config}",
            f"alertname={a.name}",
            f"severity={a.severity}",
        )
        assert result.returncode == 0, result.stderr
        receiver = result.stdout.strip()
        if _platform(a.name):
            expected = "platform-pager" if a.severity == "critical" else "platform-chat"
        else:
            expected = {"critical": "ml-pager", "warning": "ml-chat", "info": "gpu-digest"}[a.severity]
        assert receiver == expected, a.name
        seen.add(receiver)
    assert seen == {"platform-pager", "platform-chat", "ml-pager", "ml-chat", "gpu-digest"}


# ---- a real Alertmanager applies the inhibit rules ---------------------------------------------------------


def _post(url: str, body: object) -> None:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def _alert(labels: dict[str, str]) -> dict:
    now = datetime.now(UTC)
    return {
        "labels": labels,
        "startsAt": now.isoformat(),
        "endsAt": (now + timedelta(minutes=10)).isoformat(),
    }


def _labels(alertname: str, severity: str, **labels: str) -> dict[str, str]:
    return {"alertname": alertname, "severity": severity, **labels}


def test_a_real_alertmanager_holds_a_hung_jobs_pages_back_and_no_one_elses(config, tmp_path):
    port = free_port()
    am = subprocess.Popen(
        [
            require_tool(ALERTMANAGER),
            f"--config.file={config}",
            f"--storage.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/-/ready", proc=am)
        node1 = {"instance": "10.0.0.1:9612", "node": "gpu-1"}
        node2 = {"instance": "10.0.0.2:9612", "node": "gpu-2"}
        llm = {"namespace": "ml", "job_name": "llm"}
        sent = {
            "hang": _labels("GpuJobHang", "critical", **llm, pod="every rank"),
            "straggler": _labels("GpuJobStraggler", "warning", **llm, pod="llm-3"),
            "other_straggler": _labels(
                "GpuJobStraggler", "warning", namespace="ml", job_name="sft", pod="sft-0"
            ),
            "starving": _labels(
                "GpuDataStarvation", "warning", **node1, gpu="0", namespace="ml", pod="llm-0"
            ),
            "elsewhere": _labels(
                "GpuDataStarvation", "warning", **node1, gpu="1", namespace="vision", pod="rn-0"
            ),
            "nvlink": _labels("GpuNvlinkDown", "critical", **node1, gpu="5"),
            "nccl": _labels("GpuNcclNotOnNvlink", "warning", **node1, namespace="vision", pod="rn-0"),
            "other_node_nccl": _labels(
                "GpuNcclNotOnNvlink", "warning", **node2, namespace="vision", pod="rn-1"
            ),
        }
        _post(f"{base}/api/v2/alerts", [_alert(labels) for labels in sent.values()])
        with urllib.request.urlopen(f"{base}/api/v2/alerts", timeout=10) as response:
            got = json.loads(response.read())
        state = {}
        for a in got:
            (key,) = [k for k, labels in sent.items() if labels == a["labels"]]
            state[key] = bool(a["status"]["inhibitedBy"])
        assert state == {
            "hang": False,
            "straggler": True,  # the hung job's
            "other_straggler": False,  # another job of the namespace
            "starving": True,  # a GPU of the hung job's namespace
            "elsewhere": False,
            "nvlink": False,
            "nccl": True,  # NVLink down on its node
            "other_node_nccl": False,
        }
    finally:
        am.terminate()
        am.wait(timeout=10)
