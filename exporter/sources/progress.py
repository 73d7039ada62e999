"""Progress a job reports itself (``POST /v1/progress``), and the newest sign of progress of a pod from
either that or its log. The store is bounded (``progress.max_pods``) and validates strictly: a report
is ``{"namespace": str, "pod": str, "step": int}`` and nothing else."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from exporter.policy.thresholds import PROGRESS_BODY_BYTES, PROGRESS_MAX_PODS
from exporter.sources.kubeapi import AddressUnknown, InCluster, PodAddresses
from exporter.sources.podlogs import ContainerLog, PodLogsView
from exporter.sources.registry import Inputs, Registration, Round, Schedule, register

# Kubernetes names: a namespace is a DNS label, a pod name a DNS subdomain. Matched whole (fullmatch):
# with match and "$", a name ending in a newline passed.
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_POD = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
MAX_STEP = 2**53  # an exact float: the step is exported as a sample value
log = logging.getLogger(__name__)


class ProgressError(ValueError):
    """A report refused; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Reported:
    step: int
    t: float  # when it arrived
    step_seconds: float | None


def parse_report(body: bytes) -> tuple[str, str, int]:
    if len(body) > PROGRESS_BODY_BYTES.value:
        raise ProgressError(413, f"body over {PROGRESS_BODY_BYTES.value:.0f} bytes")
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise ProgressError(400, "body is not JSON") from None
    except RecursionError:  # "[" * 1000 fits in 1 KiB and runs the parser out of stack
        raise ProgressError(400, "body is nested too deeply: not a report") from None
    if not isinstance(data, dict) or set(data) != {"namespace", "pod", "step"}:
        raise ProgressError(400, "body must be exactly {namespace, pod, step}")
    namespace, pod, step = data["namespace"], data["pod"], data["step"]
    if not isinstance(namespace, str) or not _NAMESPACE.fullmatch(namespace):
        raise ProgressError(400, "namespace is not a Kubernetes namespace name")
    if not isinstance(pod, str) or not _POD.fullmatch(pod):
        raise ProgressError(400, "pod is not a Kubernetes pod name")
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
        raise ProgressError(400, f"step must be a whole number 0-{MAX_STEP}")
    return namespace, pod, step


class ProgressStore:
    """Steps reported over HTTP, by (namespace, pod). Thread-safe; at most ``progress.max_pods`` pods
    (``allowed`` narrows them to the pods holding GPUs once the sampler knows them)."""

    def __init__(self, clock: Callable[[], float] = time.time, senders: PodAddresses | None = None) -> None:
        self.clock = clock
        self.senders = senders  # with --progress-check-address on: a report only from its pod's address
        self._lock = threading.Lock()
        self._steps: dict[tuple[str, str], Reported] = {}
        self.allowed: frozenset[tuple[str, str]] | None = None
        self.refused = 0
        self._round: Round | None = None  # the last report: accepted or not, and how long it took

    def last_round(self) -> Round | None:
        return self._round

    def report(self, body: bytes, sender: str | None = None) -> None:
        """Validate and keep one report (``ProgressError`` when refused); booked as the source's round.
        ``sender``: the client's address; with ``senders`` this may ask the Kubernetes API (blocking)."""
        started = time.monotonic()
        try:
            self._keep(body, sender)
        except ProgressError:
            self._round = Round(False, self.clock(), time.monotonic() - started)
            raise
        self._round = Round(True, self.clock(), time.monotonic() - started)

    def _keep(self, body: bytes, sender: str | None) -> None:
        try:
            namespace, pod, step = parse_report(body)
            allowed = self.allowed
            if allowed is not None and (namespace, pod) not in allowed:
                raise ProgressError(404, f"{namespace}/{pod} holds no GPU on this node")
            self._check_sender(namespace, pod, sender)
        except ProgressError:
            self.refused += 1
            raise
        key, now = (namespace, pod), self.clock()
        with self._lock:
            if key not in self._steps and len(self._steps) >= PROGRESS_MAX_PODS.value:
                self.refused += 1
                raise ProgressError(429, f"progress is kept for {PROGRESS_MAX_PODS.value:.0f} pods at most")
            before = self._steps.get(key)
            seconds = before.step_seconds if before else None
            if before is not None and step > before.step and now > before.t:
                seconds = (now - before.t) / (step - before.step)
            self._steps[key] = Reported(step, now, seconds)

    def _check_sender(self, namespace: str, pod: str, sender: str | None) -> None:
        if self.senders is None:
            return
        try:
            ok = sender is not None and self.senders.check(namespace, pod, sender)
        except AddressUnknown as exc:
            raise ProgressError(503, f"cannot check the sender's address: {exc}") from None
        if not ok:
            raise ProgressError(403, f"{namespace}/{pod} is not at the sender's address")

    def forget_except(self, pods: frozenset[tuple[str, str]]) -> None:
        with self._lock:
            self.allowed = pods
            for key in [k for k in self._steps if k not in pods]:
                del self._steps[key]

    def view(self) -> dict[tuple[str, str], Reported]:
        with self._lock:
            return dict(self._steps)


def merged(view: PodLogsView | None, pushed: dict[tuple[str, str], Reported]) -> PodLogsView | None:
    """The log view with the pushed progress as containers named ``""``. A report says nothing of what the
    pod runs (its class comes from its log, its names, its processes or its shape): without the address
    check anyone holding the token can report for any GPU pod of the node, and a report that set the
    class would judge another tenant's idle server as a starving trainer."""
    if view is None and not pushed:
        return view
    extra = tuple(
        ContainerLog(ns, pod, "", r.t, r.step, r.step_seconds) for (ns, pod), r in sorted(pushed.items())
    )
    base = view or PodLogsView()
    return replace(base, containers=base.containers + extra)


def _unreachable(why: str) -> Callable[[str, str], frozenset[str]]:
    def fetch(namespace: str, pod: str) -> frozenset[str]:
        raise AddressUnknown(why)

    return fetch


def _senders(check: bool) -> PodAddresses | None:
    """The pods' addresses from the Kubernetes API; outside a cluster every push is refused (503)."""
    if not check:
        return None
    try:
        return PodAddresses(InCluster.from_environment().fetch)
    except AddressUnknown as exc:
        log.warning("--progress-check-address on: %s; every push will be refused", exc)
        return PodAddresses(_unreachable(str(exc)))


def _build(inputs: Inputs) -> ProgressStore | None:
    settings = inputs.settings
    if not settings.progress_api:
        return None
    return ProgressStore(inputs.clock, _senders(settings.progress_check_address))


# pushed: POST /v1/progress; up is whether the last report was accepted
REGISTRATION = register(
    Registration[dict[tuple[str, str], Reported]](
        "progress", Schedule.PUSHED, dict[tuple[str, str], Reported], _build
    )
)
