"""Names the chart writes into manifests (the full name, the chart's name, namespaces, the service
account) are Kubernetes names, refused by the real helm at template time rather than by the API server
at install time, after a template has copied them into every manifest."""

from __future__ import annotations

import pytest

from tests.helm.chart import core_problems, one, render, render_error


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("fullnameOverride", "A_B$(id)"),
        ("fullnameOverride", "x\ny"),
        ("fullnameOverride", "9lives"),  # names the Service: a DNS-1035 label starts with a letter
        ("fullnameOverride", "a" * 64),
        ("nameOverride", "Bad.Name"),
        ("namespaceOverride", "x y"),
        ("namespaceOverride", "ns-"),
        ("serviceAccount.name", "sa/../x"),
        ("prometheusRule.namespace", "Monitoring"),
        ("serviceMonitor.namespace", "a;b"),
    ],
)
def test_a_name_kubernetes_would_refuse_is_refused_naming_the_value(key, value):
    said = render_error(sets={key: value})
    assert f"at '/{key.replace('.', '/')}'" in said, said
    assert "does not match pattern" in said or "maxLength" in said, said


def test_good_names_render_where_they_are_asked_for():
    docs = render(
        sets={
            "fullnameOverride": "gpu-exp",
            "nameOverride": "gbe2",
            "namespaceOverride": "gpu-monitoring",
            "serviceAccount.name": "gbe.reader",
        }
    )
    daemonset = one(docs, "DaemonSet")
    assert daemonset["metadata"]["name"] == "gpu-exp"
    assert daemonset["metadata"]["namespace"] == "gpu-monitoring"
    assert daemonset["metadata"]["labels"]["app.kubernetes.io/name"] == "gbe2"
    assert daemonset["spec"]["template"]["spec"]["serviceAccountName"] == "gbe.reader"
    assert core_problems(docs) == []
