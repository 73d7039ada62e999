"""The kubelet's answer (which container holds which GPU) as the pod labels use it.

The last answer is held for ``POD_LABEL_GRACE`` while the kubelet does not answer, so that a kubelet
restart does not strip and re-add every series' labels; after that the labels go rather than stay stale.
While the socket is missing it is looked for every ``KUBELET_SOCKET_WATCH`` (a cheap ``exists``), and
the kubelet is asked again within seconds of its return; the missing socket itself is counted only once
per ``KUBELET_SOCKET_RECOUNT``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from exporter.collect.poller import Call, Outcome, Poller
from exporter.policy.thresholds import KUBELET_SOCKET_RECOUNT, KUBELET_SOCKET_WATCH, POD_LABEL_GRACE
from exporter.sources.kubelet import Assignment, PodResourcesSource

log = logging.getLogger(__name__)
SOURCE = "kubelet"


class PodAssignments:
    def __init__(
        self,
        kubelet: PodResourcesSource,
        poller: Poller,
        interval_s: float,
        clock: Callable[[], float],
    ) -> None:
        """The kubelet's answers, polled as the registered ``kubelet`` source by ``poller``."""
        self.kubelet, self.poller, self.interval_s, self.clock = kubelet, poller, interval_s, clock
        self.current: tuple[Assignment, ...] = ()
        self.t: float | None = None  # wall time of the answer the labels come from
        self._mono = 0.0  # the same on the monotonic clock, for the grace period
        self._ok = False  # did the last List answer
        self._watch: Call | None = None
        self._next_watch = 0.0

    def schedule(self, mono: float) -> None:
        """While the socket is missing, look for it so that labels return within seconds."""
        if not self.kubelet.missing or self.poller.in_flight(SOURCE):
            return
        watch = self._watch
        if watch is not None and watch.done.is_set():
            self._watch = None
            if watch.result is True:  # it is back: ask the kubelet now
                self.kubelet.missing = False
                self.poller.delay(SOURCE, mono)
                return
        if self._watch is None and mono >= self._next_watch:
            self._watch = self.poller.call(os.path.exists, self.kubelet.socket_path, name="kubelet-socket")
            self._next_watch = mono + KUBELET_SOCKET_WATCH.value

    def pending(self) -> list[Call]:
        return [self._watch] if self._watch is not None and not self._watch.done.is_set() else []

    def take(self, outcome: Outcome | None, mono: float) -> None:
        """Book the kubelet's answer of this cycle (None: no call finished)."""
        self._expire(mono)
        if outcome is None:
            return
        if outcome.ok:
            self.current, self.t, self._ok, self._mono = outcome.reading, self.clock(), True, mono  # type: ignore[assignment]
            return
        self._ok = False  # the last answer holds for the grace period
        self._expire(mono)
        if outcome.error is None and self.kubelet.missing:  # not a kubelet node, or restarting: counted
            # once a minute; schedule() brings it back within seconds of its return
            self.poller.delay(SOURCE, mono + max(KUBELET_SOCKET_RECOUNT.value, self.interval_s))

    def _expire(self, mono: float) -> None:
        age = mono - self._mono
        if not self._ok and self.t is not None and age > POD_LABEL_GRACE.value:
            log.info("no kubelet answer for %.0f s: pod labels dropped", age)
            self.current, self.t = (), None

    def close(self) -> None:
        self.kubelet.close()
