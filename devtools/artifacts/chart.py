"""The Helm chart's generated parts: the alert thresholds and rule switches in values.yaml, the
PrometheusRule template, values.schema.json, the values tables of the chart README, the chart's
copies of the dashboards (Helm reads files inside the chart only), and Chart.yaml's version and
appVersion (pyproject.toml's version: see devtools/release.py).

values.yaml and the README are written by hand around ``@generated`` markers; only the blocks between
the markers are replaced. The schema is derived from values.yaml itself, so the two cannot drift.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from devtools import release
from devtools.artifacts import alerts, cost_rules, dashboards, recording
from exporter.config.settings import DURATION_RANGES
from exporter.policy import thresholds as th
from exporter.policy.detail import CATEGORIES as DETAIL_CATEGORIES

CHART = "helm/gpu-bottleneck-exporter"
REPO = Path(__file__).resolve().parents[2]
DURATION = r"^(0|([0-9]+(ms|s|m|h|d|w|y))+)$"


def camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(word.capitalize() for word in rest)


def _first_sentence(text: str) -> str:
    return re.split(r"(?<=[.:])\s", text, maxsplit=1)[0].rstrip(".:") + "."


def _replace_block(text: str, name: str, body: str, comment: str = "#") -> str:
    """Replace what lies between the ``@generated-begin NAME`` and ``@generated-end NAME`` lines."""
    pattern = re.compile(
        rf"^(?P<indent>[ \t]*){re.escape(comment)} @generated-begin {name}\b.*?\n(?P<old>.*?)"
        rf"^(?P=indent){re.escape(comment)} @generated-end {name}\b",
        re.S | re.M,
    )
    match = pattern.search(text)
    if not match:
        raise ValueError(f"no @generated-begin/end {name} block")
    return text[: match.start("old")] + body + text[match.end("old") :]


# ---- values.yaml --------------------------------------------------------------------------------------


def _thresholds_block() -> str:
    lines = [
        "  # Thresholds of the alert rules on raw signals, from the exporter's threshold table",
        "  # (docs/thresholds.md); the detectors behind gpu_bottleneck keep their own.",
        "  thresholds:",
    ]
    for key, t in alerts.PARAMS.items():
        text = f"-- `{t.key}` ({t.unit}): {_first_sentence(t.reason)}"
        lines += textwrap.wrap(text, 104, initial_indent="    # ", subsequent_indent="    # ")
        lines.append(f"    {camel(key)}: {alerts.number(t.value)}")
    return "\n".join(lines) + "\n"


def _rules_block() -> str:
    lines = [
        "  # Every alert of the rule file: whether it is on, how long its condition holds before it",
        "  # fires (`for`), and its severity (critical, warning or info).",
        "  rules:",
    ]
    for a in alerts.ALERTS:
        lines.append(f"    # -- {a.summary}")
        lines.append(f"    {a.name}: {{enabled: true, for: {a.for_}, severity: {a.severity}}}")
    return "\n".join(lines) + "\n"


EXAMPLE_PRICES = "Examples of on-demand prices, not quotes: set what your GPUs cost you."


def _cost_block() -> str:
    """The cost values: the threshold table's example prices, its currency and default price."""
    lines = [
        "# What the ledger's lost GPU time costs (docs/cost.md): the exporter exposes a price per GPU",
        "# model (gpu_node_price_per_hour) and the cost rules price each ledger state by pod (on the",
        "# shards when prometheusRule.scope splits the rules), job and namespace (in the global ruler).",
        f"# {EXAMPLE_PRICES}",
        "cost:",
        "  # -- Expose prices and record the cost rules; false: the exporter runs with `--price off`.",
        "  enabled: true",
        "  # -- The prices' currency, a three-letter code (ISO 4217); it labels every price and cost series.",
        f"  currency: {th.COST_CURRENCY.value}",
        "  # -- Price of a GPU-hour of a model no entry of `pricePerGpuHour` matches. An example, not a",
        "  # quote.",
        f"  defaultPricePerGpuHour: {alerts.number(th.COST_DEFAULT_PRICE.value)}",
        "  # -- Price of a GPU-hour by GPU model, matched in the NVML name ignoring case, longest first; an",
        "  # entry set to null is dropped. " + EXAMPLE_PRICES,
        "  pricePerGpuHour:",
    ]
    lines += [f"    {json.dumps(m)}: {alerts.number(t.value)}" for m, t in th.GPU_HOUR_PRICES.items()]
    return "\n".join(lines) + "\n"


