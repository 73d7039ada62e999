"""The pod-address check's calls to the Kubernetes API: pushes for one pod arriving together share one."""

from __future__ import annotations

import threading
import time

from exporter.sources.kubeapi import PodAddresses


def test_pushes_for_one_pod_arriving_together_make_one_api_call():
    calls: list[tuple[str, str]] = []
    release = threading.Event()

    def fetch(namespace: str, pod: str) -> frozenset[str]:
        calls.append((namespace, pod))
        release.wait(5)  # a slow API: every push arrives while the first call is out
        return frozenset({"10.1.2.3"})

    senders = PodAddresses(fetch)
    answers: list[bool] = []
    pushes = [
        threading.Thread(target=lambda: answers.append(senders.check("team", "trainer-0", "10.1.2.3")))
        for _ in range(20)
    ]
    for push in pushes:
        push.start()
    time.sleep(0.2)
    release.set()
    for push in pushes:
        push.join(10)
    assert calls == [("team", "trainer-0")]
    assert answers == [True] * 20
    assert senders.check("team", "trainer-0", "10.9.9.9") is False  # kept a minute; another address is not it
