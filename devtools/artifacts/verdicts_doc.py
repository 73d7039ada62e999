"""The hand-written docs' verdict tables, generated from the verdict registry (exporter/analysis/kinds.py):
docs/troubleshooting.md's inputs per kind (between ``@generated-begin verdict-inputs`` and
``@generated-end``) and docs/metrics.md's rows of ``gpu_bottleneck`` and ``gpu_bottleneck_score``."""

from __future__ import annotations

import re

from devtools.artifacts.chart import REPO, _replace_block
from exporter.analysis.kinds import KINDS, in_scope
from exporter.analysis.workload import CLASSES, SOURCES

TROUBLESHOOTING = "docs/troubleshooting.md"


def _code(words: tuple[str, ...] | list[str], last: str = ", ") -> str:
    quoted = [f"`{w}`" for w in words]
    return ", ".join(quoted[:-1]) + last + quoted[-1] if len(quoted) > 1 else "".join(quoted)


def inputs_block() -> str:
    lines = ["| kind | needs | on the node |", "|---|---|---|"]
    lines += [f"| `{k.name}` | {k.inputs.needs} | {k.inputs.series} |" for k in KINDS.values()]
    return "\n".join(lines) + "\n"


def render_troubleshooting() -> str:
    return _replace_block(
        (REPO / TROUBLESHOOTING).read_text(), "verdict-inputs", inputs_block(), comment="<!--"
    )


def _verdict_row() -> str:
    causes = "; ".join(
        f"for `{k.name}` {_code(k.labelled_causes, ' or ')}" for k in KINDS.values() if k.labelled_causes
    )
    pod = _code(list(in_scope("pod")), " and ")
    return (
        f"| `gpu_bottleneck` | gauge 0/1 | | `kind` = {_code(list(KINDS))}; `cause` | 1 while the verdict "
        f"holds. `cause`: {causes}; empty otherwise and while 0. On a GPU pods share (time-slicing, MPS) "
        f"{pod} are judged on each pod's share: their series carry its `namespace` and `pod` (the GPU's "
        "own series of those kinds stay 0); on a GPU in MIG mode they are judged on each MIG instance and "
        "carry its `mig_instance` (and `mig_compute_instance` where its GPU instance is split into several "
        "compute instances), `namespace` and `pod` |"
    )


def _workload_row() -> str:
    return (
        f"| `gpu_workload_class` | gauge 1 | | `workload` = {_code(list(CLASSES))}; `source` = "
        f"{_code([*SOURCES, 'default'])} | the class the GPU's time is judged as (what its idle time "
        "means: waiting for input, idle capacity, a stage's turn), and what decided it: `flag` (replay's "
        "`--workload`), `log` (the pod's log: vLLM, SGLang, TGI, Triton, Jupyter lines), `process` (what its "
        "processes run, such as ollama or tritonserver: live where `processOwners` is on, in replay from a "
        "log's process table), `image` (its container's image, from the container runtime's bundle files: "
        "`vllm/vllm-openai`, `nvcr.io/nvidia/tritonserver`, `quay.io/jupyter/...`), `name` (its pod or "
        "container name), `shape` (quiet stretches coming like a server's requests, a reservation quiet "
        "from its start, a pipeline's turns, a rank whose peers wait for it); "
        "`training` with `default` while nothing says otherwise. One series per GPU |"
    )


def _score_row() -> str:
    scores = ", ".join(f"for `{k.name}` {k.score}" for k in KINDS.values() if k.score)
    return (
        "| `gpu_bottleneck_score` | gauge | ratio | `kind` | *detail: scores.* strength of the evidence, "
        f"0-1, whether or not the verdict holds ({scores}) |"
    )


def metrics_rows(text: str) -> str:
    """docs/metrics.md with its verdict rows as the registry has them."""
    rows = (
        ("gpu_bottleneck", _verdict_row()),
        ("gpu_bottleneck_score", _score_row()),
        ("gpu_workload_class", _workload_row()),
    )
    for family, row in rows:
        text, n = re.subn(rf"^\| `{family}` \|.*$", lambda _, row=row: row, text, count=1, flags=re.M)
        if n != 1:
            raise ValueError(f"docs/metrics.md has no row of {family}")
    return text
