"""Error bookkeeping shared by sources and the sampler (``gpu_exporter_collect_errors_total``)."""

from __future__ import annotations

import logging
import threading
from collections import Counter

log = logging.getLogger(__name__)


class ErrorCounter:
    """Thread-safe counts of (source, error) pairs, with a log line the first time each pair occurs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str]] = Counter()

    def inc(
        self, source: str, error: str, detail: str = "", n: int = 1, level: int = logging.WARNING
    ) -> None:
        with self._lock:
            first = (source, error) not in self._counts
            self._counts[(source, error)] += n
        if first:
            log.log(
                level,
                "%s: %s%s (counted in gpu_exporter_collect_errors_total)",
                source,
                error,
                f" ({detail})" if detail else "",
            )

    def snapshot(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)
