"""What a release is called, from one version: pyproject.toml's ``[project].version``.

Everything else follows it: the chart's ``version`` and ``appVersion`` are generated from it
(``make artifacts``), the image tag is the chart's appVersion (the chart's default image), and
``exporter.__version__`` is checked against it by a test. The image repository is the chart's default
``image.repository``, so the image the release pushes is the one the chart installs; the chart goes to
the same registry and owner, under ``charts/``.

The release workflow runs ``python -m devtools.release outputs --tag "$GITHUB_REF_NAME"``: it refuses a
tag other than ``v<version>`` with one line, and prints the names (``key=value``) for ``$GITHUB_OUTPUT``.
Needs only the standard library and PyYAML.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
CHART = "helm/gpu-bottleneck-exporter"


def version(root: Path = REPO) -> str:
    """The version: pyproject.toml's, the only place it is written."""
    return tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]


def chart_meta(root: Path = REPO) -> dict:
    return yaml.safe_load((root / CHART / "Chart.yaml").read_text())


def image_repository(root: Path = REPO) -> str:
    """The repository the release pushes the image to: the chart's default."""
    return yaml.safe_load((root / CHART / "values.yaml").read_text())["image"]["repository"]


def chart_registry(root: Path = REPO) -> str:
    """The OCI registry path the chart is pushed to: the image's registry and owner, under charts/."""
    registry_and_owner = image_repository(root).rsplit("/", 1)[0]
    return f"oci://{registry_and_owner}/charts"


def chart_reference(root: Path = REPO) -> str:
    """What `helm install` takes: the registry path and the chart's name."""
    return f"{chart_registry(root)}/{chart_meta(root)['name']}"


def problems(tag: str | None, root: Path = REPO) -> list[str]:
    """Why this checkout cannot be released under ``tag`` (None: whatever the tag)."""
    found = []
    v = version(root)
    if tag is not None and tag != f"v{v}":
        found.append(f"tag {tag!r} does not match pyproject.toml's version {v!r}: tag the release v{v}")
    meta = chart_meta(root)
    for key in ("version", "appVersion"):
        if str(meta.get(key)) != v:
            found.append(
                f"{CHART}/Chart.yaml has {key} {meta.get(key)!r}, not {v!r}: run `make artifacts` and commit"
            )
    return found


def outputs(root: Path = REPO) -> dict[str, str]:
    v = version(root)
    image = image_repository(root)
    return {
        "version": v,
        "image": image,
        "image_ref": f"{image}:{v}",
        "chart_registry": chart_registry(root),
        "chart_ref": chart_reference(root),
        "chart_package": f"{chart_meta(root)['name']}-{v}.tgz",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.release", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    out = sub.add_parser("outputs", help="check the tag against the version, print key=value names")
    out.add_argument("--tag", required=True, help="the pushed tag, e.g. v0.2.0")
    sub.add_parser("version", help="print the version")
    args = parser.parse_args(argv)
    if args.command == "version":
        print(version())
        return 0
    found = problems(args.tag)
    if found:
        for line in found:
            print(f"release: {line}", file=sys.stderr)
        return 1
    for key, value in outputs().items():
        print(f"{key}={value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
