"""A GPU's power envelope: what it draws doing nothing (its floor) and at most (its ceiling), and where a
reading sits between them. Utilization only says a kernel was resident; where the power sits in the
envelope says whether that kernel computed or spun (a collective polling a flag, a copy crawling over the
host link). Pure: learned from the points it is shown.

The ceiling is the enforced power limit, else the default limit, else the board table's TDP (by name),
else the most the GPU was seen drawing while busy, raised to a multiple of its floor (a GPU seen only
spinning would otherwise take its spin for its ceiling). The floor is the lowest draw the GPU showed with
no kernel resident, else the board table's idle draw.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

from exporter.analysis.points import GpuPoint
from exporter.policy.thresholds import POWER_FLOOR_TO_CEILING, UTIL_IDLE_LINE, board_idle, board_tdp


@functools.cache
def board_power(name: str) -> tuple[float | None, float | None]:
    """The board table's (TDP, idle draw) for a GPU name: a scan of the table, asked every second for
    every GPU about names that never change."""
    return board_tdp(name), board_idle(name)


@dataclass(frozen=True)
class Envelope:
    floor_w: float | None = None
    floor_from: str = ""  # "idle samples" | "board table"
    ceiling_w: float | None = None
    ceiling_from: str = ""  # "power limit" | "default limit" | "board table" | "busy draw" | "6 x idle floor"

    def position(self, watts: float) -> float | None:
        """Where ``watts`` sits between floor (0) and ceiling (1); None without a ceiling."""
        if not self.ceiling_w:
            return None
        floor = self.floor_w if self.floor_w is not None and self.floor_w < self.ceiling_w else 0.0
        return max(0.0, (watts - floor) / (self.ceiling_w - floor))

    def describe(self) -> str:
        """One line for summaries: which evidence set each end."""
        if not self.ceiling_w:
            return "no power envelope (no power limit, board name or busy draw)"
        floor = (
            f"idle {self.floor_w:.0f} W ({self.floor_from})" if self.floor_w is not None else "idle unknown"
        )
        return f"{floor}, ceiling {self.ceiling_w:.0f} W ({self.ceiling_from})"


@dataclass
class EnvelopeLearner:
    """One GPU's learned ends: the lowest no-kernel draw, the highest busy draw."""

    idle_w: float | None = None
    busy_w: float | None = None
    limit_w: float | None = None
    default_w: float | None = None
    # the last envelope made and what it was made of: asked twice per GPU every evaluation, it changes
    # only when one of the ends moves
    _made: tuple[tuple[object, ...], Envelope] | None = field(default=None, repr=False, compare=False)

    def see(self, points: Sequence[GpuPoint]) -> None:
        """A second's points: a second with no kernel resident in any sample is an idle reading."""
        powers = [p.power_w for p in points if p.power_w is not None]
        for p in reversed(points):
            if p.power_limit_w or p.power_default_w:
                self.limit_w, self.default_w = p.power_limit_w, p.power_default_w
                break
        if not powers:
            return
        if all(p.util is not None and p.util < UTIL_IDLE_LINE.value for p in points):
            mean = sum(powers) / len(powers)
            self.idle_w = mean if self.idle_w is None else min(self.idle_w, mean)

    def see_busy(self, watts: float) -> None:
        """The most it drew over a busy stretch (a high percentile of a busy window)."""
        self.busy_w = max(self.busy_w or 0.0, watts)

    def envelope(self, name: str = "") -> Envelope:
        key = (name, self.idle_w, self.busy_w, self.limit_w, self.default_w)
        made = self._made
        if made is not None and made[0] == key:
            return made[1]
        envelope = self._envelope(name)
        self._made = (key, envelope)
        return envelope

    def _envelope(self, name: str) -> Envelope:
        tdp, table_idle = board_power(name)
        floor, floor_from = self.idle_w, "idle samples"
        if floor is None and table_idle is not None:
            floor, floor_from = table_idle, "board table"
        if self.limit_w:
            return Envelope(floor, floor_from if floor is not None else "", self.limit_w, "power limit")
        if self.default_w:
            return Envelope(floor, floor_from if floor is not None else "", self.default_w, "default limit")
        if tdp:
            return Envelope(floor, floor_from if floor is not None else "", tdp, "board table")
        by_floor = POWER_FLOOR_TO_CEILING.value * floor if floor else None
        if self.busy_w and (by_floor is None or self.busy_w >= by_floor):
            return Envelope(floor, floor_from if floor is not None else "", self.busy_w, "busy draw")
        if by_floor:
            return Envelope(floor, floor_from, by_floor, f"{POWER_FLOOR_TO_CEILING.value:g} x idle floor")
        return Envelope(floor, floor_from if floor is not None else "")
