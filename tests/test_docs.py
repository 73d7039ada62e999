"""The README's first screen says what the project is, how to try it and how to install it, and links
every page of docs/; every relative link resolves. The troubleshooting page names only things that
exist (metrics and their labels, exporter flags and variables, chart values, error names, alerts,
verdict kinds and causes, the NVML log line), the install page's requirements agree with the chart,
no user-facing text cites the project's internal notes, and LICENSE is the Apache License 2.0."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.analysis.kinds import KINDS
from exporter.cli import build_parser
from exporter.config.settings import Settings
from tests.conftest import REPO

README = (REPO / "README.md").read_text()
DOCS = REPO / "docs"
CONFIGURATION = (DOCS / "configuration.md").read_text()
INSTALL = (DOCS / "install.md").read_text()
METRICS_DOC = (REPO / "docs" / "metrics.md").read_text()
CHART = REPO / "helm" / "gpu-bottleneck-exporter"
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
RULES = (REPO / "alerts" / "gpu-bottleneck-exporter.rules.yml").read_text()

HELM_FLAGS = {"--set", "--set-json", "--api-versions"}  # helm's own
# fields of the prometheus-operator's Prometheus resource, not chart values
OPERATOR_FIELDS = {"serviceMonitorSelector", "podMonitorSelector", "ruleSelector"}
COMMON_LABELS = {"gpu", "uuid", "namespace", "pod", "container", "instance", "job", "node"}
FILE_SUFFIXES = (".yaml", ".yml", ".md", ".sock", ".json", ".py", ".csv")


TROUBLESHOOTING = (DOCS / "troubleshooting.md").read_text()
SPANS = [" ".join(s.split()) for s in re.findall(r"`([^`]+)`", TROUBLESHOOTING)]


def metric_rows() -> dict[str, str]:
    """Every documented series -> its labels cell."""
    rows = {}
    for line in METRICS_DOC.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        m = re.fullmatch(r"`(gpu_[a-z0-9_]+)`", cells[0]) if len(cells) >= 4 else None
        if m:
            rows[m.group(1)] = cells[3]
    return rows


METRICS = metric_rows()
DOC_LITERALS = set(re.findall(r"`([^`\n]+)`", METRICS_DOC))


def parser_flags(parser: argparse.ArgumentParser) -> set[str]:
    flags = set()
    for action in parser._actions:
        flags.update(s for s in action.option_strings if s.startswith("--"))
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                flags |= parser_flags(sub)
    return flags


FLAGS = parser_flags(build_parser())


def value_exists(path: str) -> bool:
    """A dotted chart value: every key in values.yaml, or below a free-form map ({} by default);
    `<Name>` stands for any key."""
    node: Any = VALUES
    for key in path.split("."):
        if not isinstance(node, dict):
            return False
        if not node:  # free-form: additionalLabels, podSecurityContext, ...
            return True
        if key.startswith("<") and key.endswith(">"):
            node = next(iter(node.values()))
        elif key in node:
            node = node[key]
        else:
            return False
    return True


def test_the_section_names_things():
    assert len(SPANS) > 50
    assert {"gpu_exporter_nvml_up", "gpu_exporter_collect_errors_total"} <= {
        m for s in SPANS for m in re.findall(r"gpu_[a-z0-9_]+", s)
    }


def test_metrics_and_their_labels_exist():
    for span in SPANS:
        for name, labels in re.findall(r"(?<![\w-])(gpu_[a-z0-9_]+)(?:\{([^}]*)\})?", span):
            if name.endswith("_"):  # a prefix, as in grep ^gpu_exporter_
                assert any(m.startswith(name) for m in METRICS), f"no series starts with {name}"
                continue
            assert name in METRICS, f"troubleshooting names {name}, which docs/metrics.md lacks"
            for label, value in re.findall(r'(\w+)(?:\s*=~?\s*"([^"]*)")?', labels):
                assert label in COMMON_LABELS or f"`{label}`" in METRICS[name], f"{name} has no label {label}"
                if value:
                    assert value in DOC_LITERALS, f'{label}="{value}" is not documented in docs/metrics.md'


def test_bare_label_matchers_are_documented():
    for span in SPANS:
        m = re.fullmatch(r'(\w+)="([^"]+)"', span)
        if m:
            assert m.group(1) in DOC_LITERALS and m.group(2) in DOC_LITERALS, span


def test_flags_and_variables_exist():
    named = [f for s in SPANS for f in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", s)]
    assert named
    for flag in named:
        assert flag in FLAGS or flag in HELM_FLAGS, f"the exporter has no flag {flag}"
    for var in (v for s in SPANS for v in re.findall(r"\bGBE_[A-Z_]+\b", s)):
        flag = "--" + var.removeprefix("GBE_").lower().replace("_", "-")
        assert flag in FLAGS, f"{var} matches no flag"
        assert f"`{flag}` | `{var}`" in CONFIGURATION, (
            f"the configuration table does not pair {flag} with {var}"
        )


def test_chart_values_exist():
    checked = []
    for span in SPANS:
        for path in re.findall(r"--set(?:-json)? ([\w.]+)=", span):
            checked.append(path)
            assert value_exists(path), f"--set {path}: no such chart value"
        if span in OPERATOR_FIELDS or span.endswith(FILE_SUFFIXES):
            continue
        if re.fullmatch(r"[a-z][A-Za-z0-9]*(\.[A-Za-z0-9<>]+)*", span) and (
            "." in span or any(c.isupper() for c in span)
        ):
            checked.append(span)
            assert value_exists(span), f"troubleshooting names chart value {span}, not in values.yaml"
    assert {"podResources.hostPath", "runtimeClassName", "nvidiaEnv"} <= set(checked)


def test_error_names_alerts_and_kinds_exist():
    alerts = set(re.findall(r"^\s*- alert: (\w+)$", RULES, re.M))
    for span in SPANS:
        if re.fullmatch(r"[A-Z][A-Za-z0-9]+", span):
            assert span in alerts or span in DOC_LITERALS, f"{span}: neither an alert nor a documented error"
        elif re.fullmatch(r"[a-z]+(_[a-z]+)+", span) and not span.startswith(("gpu_", "exported_")):
            causes = {c for k in KINDS.values() for c in k.causes}
            assert span in KINDS or span in causes, f"{span} is neither a verdict kind nor a cause"
    for kind in KINDS:
        assert f"| `{kind}` |" in TROUBLESHOOTING, f"the verdict table misses {kind}"


def test_the_nvml_log_line_is_the_exporters():
    """The quoted log line is the NVML session's format with its default backoff, the detail elided."""
    sampler = (REPO / "exporter" / "collect" / "nvml_session.py").read_text()
    parts = re.search(r'"(NVML is not usable[^"]*)"\s*"([^"]*)"', sampler)
    assert parts, "the NVML session's warning moved: update this test and the README"
    settings = Settings()
    expected = "".join(parts.groups()) % (
        "LibraryNotFound",
        "...",
        settings.nvml_retry_initial_s,
        settings.nvml_retry_max_s,
    )
    assert expected in SPANS