def values() -> str:
    text = (REPO / CHART / "values.yaml").read_text()
    text = _replace_block(text, "thresholds", _thresholds_block())
    text = _replace_block(text, "cost", _cost_block())
    return _replace_block(text, "rules", _rules_block())


# ---- the documented values, read back from values.yaml -------------------------------------------------


@dataclass(frozen=True)
class Value:
    path: tuple[str, ...]
    description: str
    default: object

    @property
    def name(self) -> str:
        return ".".join(self.path)


_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w.-]*):(?P<rest>.*)$")


def documented(text: str) -> list[Value]:
    """Every value with a ``# --`` comment, in file order, with its default. A documented key whose
    value is a block (a security context, an affinity) is one value; its children are not listed."""
    data = yaml.safe_load(text)
    found: list[Value] = []
    stack: list[tuple[int, str]] = []
    comment: list[str] | None = None
    skip_below: int | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            comment = [stripped[4:].strip()]
            continue
        if stripped.startswith("#"):
            if comment is not None and not stripped.startswith("# @generated"):
                comment.append(stripped[1:].strip())
            continue
        match = _KEY.match(line)
        if not match:
            continue
        indent = len(match["indent"])
        if skip_below is not None and indent > skip_below:
            continue
        skip_below = None
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = (*(k for _, k in stack), match["key"])
        if comment is not None:
            default = data
            for key in path:
                default = default[key]
            found.append(Value(path, " ".join(comment), default))
            comment = None
            if not match["rest"].strip():
                skip_below = indent
            continue
        stack.append((indent, match["key"]))
    return found


# ---- values.schema.json -----------------------------------------------------------------------------

_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_OBJECT = {"type": "object"}
_ARRAY = {"type": "array"}
_PORT = {"type": "integer", "minimum": 1, "maximum": 65535}
# a number of seconds, or the string `--set` makes of a fraction (Helm converts only integers). Its range
# is checked by the templates (gbe.seconds, bounds from the exporter's own table): JSON schema's messages
# for a bound ("exclusiveMinimum: got 0, want 0") do not tell a user what is wanted.
_SECONDS = {"type": ["number", "string"]}

# values whose shape is Kubernetes' or prometheus-operator's own: checked by the API server, not here
_PASSTHROUGH: dict[str, dict] = {
    "imagePullSecrets": _ARRAY,
    "commonLabels": _STRING_MAP,
    "exporter.extraArgs": {"type": "array", "items": {"type": "string"}},
    "exporter.extraEnv": _ARRAY,
    "securityContext": _OBJECT,
    "podSecurityContext": _OBJECT,
    "resources": _OBJECT,
    "livenessProbe": _OBJECT,
    "readinessProbe": _OBJECT,
    "nodeSelector": _STRING_MAP,
    "affinity": _OBJECT,
    "tolerations": _ARRAY,
    "nvidiaEnv": _STRING_MAP,
    "updateStrategy": _OBJECT,
    "podAnnotations": _STRING_MAP,
    "podLabels": _STRING_MAP,
    "extraVolumes": _ARRAY,
    "extraVolumeMounts": _ARRAY,
    "serviceAccount.annotations": _STRING_MAP,
    "service.annotations": _STRING_MAP,
    "service.labels": _STRING_MAP,
    "dashboards.additionalLabels": _STRING_MAP,
    "dashboards.annotations": _STRING_MAP,
    "prometheusRule.additionalLabels": _STRING_MAP,
    "prometheusRule.alertLabels": _STRING_MAP,
    "prometheusRule.globalRuler.additionalLabels": _STRING_MAP,
    **{
        f"{monitor}.{key}": schema
        for monitor in ("serviceMonitor", "podMonitor")
        for key, schema in (
            ("additionalLabels", _STRING_MAP),
            ("relabelings", _ARRAY),
            ("metricRelabelings", _ARRAY),
            ("dropTargetLabels", {"type": "array", "items": {"type": "string", "minLength": 1}}),
            ("interval", {"type": "string", "pattern": DURATION}),
            ("scrapeTimeout", {"type": "string", "pattern": DURATION}),
            ("tlsConfig", _OBJECT),
            ("basicAuth", _OBJECT),
        )
    },
    "kubeRbacProxy.resources": _OBJECT,
    "kubeRbacProxy.extraArgs": {"type": "array", "items": {"type": "string"}},
    "networkPolicy.prometheusPodLabels": _STRING_MAP,
    "networkPolicy.pushers.namespaceLabels": _STRING_MAP,
    "networkPolicy.pushers.podLabels": _STRING_MAP,
}

