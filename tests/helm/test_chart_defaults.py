"""What `helm install` with no values gives: the whole product where the cluster serves the Prometheus
Operator's API (a monitor, the rules, the dashboards), and without it no custom resource but the scrape
annotations and a scrape config in the notes; each part turned off by one value; the notes and the
README's recipes as typed."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml

from devtools import release
from tests.conftest import REPO, require_tool
from tests.helm.chart import (
    CHART,
    CR_KINDS,
    OPERATOR_API,
    core_problems,
    cr_problems,
    helm,
    one,
    render,
)

SCRAPE = ("prometheus.io/scrape", "prometheus.io/port", "prometheus.io/path", "prometheus.io/scheme")


def _kinds(docs: list[dict]) -> list[str]:
    return sorted(d["kind"] for d in docs)


def _pod_annotations(docs: list[dict]) -> dict:
    return one(docs, "DaemonSet")["spec"]["template"]["metadata"].get("annotations", {})


def _dashboard_maps(docs: list[dict]) -> list[dict]:
    return [
        d
        for d in docs
        if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith(("-fleet", "-node", "-job"))
    ]


def test_with_the_operator_the_defaults_install_a_monitor_the_rules_and_the_dashboards(tmp_path):
    docs = render()
    assert _kinds(docs) == sorted(
        ["ConfigMap"] * 3
        + ["DaemonSet", "PrometheusRule", "ResourceQuota", "Service", "ServiceAccount", "ServiceMonitor"]
    )
    maps = _dashboard_maps(docs)
    assert len(maps) == 3
    for cm in maps:  # what kube-prometheus-stack's Grafana sidecar loads by default
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    rules = one(docs, "PrometheusRule")["spec"]["groups"]
    assert sum(1 for g in rules for r in g["rules"] if "alert" in r) > 30
    assert not any(k.startswith("prometheus.io/") for k in _pod_annotations(docs))  # the monitor scrapes
    assert core_problems(docs) == []
    assert cr_problems(docs, tmp_path) == []


def test_without_the_operator_no_custom_resource_and_the_pods_carry_the_scrape_annotations():
    docs = render(operator=False)
    assert not CR_KINDS & set(_kinds(docs))
    annotations = _pod_annotations(docs)
    assert {k: annotations[k] for k in SCRAPE} == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9612",
        "prometheus.io/path": "/metrics",
        "prometheus.io/scheme": "http",
    }
    assert len(_dashboard_maps(docs)) == 3
    assert core_problems(docs) == []


def test_the_scrape_annotations_follow_the_port_and_scheme_the_pod_serves():
    docs = render(sets={"kubeRbacProxy.enabled": "true", "podAnnotations.team": "ml"}, operator=False)
    annotations = _pod_annotations(docs)
    assert annotations["prometheus.io/port"] == "9443" and annotations["prometheus.io/scheme"] == "https"
    assert annotations["team"] == "ml"  # the user's annotations stay beside them


@pytest.mark.parametrize(
    ("value", "gone"),
    [
        ("serviceMonitor.enabled", "ServiceMonitor"),
        ("prometheusRule.enabled", "PrometheusRule"),
        ("dashboards.enabled", "ConfigMap"),
    ],
)
def test_one_value_turns_each_part_off(value, gone):
    docs = render(sets={value: "false"})
    assert gone not in _kinds(docs)
    assert len(_kinds(render())) - len(_kinds(docs)) == (3 if gone == "ConfigMap" else 1)


def test_annotations_stand_in_for_a_monitor_and_one_value_turns_them_off():
    assert any(k in SCRAPE for k in _pod_annotations(render(sets={"serviceMonitor.enabled": "false"})))
    assert not any(k in SCRAPE for k in _pod_annotations(render(sets={"podMonitor.enabled": "true"})))
    off = render(sets={"scrapeAnnotations.enabled": "false"}, operator=False)
    assert not any(k in SCRAPE for k in _pod_annotations(off))


# ---- the install notes ------------------------------------------------------------------------------------


def notes(tmp_path: Path, operator: bool, sets: dict[str, str] | None = None) -> str:
    """NOTES.txt as `helm install` prints it, on a cluster with or without the Operator: a copy of the
    chart with one template that renders the notes (`helm install --dry-run` cannot fake the API)."""
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "zz-notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\n"
        'data:\n  notes: {{ include "gbe.notes" . | quote }}\n'
    )
    args = ["template", "gbe", str(chart), "-n", "monitoring", "-s", "templates/zz-notes.yaml"]
    args += ["--api-versions", OPERATOR_API] if operator else []
    for key, value in (sets or {}).items():
        args += ["--set", f"{key}={value}"]
    result = helm(*args)
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)["data"]["notes"]


def test_the_notes_printed_by_install_are_the_ones_tested(tmp_path):
    result = helm("install", "gbe", str(CHART), "--dry-run=client", "-n", "monitoring")
    assert result.returncode == 0, result.stderr
    printed = result.stdout.split("NOTES:\n", 1)[1].strip()
    assert printed == notes(tmp_path, operator=False).strip()


def test_notes_with_the_operator_list_what_was_installed_and_how_to_get_it_selected(tmp_path):
    text = notes(tmp_path, operator=True)
    installed = text.split("Installed:", 1)[1].split("\n\n", 1)[0]
    assert "ServiceMonitor monitoring/gbe-gpu-bottleneck-exporter" in installed
    assert "PrometheusRule monitoring/gbe-gpu-bottleneck-exporter" in installed
    assert "Dashboards: ConfigMaps labelled grafana_dashboard=1" in installed
    assert "prometheus.io/scrape" not in installed
    assert "--set serviceMonitor.additionalLabels.release=kube-prometheus-stack" in text
    labelled = notes(
        tmp_path / "l",
        operator=True,
        sets={
            "serviceMonitor.additionalLabels.release": "kps",
            "prometheusRule.additionalLabels.release": "kps",
        },
    )
    assert "ServiceMonitor monitoring/gbe-gpu-bottleneck-exporter labelled release=kps" in labelled
    assert "selectors match" not in labelled  # no advice to add labels already there


def test_notes_say_where_the_runbooks_link_and_where_to_set_it_once(tmp_path):
    text = notes(
        tmp_path, operator=True, sets={"prometheusRule.runbookBaseUrl": "https://wiki.example.com/gpu/"}
    )
    assert "Each alert links its runbook at https://wiki.example.com/gpu/<AlertName>.md" in text
    assert "set prometheusRule.runbookBaseUrl once" in text


def _first_queries(text: str) -> list[str]:
    tail = text.split("First query", 1)[1]
    return [line.strip() for line in tail.splitlines()[:5] if line.startswith("  ") and line.strip()]


def test_the_first_queries_in_the_notes_are_promql(tmp_path):
    queries = _first_queries(notes(tmp_path, operator=True))
    assert len(queries) == 2
    rules = {
        "groups": [
            {"name": "notes", "rules": [{"record": f"notes:q{i}", "expr": q} for i, q in enumerate(queries)]}
        ]
    }
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules))
    result = subprocess.run(
        [require_tool("promtool"), "check", "rules", str(path)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_notes_without_the_operator_print_a_scrape_config_a_scraper_accepts(tmp_path):
    """Checked by vmagent with strict parsing (an unknown field fails): Debian's promtool is built without
    Kubernetes service discovery."""
    text = notes(tmp_path, operator=False)
    assert "does not serve the Prometheus Operator's API" in text
    installed = text.split("Installed:", 1)[1].split("\n\n", 1)[0]
    assert "prometheus.io/scrape annotations on the pods" in installed
    assert "ServiceMonitor" not in installed and "PrometheusRule" not in installed
    snippet = text.split("  scrape_configs:", 1)[1].split("\n\n", 1)[0]
    config = yaml.safe_load(textwrap.dedent("scrape_configs:" + snippet))
    job = config["scrape_configs"][0]
    assert job["job_name"] == "gpu-bottleneck-exporter"  # the rules' job
    assert {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"} in job[
        "relabel_configs"
    ]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [
            require_tool("vmagent"),
            f"-promscrape.config={path}",
            "-promscrape.config.dryRun",
            "-promscrape.config.strictParse",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# ---- the READMEs' recipes, as typed ------------------------------------------------------------------------


def _install_commands(path: Path) -> list[str]:
    """Every `helm install` of a shell block (continuation lines joined) or of an inline code span."""
    text = path.read_text()
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for command in block.replace("\\\n", " ").splitlines():
            if command.strip().startswith("helm install"):
                commands.append(command.strip())
    for span in re.findall(r"(?<!`)`(helm install [^`]+)`", text):
        commands.append(" ".join(span.split()))
    return commands


RECIPES = [(p, c) for p in (REPO / "README.md", CHART / "README.md") for c in _install_commands(p)]


def test_the_readmes_have_their_recipes():
    assert len([r for r in RECIPES if "simulate" in r[1]]) == 1
    assert len(RECIPES) >= 5


@pytest.mark.parametrize(
    ("path", "command"), RECIPES, ids=[f"{p.parent.name}:{i}" for i, (p, _) in enumerate(RECIPES)]
)
def test_each_readme_install_renders_as_typed(path, command, tmp_path):
    """`helm install` becomes `helm template`, run from the clone's root as the README says (the
    registry's chart is this one, once the version checks); with the Operator and without."""
    args = shlex.split(command)[2:]  # after `helm install`
    args = [a for a in args if a != "--create-namespace"]
    published = release.chart_reference() in args
    if published:  # the registry's chart is this one, at the version named
        assert args[args.index("--version") + 1] == release.version(), command
        args[args.index(release.chart_reference())] = str(CHART)
    for operator in (True, False):
        extra = ["--api-versions", OPERATOR_API] if operator else []
        result = subprocess.run(
            [require_tool("helm"), "template", *args, *extra],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, f"{command}\n{result.stderr}"
        docs = [d for d in yaml.safe_load_all(result.stdout) if d]
        assert core_problems(docs) == []
        pod = one(docs, "DaemonSet")["spec"]["template"]["spec"]
        image = pod["containers"][0]["image"]
        expected = release.outputs()["image_ref"] if published else "REGISTRY/gpu-bottleneck-exporter:"
        assert image.startswith(expected), command
        if "simulate" in command:  # runs on any node
            assert "affinity" not in pod and "tolerations" not in pod and "nodeSelector" not in pod
        if "additionalLabels.release" in command and operator:
            for kind in ("ServiceMonitor", "PrometheusRule"):
                assert one(docs, kind)["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_the_registry_install_names_the_version_this_is():
    """The READMEs name the chart version that exists (Chart.yaml's, pyproject's), nowhere another."""
    version = release.version()
    for path in (REPO / "README.md", CHART / "README.md"):
        text = path.read_text()
        named = set(re.findall(r"--version (\d+\.\d+\.\d+)", text))
        assert named <= {version}, (path, named)
        install = text.split("## Install", 1)[1].split("\n## ", 1)[0]
        assert re.search(rf"(chart|--version) {re.escape(version)}\b", install), path
        assert "No image and no chart have been published yet" in text or "**Not published yet**" in text, (
            path
        )
