"""A bound on repeated log lines: a flood of one message (an accept error per connection attempt, a bad
request per slow client) is written a few times, then counted, then written again with the count."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from exporter.policy.thresholds import LOG_REPEAT_BURST, LOG_REPEAT_INTERVAL

MAX_KEYS = 512  # distinct messages followed at once; the least recent is forgotten past this


@dataclass
class _Seen:
    since: float
    written: int = 0
    held: int = 0


class RepeatLimit(logging.Filter):
    """Lets ``burst`` records of one (logger, level, message template) through per ``interval``; the
    next one after the interval carries how many were held back. Attach it to handlers: a filter on a
    logger does not see what its children propagate."""

    def __init__(
        self,
        burst: int = int(LOG_REPEAT_BURST.value),
        interval: float = LOG_REPEAT_INTERVAL.value,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.burst, self.interval, self.clock = burst, interval, clock
        self._seen: OrderedDict[tuple[str, int, str], _Seen] = OrderedDict()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno, str(record.msg))
        now = self.clock()
        seen = self._seen.get(key)
        if seen is None or now - seen.since >= self.interval:
            held = seen.held if seen else 0
            seen = self._seen[key] = _Seen(since=now)
            if held:
                record.msg = f"{record.getMessage()} ({held} more like it held back in {self.interval:.0f} s)"
                record.args = ()
        self._seen.move_to_end(key)
        while len(self._seen) > MAX_KEYS:
            self._seen.popitem(last=False)
        if seen.written < self.burst:
            seen.written += 1
            return True
        seen.held += 1
        return False


def limit_repeats(logger: logging.Logger) -> RepeatLimit:
    """Puts one RepeatLimit on every handler of ``logger`` (the root logger's, for the command)."""
    limit = RepeatLimit()
    for handler in logger.handlers:
        if not any(isinstance(f, RepeatLimit) for f in handler.filters):
            handler.addFilter(limit)
    return limit