# driver.platform: the presets of templates/_helpers.tpl (gbe.driver)
DRIVER_PLATFORMS = ("generic", "runtime-class", "gpu-operator", "gke-cos", "eks-al2", "eks-bottlerocket")

# a price per GPU-hour, or the string `--set` makes of a fraction
_PRICE = {"type": "number", "minimum": 0, "maximum": th.PRICE_MAX.value}
_PRICE_TEXT = {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?$"}

# Kubernetes' names, empty for the default: the API server would refuse anything else only at install
# time, after a template had written it into every manifest (a newline or `$(...)` inside a name).
# Resource names are DNS labels (a Service's must start with a letter, and the full name names one);
# the chart's name is also the app.kubernetes.io/name label and a part of the full name.
_DNS_LABEL = {"type": "string", "maxLength": 63, "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$"}
_SERVICE_NAME = {"type": "string", "maxLength": 63, "pattern": r"^([a-z]([-a-z0-9]*[a-z0-9])?)?$"}
_SUBDOMAIN = {"type": "string", "maxLength": 253, "pattern": r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?)?$"}
_NAMES: dict[str, dict] = {
    "nameOverride": _DNS_LABEL,
    "fullnameOverride": _SERVICE_NAME,
    "namespaceOverride": _DNS_LABEL,
    "serviceAccount.name": _SUBDOMAIN,
    "serviceMonitor.namespace": _DNS_LABEL,
    "podMonitor.namespace": _DNS_LABEL,
    "prometheusRule.namespace": _DNS_LABEL,
    "dashboards.namespace": _DNS_LABEL,
}

_CONSTRAINTS: dict[str, dict] = {
    **_NAMES,
    # any tenant can label a pod of its own like Prometheus: the namespace is what keeps them out
    "networkPolicy.prometheusNamespaceLabels": {**_STRING_MAP, "minProperties": 1},
    "exporter.port": _PORT,
    "service.port": _PORT,
    "exporter.interval": _SECONDS,
    "exporter.window": _SECONDS,
    "exporter.collectTimeout": _SECONDS,
    "exporter.logLevel": {"type": "string", "enum": ["debug", "info", "warning", "error"]},
    "prometheusRule.jobLabels": {"type": "array", "items": {"type": "string", "minLength": 1}},
    "prometheusRule.scope": {"type": "string", "enum": [*alerts.SCOPES, "split"]},
    "exporter.detail": {
        "type": "array",
        "uniqueItems": True,
        "items": {"type": "string", "enum": [*DETAIL_CATEGORIES, "all"]},
    },
    "image.pullPolicy": {"type": "string", "enum": ["Always", "IfNotPresent", "Never"]},
    "image.digest": {"type": "string", "pattern": r"^(|sha256:[0-9a-f]{64})$"},
    "containerRuntime.type": {"type": "string", "enum": ["containerd", "crio", "none"]},
    "service.type": {"type": "string", "enum": ["ClusterIP", "NodePort", "LoadBalancer"]},
    "terminationGracePeriodSeconds": {"type": "integer", "minimum": 0},
    "prometheusRule.runbookBaseUrl": {"type": "string", "pattern": "^https?://"},
    "driver.platform": {"type": "string", "enum": list(DRIVER_PLATFORMS)},
    "driver.hostPath": {"type": "string", "pattern": "^(|/.*)$"},
    "driver.libDirs": {"type": "array", "items": {"type": "string", "pattern": "^[^/]"}},
    "criticalPodsQuota.pods": {"type": "integer", "minimum": 1},
    "serviceMonitor.scheme": {"type": "string", "enum": ["", "http", "https"]},
    "podMonitor.scheme": {"type": "string", "enum": ["", "http", "https"]},
    "kubeRbacProxy.port": _PORT,
    "cost.currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
    "cost.defaultPricePerGpuHour": {"anyOf": [_PRICE, _PRICE_TEXT]},
    "cost.pricePerGpuHour": {
        "type": "object",
        "propertyNames": {
            "minLength": 1,
            "maxLength": int(th.PRICE_MODEL_CHARS_MAX.value),
            "pattern": "^[^,=]+$",
        },
        "additionalProperties": {"anyOf": [_PRICE, _PRICE_TEXT, {"type": "null"}]},
        "maxProperties": int(th.PRICE_ENTRIES_MAX.value) - 1,
    },
}


def _threshold_schema(key: str) -> dict:
    """A number, or the string `--set` makes of one (Helm converts only integers)."""
    if alerts.PARAMS[key].unit == "ratio":
        number, text = {"type": "number", "minimum": 0, "maximum": 1}, r"^(0(\.[0-9]+)?|1(\.0+)?|\.[0-9]+)$"
    else:
        number, text = {"type": "number", "minimum": 0}, r"^[0-9]+(\.[0-9]+)?$"
    return {"anyOf": [number, {"type": "string", "pattern": text}]}


def _rule_schema() -> dict:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["enabled", "for", "severity"],
        "properties": {
            "enabled": {"type": "boolean"},
            "for": {"type": "string", "pattern": DURATION},
            "severity": {"type": "string", "enum": list(th.SEVERITIES)},
        },
    }


