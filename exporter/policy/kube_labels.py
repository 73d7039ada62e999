"""How kube-state-metrics names a pod label, shared by the simulated fleet's kube_pod_labels (runtime)
and the recording rules that read them (devtools/artifacts/recording.py)."""

from __future__ import annotations

import re


def ksm_label(name: str) -> str:
    """The label kube-state-metrics gives a pod label: ``label_`` and the name with every character
    outside [a-zA-Z0-9_] replaced by ``_``."""
    return "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", name)
