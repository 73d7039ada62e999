"""Rendering the chart with the real helm binary, and validating what it renders."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import yaml

from tests.conftest import REPO, require_path, require_tool

CHART = REPO / "helm" / "gpu-bottleneck-exporter"
VALUES_FILES = sorted((CHART / "ci").glob("*-values.yaml"))
K8S_VERSION = "1.37.0"
CR_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
CRCHECK = REPO / ".tools" / "crcheck"
# the Prometheus Operator's API, as a cluster running it serves it (helm template's view of the cluster)
OPERATOR_API = "monitoring.coreos.com/v1"


def helm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([require_tool("helm"), *args], capture_output=True, text=True, timeout=120)


def _template_args(
    files=(), sets=None, set_json=None, release: str = "gbe", operator: bool = True
) -> list[str]:
    args = ["template", release, str(CHART), "--namespace", "monitoring"]
    if operator:
        args += ["--api-versions", OPERATOR_API]
    for f in files:
        args += ["-f", str(f)]
    for flag, pairs in (("--set", sets), ("--set-json", set_json)):
        for key, value in (pairs or {}).items():
            args += [flag, f"{key}={value}"]
    return args


def render(
    *files: Path, sets: dict[str, str] | None = None, release: str = "gbe", operator: bool = True
) -> list[dict]:
    """Every manifest `helm template` renders, as dicts: on a cluster that serves the Prometheus
    Operator's API unless ``operator`` is false."""
    result = helm(*_template_args(files, sets, release=release, operator=operator))
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def render_error(sets: dict[str, str] | None = None, set_json: dict[str, str] | None = None) -> str:
    result = helm(*_template_args(sets=sets, set_json=set_json))
    assert result.returncode != 0, "helm accepted values it should refuse"
    return result.stderr


def one(docs: list[dict], kind: str) -> dict:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind}s"
    return found[0]


def core_problems(docs: list[dict]) -> list[str]:
    """Kubernetes' own kinds against the API's schemas, strictly (unknown fields are errors)."""
    problems = []
    for doc in docs:
        if doc["kind"] in CR_KINDS:
            continue
        try:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            problems.append(
                f"{doc['kind']}/{doc['metadata']['name']}: {'.'.join(map(str, e.path))}: {e.message}"
            )
    return problems


def cr_problems(docs: list[dict], tmp: Path) -> list[str]:
    """prometheus-operator kinds against the upstream CRD schemas, unknown fields included."""
    crs = [d for d in docs if d["kind"] in CR_KINDS]
    if not crs:
        return []
    node = require_tool("node")
    require_path(CRCHECK / "node_modules" / "typescript", "the prometheus-operator schemas in .tools/crcheck")
    shutil.copy(REPO / "tests" / "helm" / "crcheck.mjs", CRCHECK / "crcheck.mjs")
    path = tmp / "crs.json"
    path.write_text(json.dumps(crs))
    result = subprocess.run([node, str(CRCHECK / "crcheck.mjs"), str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def container(docs: list[dict]) -> dict:
    return one(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]


def env(docs: list[dict]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container(docs)["env"]}