def _inferred(value: object) -> dict:
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int | float):
        return {"type": "number"}
    if isinstance(value, str):
        return {"type": "string"}
    if isinstance(value, list):
        return {"type": "array"}
    return {"type": "object"}


def schema_of(text: str) -> dict:
    """The JSON schema of the chart's values: every section closed (a misspelt key is an error)."""
    docs = {v.name: v for v in documented(text)}
    thresholds = {f"prometheusRule.thresholds.{camel(k)}": k for k in alerts.PARAMS}
    rules = {f"prometheusRule.rules.{a.name}" for a in alerts.ALERTS}

    def node(value: object, path: tuple[str, ...]) -> dict:
        name = ".".join(path)
        if name in thresholds:
            schema = _threshold_schema(thresholds[name])
        elif name in rules:
            schema = _rule_schema()
        elif name in _PASSTHROUGH:
            schema = dict(_PASSTHROUGH[name])
        elif name in _CONSTRAINTS:
            schema = dict(_CONSTRAINTS[name])
        elif isinstance(value, dict):
            schema = {
                "type": "object",
                "additionalProperties": False,
                "properties": {k: node(v, (*path, k)) for k, v in value.items()},
            }
            if name in ("prometheusRule.rules", "prometheusRule.thresholds"):
                schema["required"] = list(value)
        else:
            schema = _inferred(value)
        if name in docs:
            schema = {"description": docs[name].description, **schema}
        return schema

    root = node(yaml.safe_load(text), ())
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "gpu-bottleneck-exporter values",
    } | root


def schema() -> str:
    return json.dumps(schema_of(values()), indent=2, ensure_ascii=False) + "\n"


# ---- README values tables -------------------------------------------------------------------------------


def _default(value: object) -> str:
    return "`" + json.dumps(value, separators=(", ", ": ")).replace("|", "\\|") + "`"


def _values_tables() -> str:
    rule_prefix = ("prometheusRule", "rules")
    rows = ["| value | default | description |", "|---|---|---|"]
    rule_rows = ["| alert | enabled | for | severity | summary |", "|---|---|---|---|---|"]
    for v in documented(values()):
        if v.path[:2] == rule_prefix:
            d = v.default
            rule_rows.append(
                f"| [{v.path[-1]}](../../docs/runbooks/{v.path[-1]}.md) | `{json.dumps(d['enabled'])}` "
                f"| `{d['for']}` | `{d['severity']}` | {v.description} |"
            )
            continue
        description = v.description.replace("|", "\\|")
        rows.append(f"| `{v.name}` | {_default(v.default)} | {description} |")
    return (
        "\n".join(rows)
        + "\n\nEach alert is one value, `prometheusRule.rules.<Alert>`, with these defaults:\n\n"
        + "\n".join(rule_rows)
        + "\n"
    )


def readme() -> str:
    text = (REPO / CHART / "README.md").read_text()
    return _replace_block(text, "values", _values_tables(), comment="<!--")


# ---- PrometheusRule template ----------------------------------------------------------------------------

