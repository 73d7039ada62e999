"""Prices per GPU-hour: the --price syntax over the threshold table's examples, and the one price series
per GPU model the exporter exposes for the cost rules."""

from __future__ import annotations

import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.analysis.ledger import LOST_STATES
from exporter.cli import main
from exporter.config.settings import Settings, SettingsError
from exporter.policy import thresholds as th
from exporter.policy.cost import DEFAULT, parse_prices
from exporter.serve.metrics import Renderer
from tests.conftest import step
from tests.timing import assert_within, pace, timed


def test_the_default_prices_are_the_threshold_tables():
    for model, t in th.GPU_HOUR_PRICES.items():
        assert DEFAULT.of(f"NVIDIA {model}") == t.value
    assert DEFAULT.of("Some Future GPU") == th.COST_DEFAULT_PRICE.value
    assert DEFAULT.currency == th.COST_CURRENCY.value
    # the longest match wins, ignoring case: an L40S is no L4, a 40 GB A100 no 80 GB one
    assert DEFAULT.of("NVIDIA L40S") == th.GPU_HOUR_PRICES["L40S"].value
    assert DEFAULT.of("NVIDIA L40") == th.GPU_HOUR_PRICES["L40"].value
    assert DEFAULT.of("nvidia a100-sxm4-80gb") == th.GPU_HOUR_PRICES["A100-SXM4-80GB"].value
    assert DEFAULT.of("NVIDIA A100-SXM4-40GB") == th.GPU_HOUR_PRICES["A100-SXM4"].value
    assert set(LOST_STATES) == {"input_wait", "checkpoint", "comm_wait", "stalled", "throttled", "idle"}


def test_price_entries_overlay_the_table():
    prices = parse_prices(" H100 80GB HBM3 = 3.25 , MI300X=5,*=1.5")
    assert prices is not None
    assert prices.of("NVIDIA H100 80GB HBM3") == 3.25
    assert prices.of("AMD Instinct MI300X") == 5
    assert prices.of("NVIDIA T4") == th.GPU_HOUR_PRICES["T4"].value  # untouched entries stay
    assert prices.of("Some Future GPU") == 1.5
    assert parse_prices(DEFAULT.spec()) == DEFAULT  # what the chart passes by default reads back the same
    # an entry given wins over the table's longer ones: 'H100=3' prices every H100
    assert parse_prices("H100=3").of("NVIDIA H100 80GB HBM3") == 3  # type: ignore[union-attr]
    assert parse_prices("off") is None and parse_prices(" OFF ") is None


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("H100", "not MODEL=PRICE"),
        ("=4", "not MODEL=PRICE"),
        ("H100=four", "must be a number"),
        ("H100=-1", "0-1000"),
        ("H100=inf", "0-1000"),
        ("H100=nan", "0-1000"),
        ("*=2000", "0-1000"),
        (",,,", "no MODEL=PRICE"),
        ("M" * 200 + "=1", "longer than 96"),
        ("H100\x00=1", "character"),
        (",".join(f"m{i}=1" for i in range(65)), "at most 64"),
        ("x=1," * 5000, "characters long"),
    ],
)
def test_a_bad_price_is_one_line_that_names_it(text, words):
    with pytest.raises(ValueError, match=words) as caught:
        parse_prices(text)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 200


def test_a_huge_price_value_is_refused_in_bounded_time():
    text = "H100=" + "9" * 10_000_000

    def refuse() -> None:
        with pytest.raises(ValueError):
            parse_prices(text)

    _, took = timed(refuse)
    # refused on its length, never split or parsed: under a regular expression's pass over its characters
    # (timed here and now); its digits parsed as an integer would take minutes
    scan = pace(lambda: re.fullmatch(r"[^=]*=[\d.]*", text))
    assert_within(took, scan, 10, "a ten-million-digit price")


def test_serve_refuses_a_bad_price_or_currency_with_one_line(capsys):
    assert main(["serve", "--price", "H100=cheap"]) == 2
    assert capsys.readouterr().err.strip() == (
        "gpu-bottleneck-exporter: --price: the price of 'H100' must be a number, not 'cheap'"
    )
    assert main(["serve", "--currency", "dollars"]) == 2
    assert "--currency: must be a three-letter currency code" in capsys.readouterr().err
    with pytest.raises(SettingsError):
        Settings(currency="usd")
    assert Settings(price="*=3", currency="EUR").prices.of("x") == 3  # type: ignore[union-attr]


def _prices_in(body: bytes) -> list[tuple[dict[str, str], float]]:
    return [
        (s.labels, s.value)
        for family in text_string_to_metric_families(body.decode())
        if family.name == "gpu_node_price_per_hour"
        for s in family.samples
    ]


def test_one_price_series_per_model_on_the_node(make_node, make_sampler, clock):
    sampler, _ = make_sampler(make_node("healthy"))
    snap = step(sampler, clock, cycles=2)
    models = {view.identity.name for view in snap.gpus}
    assert len(snap.gpus) == 8 and len(models) == 1
    (model,) = models
    assert _prices_in(Renderer().render(snap)[0]) == [
        ({"model": model, "currency": "USD"}, DEFAULT.of(model))
    ]
    mine = parse_prices(f"{model.split()[-1]}=2.75")
    assert _prices_in(Renderer(prices=mine).render(snap)[0]) == [({"model": model, "currency": "USD"}, 2.75)]
    assert _prices_in(Renderer(prices=None).render(snap)[0]) == []  # --price off
