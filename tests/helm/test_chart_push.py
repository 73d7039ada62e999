"""The chart's progress pushes: the push token from a Secret, and checkAddress with the one RBAC rule it
costs (get on pods) and the service account token it needs; nothing of either while they are off."""

from __future__ import annotations

from tests.helm.chart import container, core_problems, env, one, render, render_error

PUSH = {"progressApi.enabled": "true"}


def _pod(docs: list[dict]) -> dict:
    return one(docs, "DaemonSet")["spec"]["template"]["spec"]


def test_the_progress_api_off_adds_no_rbac_and_no_token():
    """checkAddress is on by default: it costs nothing while the progress API is off."""
    docs = render()
    assert env(docs)["GBE_PROGRESS_API"] == "off" and "GBE_PROGRESS_CHECK_ADDRESS" not in env(docs)
    assert {d["kind"] for d in docs}.isdisjoint({"ClusterRole", "ClusterRoleBinding"})
    assert _pod(docs)["automountServiceAccountToken"] is False


def test_pushes_on_check_the_senders_address_by_default():
    """A pod reports for itself only unless the operator turns the check off."""
    docs = render(sets=PUSH)
    assert env(docs)["GBE_PROGRESS_API"] == "on" and env(docs)["GBE_PROGRESS_CHECK_ADDRESS"] == "on"
    assert "GBE_PROGRESS_TOKEN_FILE" not in env(docs)
    assert one(docs, "ClusterRole")["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]


def test_pushes_on_without_the_check_add_no_token_and_no_rbac():
    docs = render(sets={**PUSH, "progressApi.checkAddress": "false"})
    assert env(docs)["GBE_PROGRESS_API"] == "on"
    assert "GBE_PROGRESS_TOKEN_FILE" not in env(docs) and "GBE_PROGRESS_CHECK_ADDRESS" not in env(docs)
    assert {d["kind"] for d in docs}.isdisjoint({"ClusterRole", "ClusterRoleBinding"})
    assert _pod(docs)["automountServiceAccountToken"] is False


def test_the_push_token_comes_from_a_secret_key():
    docs = render(
        sets={
            **PUSH,
            "progressApi.checkAddress": "false",
            "progressApi.tokenSecret": "gbe-push",
            "progressApi.tokenSecretKey": "t",
        }
    )
    assert env(docs)["GBE_PROGRESS_TOKEN_FILE"] == "/etc/gpu-bottleneck-exporter/push/token"
    volume = next(v for v in _pod(docs)["volumes"] if v["name"] == "push-token")
    assert volume["secret"]["secretName"] == "gbe-push"
    assert volume["secret"]["items"] == [{"key": "t", "path": "token"}]
    mount = next(m for m in container(docs)["volumeMounts"] if m["name"] == "push-token")
    assert mount == {"name": "push-token", "mountPath": "/etc/gpu-bottleneck-exporter/push", "readOnly": True}
    assert _pod(docs)["automountServiceAccountToken"] is False  # a token alone calls no API
    assert core_problems(docs) == []


def test_check_address_costs_get_on_pods_and_the_service_account_token():
    docs = render(sets={**PUSH, "progressApi.checkAddress": "true"})
    assert env(docs)["GBE_PROGRESS_CHECK_ADDRESS"] == "on"
    assert _pod(docs)["automountServiceAccountToken"] is True
    role = one(docs, "ClusterRole")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
    binding = one(docs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"][0]["name"] == _pod(docs)["serviceAccountName"]
    assert core_problems(docs) == []


def test_a_push_token_without_the_progress_api_is_refused():
    assert "needs progressApi.enabled" in render_error(sets={"progressApi.tokenSecret": "gbe-push"})


def test_check_address_behind_kube_rbac_proxy_is_refused():
    """Behind the proxy every push comes from the proxy's own address: the check would refuse them all."""
    said = render_error(sets={**PUSH, "progressApi.checkAddress": "true", "kubeRbacProxy.enabled": "true"})
    assert "cannot work behind kubeRbacProxy" in said and "checkAddress=false" in said