def test_requirements_agree_with_the_chart():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert f"`kubeVersion: {chart['kubeVersion']}`" in INSTALL
    assert f"`{VALUES['image']['repository']}`" in INSTALL
    assert f"(`{chart['appVersion']}`)" in INSTALL
    assert "pyproject.toml" in INSTALL  # a build of one's own takes its tag from the one version


FIRST_SCREEN = 60  # lines: what it is, what it finds, how to try it, how to install it


def test_the_first_screen_says_what_it_is_how_to_try_it_and_how_to_install_it():
    first = "\n".join(README.splitlines()[:FIRST_SCREEN])
    assert "Prometheus exporter for Kubernetes GPU nodes" in first
    assert "## What it finds" in first
    assert re.search(r"^make demo +# ", first, re.M) and re.search(r"^make test +# ", first, re.M)
    # nothing is published yet: the install that works is the clone's, and the page says so
    assert "helm install gpu-bottleneck ./helm/gpu-bottleneck-exporter" in first
    assert "No image and no chart have been published yet" in first
    assert len(README.splitlines()) <= 2 * FIRST_SCREEN, (
        "the README is the first screen; the rest is in docs/"
    )


def test_the_readme_links_every_page_of_the_docs():
    linked = set(re.findall(r"\]\((docs/[^)#\s]+)", README))
    pages = {f"docs/{p.name}" for p in DOCS.glob("*.md")}
    assert pages - linked == set(), "link these pages from the README"
    assert "docs/runbooks/" in linked


