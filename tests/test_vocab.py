"""NVML's vocabulary is defined once (exporter/policy/nvml_vocab.py); the renderer depends on no source."""

from __future__ import annotations

import ast
from pathlib import Path

import pynvml

from exporter.policy import nvml_vocab

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_metrics_imports_no_source_module() -> None:
    imported = _imports(ROOT / "exporter" / "serve" / "metrics.py")
    assert not [name for name in imported if name.startswith("exporter.sources")]


def test_vocabulary_users_import_it() -> None:
    for rel in (
        "sources/nvml.py",
        "serve/metrics.py",
        "analysis/features.py",
        "sim/driver.py",
        "sim/physics.py",
    ):
        assert "exporter.policy.nvml_vocab" in _imports(ROOT / "exporter" / rel), rel


def test_vocabulary_matches_the_bindings() -> None:
    """The numbers are nvml.h's: the bindings that know a name agree with ours."""
    assert pynvml.nvmlClocksEventReasonSwThermalSlowdown == nvml_vocab.SW_THERMAL
    assert pynvml.nvmlClocksEventReasonHwThermalSlowdown == nvml_vocab.HW_THERMAL
    assert pynvml.nvmlClocksEventReasonSwPowerCap == nvml_vocab.SW_POWER_CAP
    assert pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown == nvml_vocab.HW_POWER_BRAKE
    assert pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN in nvml_vocab.FI_THROTTLE_NS
    assert pynvml.NVML_GPU_FABRIC_STATE_COMPLETED == nvml_vocab.FABRIC_COMPLETED
