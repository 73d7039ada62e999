"""A check's result and the registry entry that describes a check."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from exporter.doctor.facts import NodeFacts


class Status(StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIPPED = "skipped"


# the exit status of `doctor`: the worst result (skipped checks count as passed: nothing to judge)
EXIT_CODES = {Status.PASS: 0, Status.SKIPPED: 0, Status.WARN: 1, Status.FAIL: 2}
RANK = {Status.SKIPPED: 0, Status.PASS: 1, Status.WARN: 2, Status.FAIL: 3}


@dataclass(frozen=True)
class Result:
    """One check's verdict. ``detail`` is a word from the check's own vocabulary (``Check.details``), so
    it can be a bounded label value; ``evidence`` says what was seen, ``fix`` what to do about it."""

    check: str
    status: Status
    detail: str
    evidence: tuple[str, ...] = ()
    fix: str = ""

    def as_dict(self) -> dict[str, object]:
        return {
            "check": self.check,
            "status": self.status.value,
            "detail": self.detail,
            "evidence": list(self.evidence),
            "fix": self.fix,
        }


# details every check may report
COMMON_DETAILS = ("ok", "no_nvml", "no_data", "not_applicable", "error")


@dataclass(frozen=True)
class Check:
    name: str
    title: str  # what it looks at, for the table and the docs
    fn: Callable[[NodeFacts], Result]
    slow: bool  # needs the costly reads (P2P matrix, kubelet, runtime bundles)
    details: tuple[str, ...]  # its own warn/fail words, beside COMMON_DETAILS
    fixes: dict[str, str] = field(default_factory=dict)  # detail -> the fix printed with it

    @property
    def vocabulary(self) -> tuple[str, ...]:
        return COMMON_DETAILS + self.details


def worst(results: list[Result]) -> Status:
    return max((r.status for r in results), key=RANK.__getitem__, default=Status.PASS)