def _links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)  # not in code blocks
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:|#", t)]


def test_every_relative_link_of_the_readme_and_the_docs_resolves():
    pages = [REPO / "README.md", REPO / "ARCHITECTURE.md", *sorted(DOCS.rglob("*.md"))]
    broken = [
        f"{page.relative_to(REPO)}: {target}"
        for page in pages
        for target in _links(page)
        if not (page.parent / target.split("#")[0]).exists()
    ]
    assert len(pages) > 10 and broken == []


@pytest.mark.parametrize(
    "line",
    [
        "Apache License",
        "Version 2.0, January 2004",
        "http://www.apache.org/licenses/",
        "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION",
        "END OF TERMS AND CONDITIONS",
        "APPENDIX: How to apply the Apache License to your work.",
    ],
)
def test_license_is_apache_2(line: str):
    lines = [s.strip() for s in (REPO / "LICENSE").read_text().splitlines()]
    assert line in lines
    assert lines[lines.index("TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION") + 2].startswith(
        "1. Definitions."
    )
    assert sum(bool(re.match(r"\d+\. [A-Z]", s)) for s in lines) == 9  # sections 1-9


def test_license_heads_the_file():
    first = [s.strip() for s in (REPO / "LICENSE").read_text().splitlines() if s.strip()][:2]
    assert first == ["Apache License", "Version 2.0, January 2004"]


# Words of the project's internal notes ("seed 003", "the seed table") mean nothing to a user; a random
# seed in code (``seed=``, ``random.seed(...)``, "random seed") is not one of them.
USER_FACING = ("README.md", "ARCHITECTURE.md", "Makefile", "Dockerfile", "pyproject.toml")
USER_FACING_FOLDERS = (
    "exporter",
    "scripts",
    "docs",
    "helm",
    "alerts",
    "dashboards",
    "devtools",
    "bench",
    "examples",
)
INTERNAL_NOTE = re.compile(r"\bseeds?(?:'s)?\s+(?:\d|tables?\b|thresholds?\b|notes?\b|signals?\b)", re.I)


def test_the_internal_note_pattern():
    for line in (
        "fabric state not_started, no NVLink P2P (seed 003)",
        "runs with IPC_LOCK, as seed 002's pods do",
        "# ---- the seed table as plain rules ----",
        "the project's seed threshold table",
        "Seeds 001-004 describe",
    ):
        assert INTERNAL_NOTE.search(line), line
    for line in (
        "rng = random.Random(seed)",
        "random.seed(7)",
        "def noise(seed: int)",
        "a random seed",
        "seed=3",
    ):
        assert not INTERNAL_NOTE.search(line), line


def test_no_user_facing_text_cites_the_projects_internal_notes():
    files = [REPO / name for name in USER_FACING] + [
        p
        for folder in USER_FACING_FOLDERS
        for p in sorted((REPO / folder).rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    ]
    hits = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        hits += [
            f"{path.relative_to(REPO)}:{i}: {line.strip()}"
            for i, line in enumerate(text.splitlines(), 1)
            if INTERNAL_NOTE.search(line)
        ]
    assert hits == []