_PROM_TEMPLATE = re.compile(r"\{\{|\}\}")
_PLACEHOLDER = re.compile(r"\$\{(\w+)\}")


def _helm_escape(text: str) -> str:
    """Prometheus's own {{ }} templates, escaped so that Helm prints them verbatim: the whole text as
    one raw string where it can be, else each brace pair on its own."""
    if not _PROM_TEMPLATE.search(text):
        return text
    if "`" not in text and not _PLACEHOLDER.search(text):
        return "{{`" + text + "`}}"
    return _PROM_TEMPLATE.sub(lambda m: '{{ "{{" }}' if m.group() == "{{" else '{{ "}}" }}', text)


def _helm_values(text: str) -> str:
    def value(match: re.Match[str]) -> str:
        key = match.group(1)
        if key == "job":
            return '{{ include "gbe.job" $ }}'
        return f'{{{{ include "gbe.number" $t.{camel(key)} }}}}'

    return _PLACEHOLDER.sub(value, text)


def _scalar(text: str) -> str:
    """One YAML scalar (quoted as needed), Helm-escaped, with ${placeholders} as chart values."""
    dumped = yaml.dump(text, Dumper=yaml.SafeDumper, width=1 << 16, allow_unicode=True).rstrip("\n")
    dumped = dumped.removesuffix("\n...")
    return _helm_values(_helm_escape(dumped))


def _in(scopes: str) -> str:
    """The template condition: the PrometheusRule being rendered ($doc) holds a group of ``scopes``."""
    return f'(has $doc (list "all" "{scopes}"))'


def _scope(group: str) -> str:
    return "global" if group in alerts.GLOBAL_GROUPS else "node"


def prometheusrule() -> str:
    """One PrometheusRule with every group (prometheusRule.scope `all`), the groups a Prometheus shard
    runs (`node`) or a global ruler runs (`global`), or both of those (`split`: `<name>` and
    `<name>-global`, labelled for the ruler that selects each)."""
    out = [
        "{{- /* generated from devtools/artifacts/alerts.py by `make artifacts`; do not edit */ -}}",
        '{{- if include "gbe.rules" . }}',
        "{{- $r := .Values.prometheusRule.rules }}",
        "{{- $t := .Values.prometheusRule.thresholds }}",
        '{{- $scope := .Values.prometheusRule.scope | default "all" }}',
        '{{- $docs := ternary (list "node" "global") (list $scope) (eq $scope "split") }}',
        "{{- range $doc := $docs }}",
        "---",
        "apiVersion: monitoring.coreos.com/v1",
        "kind: PrometheusRule",
        "metadata:",
        '  name: {{ include "gbe.fullname" $ }}'
        '{{ if and (eq $scope "split") (eq $doc "global") }}-global{{ end }}',
        '  namespace: {{ $.Values.prometheusRule.namespace | default (include "gbe.namespace" $) }}',
        "  labels:",
        '    {{- include "gbe.labels" $ | nindent 4 }}',
        "    {{- $labels := $.Values.prometheusRule.additionalLabels }}",
        '    {{- if and (eq $scope "split") (eq $doc "global") }}',
        "    {{- $labels = $.Values.prometheusRule.globalRuler.additionalLabels }}",
        "    {{- end }}",
        "    {{- with $labels }}",
        "    {{- toYaml . | nindent 4 }}",
        "    {{- end }}",
        "spec:",
        "  groups:",
        *_recording_groups(),
    ]
    for group in dict.fromkeys(a.group for a in alerts.ALERTS):
        members = [a for a in alerts.ALERTS if a.group == group]
        enabled = " ".join(f"$r.{a.name}.enabled" for a in members)
        out.append(f"    {{{{- if and {_in(_scope(group))} (or {enabled}) }}}}")
        out += [f"    - name: {group}", "      rules:"]
        for a in members:
            out += [
                f"        {{{{- if $r.{a.name}.enabled }}}}",
                f"        - alert: {a.name}",
                f"          expr: {_scalar(a.expr)}",
                f'          {{{{- if not (has $r.{a.name}.for (list "" "0" "0s" "0m")) }}}}',
                f"          for: {{{{ $r.{a.name}.for }}}}",
                "          {{- end }}",
                "          labels:",
                f"            severity: {{{{ $r.{a.name}.severity }}}}",
                "            {{- with $.Values.prometheusRule.alertLabels }}",
                "            {{- toYaml . | nindent 12 }}",
                "            {{- end }}",
                "          annotations:",
                f"            summary: {_scalar(a.summary)}",
                f"            description: {_scalar(a.description)}",
                f"            runbook_url: {{{{ $.Values.prometheusRule.runbookBaseUrl }}}}{a.name}.md",
                "        {{- end }}",
            ]
        out.append("    {{- end }}")
    out += ["{{- end }}", "{{- end }}"]
    return "\n".join(out) + "\n"


