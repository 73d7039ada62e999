"""The chart's cost values: the prices reach the exporter as --price (GBE_PRICE), the cost rules and the
dashboards' currency follow them, and the schema refuses what the exporter would."""

from __future__ import annotations

import json

import pytest
import yaml

from devtools.artifacts import cost_rules
from exporter.config.settings import Settings
from exporter.policy.cost import DEFAULT
from tests.helm.chart import _template_args, env, helm, one, render, render_error


def _render_json(set_json: dict[str, str], sets: dict[str, str] | None = None) -> list[dict]:
    result = helm(*_template_args(sets=sets, set_json=set_json))
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def _settings(docs: list[dict]) -> Settings:
    values = env(docs)
    return Settings(price=values["GBE_PRICE"], currency=values["GBE_CURRENCY"])


def _groups(docs: list[dict]) -> list[str]:
    return [g["name"] for g in one(docs, "PrometheusRule")["spec"]["groups"]]


def test_the_default_values_pass_the_threshold_tables_prices():
    docs = render(sets={"prometheusRule.enabled": "true"})
    assert _settings(docs).prices == DEFAULT
    assert {cost_rules.GROUP, cost_rules.JOB_GROUP} <= set(_groups(docs))


def test_an_override_replaces_one_price_and_keeps_the_others():
    docs = _render_json({"cost.pricePerGpuHour": '{"H100 80GB HBM3": 3.1, "MI300X": 5}'})
    prices = _settings(docs).prices
    assert prices is not None
    assert prices.of("NVIDIA H100 80GB HBM3") == 3.1
    assert prices.of("AMD Instinct MI300X") == 5
    assert prices.of("NVIDIA L4") == DEFAULT.of("NVIDIA L4")
    assert prices.of("Some Future GPU") == DEFAULT.default


def test_turning_cost_off_stops_the_prices_and_the_rules():
    docs = render(sets={"prometheusRule.enabled": "true", "cost.enabled": "false"})
    assert env(docs)["GBE_PRICE"] == "off"
    assert _settings(docs).prices is None
    assert not {cost_rules.GROUP, cost_rules.JOB_GROUP} & set(_groups(docs))


def test_sharded_the_pod_cost_runs_on_the_shards_and_the_job_cost_in_the_global_ruler():
    """The pod rule reads one node's series; the job and namespace rules sum pods of many nodes and join
    the cluster's pod labels: with cost off neither rule document holds a cost group."""
    for cost, expected in (("true", ([cost_rules.GROUP], [cost_rules.JOB_GROUP])), ("false", ([], []))):
        docs = render(
            sets={"prometheusRule.enabled": "true", "prometheusRule.scope": "split", "cost.enabled": cost}
        )
        rules = {d["metadata"]["name"]: d["spec"]["groups"] for d in docs if d["kind"] == "PrometheusRule"}
        costs = {name: [g["name"] for g in groups if "cost" in g["name"]] for name, groups in rules.items()}
        assert costs == {
            "gbe-gpu-bottleneck-exporter": expected[0],
            "gbe-gpu-bottleneck-exporter-global": expected[1],
        }


def test_the_dashboards_currency_follows_the_value():
    docs = render(sets={"dashboards.enabled": "true", "cost.currency": "EUR"})
    assert env(docs)["GBE_CURRENCY"] == "EUR"
    units = {
        p["fieldConfig"]["defaults"].get("unit")
        for cm in docs
        if cm["kind"] == "ConfigMap" and "dashboards" not in cm["metadata"]["name"]
        for text in cm["data"].values()
        if text.lstrip().startswith("{")
        for p in json.loads(text).get("panels", [])
        if "fieldConfig" in p
    }
    assert "currencyEUR" in units and "currencyUSD" not in units


@pytest.mark.parametrize(
    ("sets", "set_json", "words"),
    [
        ({"cost.currency": "usd"}, None, "currency"),
        ({"cost.defaultPricePerGpuHour": "5000"}, None, "defaultPricePerGpuHour"),
        (None, {"cost.pricePerGpuHour": '{"H100": 5000}'}, "pricePerGpuHour"),
        (None, {"cost.pricePerGpuHour": '{"H100,A100": 2}'}, "H100,A100"),
        (None, {"cost.pricePerGpuHour": '{"H100": "cheap"}'}, "pricePerGpuHour"),
    ],
)
def test_schema_refuses_bad_prices(sets, set_json, words):
    error = render_error(sets, set_json)
    assert words in error, error
