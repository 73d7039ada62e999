"""What a GPU-hour costs: the price table the exporter exposes (``gpu_node_price_per_hour``) and replay prices
its ledger with.

The defaults are the threshold table's example prices (``cost.price.*``, examples, not quotes).
``--price 'MODEL=PRICE,...'`` overlays them: its entries are matched first, then the table's others
(``H100=3`` prices every H100, whatever the table says of ``H100 80GB HBM3``); ``*=PRICE`` sets the price
of models no entry matches, and ``off`` turns pricing off. A model matches a GPU whose NVML name
contains it, ignoring case, the longest match first (``H100 80GB HBM3`` matches ``NVIDIA H100 80GB
HBM3``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from exporter.policy import thresholds as th

CURRENCY = re.compile(r"^[A-Z]{3}$")
OFF = ("off", "none")
# a --price value longer than every allowed entry at its longest is refused before it is split
MAX_TEXT = int(th.PRICE_ENTRIES_MAX.value * (th.PRICE_MODEL_CHARS_MAX.value + 16))


@dataclass(frozen=True)
class Prices:
    """Per-GPU-hour prices by model (patterns), the price of models none matches, and the currency."""

    by_model: tuple[tuple[str, float], ...]  # longest pattern first
    default: float
    currency: str

    def of(self, name: str) -> float:
        """The price of a GPU-hour of the board named ``name`` (its NVML name)."""
        upper = name.upper()
        for pattern, price in self.by_model:
            if pattern.upper() in upper:
                return price
        return self.default

    def spec(self) -> str:
        """The prices as a --price value (every entry, then the default)."""
        return ",".join([f"{m}={p:g}" for m, p in self.by_model] + [f"*={self.default:g}"])


def _ordered(table: dict[str, float]) -> tuple[tuple[str, float], ...]:
    return tuple(sorted(table.items(), key=lambda kv: (-len(kv[0]), kv[0])))


DEFAULT = Prices(
    _ordered({model: t.value for model, t in th.GPU_HOUR_PRICES.items()}),
    th.COST_DEFAULT_PRICE.value,
    th.COST_CURRENCY.value,
)


def _price(text: str, model: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError(f"the price of {model!r} must be a number, not {text.strip()[:32]!r}") from None
    if not math.isfinite(value) or not 0 <= value <= th.PRICE_MAX.value:
        raise ValueError(
            f"the price of {model!r} must be 0-{th.PRICE_MAX.value:g} per GPU-hour, not {text.strip()[:32]}"
        )
    return value


def parse_prices(text: str, base: Prices = DEFAULT) -> Prices | None:
    """``MODEL=PRICE,...`` over ``base`` (``*=PRICE``: models none matches); ``off``: None. Raises
    ValueError with one line naming the faulty entry."""
    text = text.strip()
    if text.lower() in OFF:
        return None
    if len(text) > MAX_TEXT:
        raise ValueError(f"is {len(text)} characters long; at most {MAX_TEXT} (MODEL=PRICE entries)")
    entries = [e for e in text.split(",") if e.strip()]
    if not entries:
        raise ValueError("names no MODEL=PRICE entry (use 'off' to turn pricing off)")
    if len(entries) > th.PRICE_ENTRIES_MAX.value:
        raise ValueError(f"has {len(entries)} entries; at most {th.PRICE_ENTRIES_MAX.value:g}")
    table: dict[str, float] = {}
    default = base.default
    for entry in entries:
        model, eq, value = entry.rpartition("=")
        model = model.strip()
        if not eq or not model:
            raise ValueError(f"entry {entry.strip()[:40]!r} is not MODEL=PRICE")
        if len(model) > th.PRICE_MODEL_CHARS_MAX.value:
            raise ValueError(
                f"model {model[:40]!r}... is longer than {th.PRICE_MODEL_CHARS_MAX.value:g} characters "
                "(NVML names are shorter)"
            )
        if not model.isprintable() or "=" in model:
            raise ValueError(f"model {model[:40]!r} has a character a GPU name does not")
        if model == "*":
            default = _price(value, "*")
        else:
            table[model] = _price(value, model)
    # the entries given match first (longest first), then the base's others: 'H100=3' prices every H100
    rest = tuple((model, price) for model, price in base.by_model if model not in table)
    return Prices(_ordered(table) + rest, default, base.currency)