def _recording_groups() -> list[str]:
    """The recording rules: the job-identity rule built from prometheusRule.jobLabels (kube-state-metrics'
    names for them), the others as generated, their rate window the threshold table's."""
    out = []
    for group in alerts.RECORDING_GROUPS:
        cost = group in (cost_rules.GROUP, cost_rules.JOB_GROUP)
        condition = _in(_scope(group))
        if cost:
            condition = f"and $.Values.cost.enabled {condition}"
        out += [f"    {{{{- if {condition} }}}}", f"    - name: {group}", "      rules:"]
        for r in (r for r in recording.RECORDS + cost_rules.RECORDS if r.group == group):
            out.append(f"        - record: {r.record}")
            if r.record == recording.INFO:
                out += [
                    "          expr: |-",
                    "            {{- range $i, $l := $.Values.prometheusRule.jobLabels }}",
                    '            {{- $k := printf "label_%s" (regexReplaceAll "[^a-zA-Z0-9_]" $l "_") }}',
                    "            {{ if $i }}or on (namespace, pod) {{ end }}max by (namespace, pod, "
                    + recording.JOB_LABEL
                    + ') (label_replace(kube_pod_labels{ {{- $k }}!=""}, "'
                    + recording.JOB_LABEL
                    + '", "$1", "{{ $k }}", "(.+)"))',
                    "            {{- end }}",
                ]
                continue
            expr = r.expr.replace("${window}", recording.window_text()).replace("$$", "$")
            out.append(f"          expr: {_scalar(expr)}")
        out.append("    {{- end }}")
    return out


# ---- the duration checks ---------------------------------------------------------------------------------

# chart value -> the exporter's setting; the chart refuses what the exporter would refuse at start
DURATION_VALUES = {
    "exporter.interval": "interval_s",
    "exporter.window": "window_s",
    "exporter.collectTimeout": "collect_timeout_s",
}


def durations_template() -> str:
    """The exporter's accepted range of each duration value, for the gbe.seconds check (_helpers.tpl)."""
    out = [
        "{{- /* generated from exporter/config/settings.py's DURATION_RANGES by `make artifacts`; "
        "do not edit */ -}}",
        '{{- define "gbe.durationRanges" -}}',
    ]
    for value, field in DURATION_VALUES.items():
        low, low_allowed, high, why = DURATION_RANGES[field]
        entry = {"low": float(low), "lowAllowed": low_allowed, "high": float(high), "why": why}
        out.append(f"{value}: {json.dumps(entry)}")
    out.append("{{- end -}}")
    return "\n".join(out) + "\n"


# ---- Chart.yaml -----------------------------------------------------------------------------------------


def chart_yaml() -> str:
    """Chart.yaml as written by hand, its version and appVersion pyproject.toml's version."""
    text = (REPO / CHART / "Chart.yaml").read_text()
    v = release.version(REPO)
    for key, value in (("version", v), ("appVersion", f'"{v}"')):
        text, n = re.subn(rf"^{key}: .*$", f"{key}: {value}", text, flags=re.M)
        if n != 1:
            raise ValueError(f"Chart.yaml: expected one top-level {key} line, found {n}")
    return text


# ---- registry ---------------------------------------------------------------------------------------------


FILES: dict[str, Callable[[], str]] = {
    f"{CHART}/Chart.yaml": chart_yaml,
    f"{CHART}/templates/_durations.tpl": durations_template,
    f"{CHART}/values.yaml": values,
    f"{CHART}/values.schema.json": schema,
    f"{CHART}/README.md": readme,
    f"{CHART}/templates/prometheusrule.yaml": prometheusrule,
    **{f"{CHART}/{path}": dashboards.renderer(path) for path in dashboards.DASHBOARDS},
}
