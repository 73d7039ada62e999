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


def _dripping_api(tmp_path, headers_only: bool):
    """A TLS server that answers one byte every half second, for minutes (a hung proxy)."""
    import http.server
    import ssl

    from tests.faults.certs import Authority

    ca = Authority(tmp_path, "api")
    issued = ca.issue("server")

    class Drip(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            try:
                if headers_only:
                    self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                else:
                    self.send_response(200)
                    self.send_header("Content-Length", "100000")
                    self.end_headers()
                for i in range(400):
                    self.wfile.write(f"X-{i}: y\r\n".encode() if headers_only else b" ")
                    self.wfile.flush()
                    time.sleep(0.5)
            except OSError:
                pass

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Drip)
    server.daemon_threads = True
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(issued.cert, issued.key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, ca.pem


def test_a_dripping_api_is_cut_at_the_deadline_whatever_it_sends(tmp_path):
    import pytest

    from exporter.sources.kubeapi import TIMEOUT_S, AddressUnknown, InCluster

    (tmp_path / "token").write_text("t\n")
    for headers_only in (False, True):
        server, ca = _dripping_api(tmp_path, headers_only)
        try:
            api = InCluster(f"https://127.0.0.1:{server.server_address[1]}", tmp_path / "token", ca)
            # only the deadline says this: the drip would run 200 s, then end in an answer not JSON
            with pytest.raises(AddressUnknown, match=f"no complete answer within {TIMEOUT_S:g} s"):
                api.fetch("ml", "llm-train-0")
        finally:
            server.shutdown()
            server.server_close()
