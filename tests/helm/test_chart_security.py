"""The chart's TLS and authentication: the web config from a Secret, kube-rbac-proxy in front, a
NetworkPolicy admitting only Prometheus, and monitors whose scheme, tlsConfig and basicAuth follow.
Rendered by the real helm binary and validated against the Kubernetes and prometheus-operator schemas."""

from __future__ import annotations

import pytest

from tests.helm.chart import (
    _template_args,
    container,
    core_problems,
    cr_problems,
    env,
    helm,
    one,
    render,
    render_error,
)

WEB = {"webConfig.enabled": "true", "webConfig.secretName": "gbe-web"}


def _probes(docs: list[dict]) -> list[dict]:
    c = container(docs)
    return [c["livenessProbe"], c["readinessProbe"]]


def _endpoint(docs: list[dict], kind: str) -> dict:
    spec = one(docs, kind)["spec"]
    return (spec.get("endpoints") or spec["podMetricsEndpoints"])[0]


def test_defaults_are_plain_http_without_extras():
    docs = render(sets={"serviceMonitor.enabled": "true"})
    assert "GBE_WEB_CONFIG_FILE" not in env(docs)
    assert {d["kind"] for d in docs}.isdisjoint({"NetworkPolicy", "ClusterRole", "ClusterRoleBinding"})
    assert _endpoint(docs, "ServiceMonitor")["scheme"] == "http"
    assert all("scheme" not in p["httpGet"] for p in _probes(docs))
    pod = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False and len(pod["containers"]) == 1


@pytest.mark.parametrize("kind", ["serviceMonitor", "podMonitor"])
def test_the_web_config_comes_from_a_secret_and_the_monitors_follow(kind, tmp_path):
    monitor = "ServiceMonitor" if kind == "serviceMonitor" else "PodMonitor"
    docs = render(
        sets={
            **WEB,
            f"{kind}.enabled": "true",
            f"{kind}.tlsConfig.serverName": "gbe.monitoring.svc",
            f"{kind}.tlsConfig.ca.secret.name": "gbe-ca",
            f"{kind}.tlsConfig.ca.secret.key": "ca.crt",
            f"{kind}.basicAuth.username.name": "gbe-scrape",
            f"{kind}.basicAuth.username.key": "user",
            f"{kind}.basicAuth.password.name": "gbe-scrape",
            f"{kind}.basicAuth.password.key": "password",
        }
    )
    assert env(docs)["GBE_WEB_CONFIG_FILE"] == "/etc/gpu-bottleneck-exporter/web/web-config.yml"
    pod = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "web-config")
    assert volume["secret"]["secretName"] == "gbe-web"
    mount = next(m for m in container(docs)["volumeMounts"] if m["name"] == "web-config")
    assert mount["readOnly"] is True and "subPath" not in mount  # so a rotated Secret reaches the pod
    assert all(p["httpGet"]["scheme"] == "HTTPS" for p in _probes(docs))
    endpoint = _endpoint(docs, monitor)
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"]["serverName"] == "gbe.monitoring.svc"
    assert endpoint["basicAuth"]["password"] == {"name": "gbe-scrape", "key": "password"}
    assert core_problems(docs) == []
    assert cr_problems(docs, tmp_path) == []


def test_required_client_certificates_make_the_probes_tcp():
    docs = render(sets={**WEB, "webConfig.clientCertRequired": "true"})
    for probe in _probes(docs):
        assert "httpGet" not in probe and probe["tcpSocket"] == {"port": "metrics"}


def test_a_web_config_without_tls_keeps_http():
    docs = render(sets={**WEB, "webConfig.tls": "false", "serviceMonitor.enabled": "true"})
    assert _endpoint(docs, "ServiceMonitor")["scheme"] == "http"


def test_kube_rbac_proxy_fronts_the_exporter(tmp_path):
    docs = render(sets={"kubeRbacProxy.enabled": "true", "serviceMonitor.enabled": "true"})
    pod = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    exporter, proxy = pod["containers"]
    assert env(docs)["GBE_LISTEN_ADDRESS"] == "127.0.0.1" and "ports" not in exporter
    assert proxy["ports"] == [{"name": "metrics", "containerPort": 9443, "protocol": "TCP"}]
    assert "--upstream=http://127.0.0.1:9612/" in proxy["args"]
    assert "--ignore-paths=/healthz,/readyz" in proxy["args"]
    assert not any(a.startswith("--allow-paths") for a in proxy["args"])  # the proxy refuses both
    assert proxy["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is True
    role = one(docs, "ClusterRole")
    assert {r["resources"][0] for r in role["rules"]} == {"tokenreviews", "subjectaccessreviews"}
    binding = one(docs, "ClusterRoleBinding")
    assert binding["subjects"][0]["name"] == pod["serviceAccountName"]
    endpoint = _endpoint(docs, "ServiceMonitor")
    assert endpoint["scheme"] == "https" and endpoint["tlsConfig"] == {"insecureSkipVerify": True}
    assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    assert all(p["httpGet"]["scheme"] == "HTTPS" for p in _probes(docs))
    assert core_problems(docs) == []
    assert cr_problems(docs, tmp_path) == []


def test_the_network_policy_admits_only_prometheus_to_the_metrics_port():
    docs = render(
        sets={
            "networkPolicy.enabled": "true",
            "networkPolicy.prometheusNamespaceLabels.kubernetes\\.io/metadata\\.name": "monitoring",
        }
    )
    policy = one(docs, "NetworkPolicy")["spec"]
    assert policy["policyTypes"] == ["Ingress"]
    assert policy["podSelector"]["matchLabels"] == one(docs, "DaemonSet")["spec"]["selector"]["matchLabels"]
    (rule,) = policy["ingress"]
    assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert rule["from"] == [
        {
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        }
    ]
    assert core_problems(docs) == []


POLICY = {"networkPolicy.enabled": "true"}
PROMETHEUS_RULE = {
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
}


def test_the_network_policy_names_prometheus_namespace_by_default():
    """A pod labelled like Prometheus in a tenant's own namespace is not admitted: the default selects the
    namespace by the name label Kubernetes gives every namespace."""
    docs = render(sets=POLICY)
    (rule,) = one(docs, "NetworkPolicy")["spec"]["ingress"]
    assert rule["from"] == [PROMETHEUS_RULE]
    assert core_problems(docs) == []


def test_a_network_policy_without_a_namespace_selector_is_refused(tmp_path):
    said = render_error(sets={**POLICY, "networkPolicy.prometheusNamespaceLabels": "null"})
    assert "networkPolicy.prometheusNamespaceLabels is empty" in said and "monitoring" in said
    emptied = tmp_path / "v.yaml"  # every label removed from a values file: the schema refuses it
    emptied.write_text(
        "networkPolicy:\n  enabled: true\n"
        "  prometheusNamespaceLabels:\n    kubernetes.io/metadata.name: null\n"
    )
    result = helm(*_template_args([emptied]))
    assert result.returncode != 0 and "prometheusNamespaceLabels" in result.stderr, result.stderr


def test_with_the_progress_api_the_policy_admits_the_pushers():
    docs = render(sets={**POLICY, "progressApi.enabled": "true"})
    prometheus, pushers = one(docs, "NetworkPolicy")["spec"]["ingress"]
    assert prometheus["from"] == [PROMETHEUS_RULE]
    assert pushers["from"] == [{"podSelector": {}, "namespaceSelector": {}}]  # every tenant's job
    assert pushers["ports"] == [{"port": "metrics", "protocol": "TCP"}]  # where /v1/progress is served
    assert core_problems(docs) == []
    narrowed = render(
        sets={
            **POLICY,
            "progressApi.enabled": "true",
            "networkPolicy.pushers.namespaceLabels.gpu-jobs": "yes",
            "networkPolicy.pushers.podLabels.progress": "push",
        }
    )
    _, pushers = one(narrowed, "NetworkPolicy")["spec"]["ingress"]
    assert pushers["from"] == [
        {
            "podSelector": {"matchLabels": {"progress": "push"}},
            "namespaceSelector": {"matchLabels": {"gpu-jobs": "yes"}},
        }
    ]
    assert core_problems(narrowed) == []


@pytest.mark.parametrize(
    ("sets", "words"),
    [
        ({"webConfig.enabled": "true"}, "webConfig.enabled needs webConfig.secretName"),
        ({**WEB, "kubeRbacProxy.enabled": "true"}, "enable webConfig or kubeRbacProxy, not both"),
        ({"serviceMonitor.scheme": "ftp"}, "scheme"),
        ({"kubeRbacProxy.port": "0"}, "port"),
        ({"webConfig.secretNam": "x"}, "secretNam"),
    ],
)
def test_inconsistent_security_values_are_refused(sets, words):
    error = render_error(sets)
    assert words in error, error
