"""A pod's own addresses, from the Kubernetes API (``GET /api/v1/namespaces/NS/pods/NAME``), so a
progress push is accepted only from the pod it reports for (``--progress-check-address on``).

Needs ``get`` on pods (the chart's ClusterRole when ``progressApi.checkAddress`` is on) and the
service account token mounted. Each pod's answer is kept a minute (a pod's IP does not change while it
runs); a sender that does not match asks once more, at most every few seconds, in case the pod was made
again under the same name. Every call has a deadline and a bounded answer; a failure is kept a few
seconds so a flood of pushes does not become a flood of API calls."""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import json
import os
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TIMEOUT_S = 2.0
MAX_ANSWER_BYTES = 1 << 20  # one pod's object is a few KiB; the deadline covers a slow one
KEEP_S = 60.0
RECHECK_S = 5.0  # the least time between two asks for one pod (a mismatch, a failure)
WAIT_S = 3 * TIMEOUT_S  # a push waits this long for the call another push of its pod made
MAX_PODS = 1024  # answers kept; the progress store itself keeps at most progress.max_pods pods


def _get(base_url: str, path: str, token: str, context: ssl.SSLContext) -> tuple[int, bytes]:
    """GET ``path`` with one deadline, TIMEOUT_S, for the whole answer (headers and body): a watchdog
    shuts the socket, which ends a read however slowly the server sends. No redirect is followed."""
    parsed = urllib.parse.urlsplit(base_url)
    conn = http.client.HTTPSConnection(parsed.hostname or "", parsed.port, timeout=TIMEOUT_S, context=context)
    expired = threading.Event()
    held: list[socket.socket] = []

    def cut() -> None:
        expired.set()
        for sock in held:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    watchdog = threading.Timer(TIMEOUT_S, cut)
    watchdog.daemon = True
    watchdog.start()
    try:
        conn.connect()
        if conn.sock is not None:
            held.append(conn.sock)
        if expired.is_set():
            cut()
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}", "Connection": "close"})
        answer = conn.getresponse()
        raw = answer.read(MAX_ANSWER_BYTES + 1)
        if expired.is_set():
            raise TimeoutError(f"no complete answer within {TIMEOUT_S:g} s")
        return answer.status, raw
    except (OSError, http.client.HTTPException):
        if expired.is_set():
            raise TimeoutError(f"no complete answer within {TIMEOUT_S:g} s") from None
        raise
    finally:
        watchdog.cancel()
        conn.close()


class AddressUnknown(Exception):
    """The API could not say where the pod is; the message says why, in one line."""


@dataclass(frozen=True)
class Known:
    addresses: frozenset[str] | None  # None: the ask failed (``error`` says why)
    at: float
    error: str = ""


def _one_line(text: str) -> str:
    return " ".join(text.split())[:200]


class PodAddresses:
    """``check(namespace, pod, sender)``: True when ``sender`` is one of the pod's addresses."""

    def __init__(
        self, fetch: Callable[[str, str], frozenset[str]], clock: Callable[[], float] = time.monotonic
    ):
        self.fetch, self.clock = fetch, clock
        self._known: dict[tuple[str, str], Known] = {}
        self._asking: dict[tuple[str, str], threading.Event] = {}  # one call in flight per pod
        self._lock = threading.Lock()
        self.calls = 0

    def check(self, namespace: str, pod: str, sender: str) -> bool:
        key, now = (namespace, pod), self.clock()
        with self._lock:
            known = self._known.get(key)
        if known is None or now - known.at >= (KEEP_S if known.addresses is not None else RECHECK_S):
            known = self._ask(key, now)
        elif (
            known.addresses is not None
            and normal(sender) not in known.addresses
            and now - known.at >= RECHECK_S
        ):
            known = self._ask(key, now)  # the pod may have been made again under its name, elsewhere
        if known.addresses is None:
            raise AddressUnknown(known.error)
        return normal(sender) in known.addresses

    def _ask(self, key: tuple[str, str], now: float) -> Known:
        """The API's answer for one pod. Pushes for a pod arriving together share one call: the others
        wait for its answer (a burst of pushes is one API call, not one each)."""
        with self._lock:
            asking = self._asking.get(key)
            mine = asking is None
            if mine:
                asking = self._asking[key] = threading.Event()
        if not mine:
            asking.wait(WAIT_S)
            with self._lock:
                known = self._known.get(key)
            return known if known is not None else Known(None, now, "the pod's address is being looked up")
        try:
            self.calls += 1
            try:
                known = Known(self.fetch(*key), now)
            except AddressUnknown as exc:
                known = Known(None, now, str(exc))
            with self._lock:
                if len(self._known) >= MAX_PODS and key not in self._known:
                    self._known.pop(next(iter(self._known)))
                self._known[key] = known
            return known
        finally:
            with self._lock:
                del self._asking[key]
            asking.set()


def normal(address: str) -> str:
    """One spelling per address: an IPv4 client of an IPv6 socket (::ffff:10.0.0.5) is 10.0.0.5."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return str(mapped or ip)


def pod_ips(document: object) -> frozenset[str]:
    """``status.podIPs`` (and ``status.podIP``) of a Pod object."""
    status = document.get("status") if isinstance(document, dict) else None
    if not isinstance(status, dict):
        raise AddressUnknown("the API's answer is not a pod")
    ips = {status.get("podIP")} | {
        entry.get("ip") for entry in status.get("podIPs") or () if isinstance(entry, dict)
    }
    found = frozenset(normal(ip) for ip in ips if isinstance(ip, str) and ip)
    if not found:
        raise AddressUnknown("the pod has no address yet")
    return found


@dataclass(frozen=True)
class InCluster:
    """The API server as a pod sees it: its Service's address, the mounted token and CA."""

    base_url: str
    token_file: Path
    ca_file: Path

    @classmethod
    def from_environment(cls, environ: dict[str, str] | None = None) -> InCluster:
        env = os.environ if environ is None else environ
        host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise AddressUnknown("not in a Kubernetes pod (KUBERNETES_SERVICE_HOST is not set)")
        shown = f"[{host}]" if ":" in host else host
        return cls(f"https://{shown}:{port}", SERVICE_ACCOUNT / "token", SERVICE_ACCOUNT / "ca.crt")

    def fetch(self, namespace: str, pod: str) -> frozenset[str]:
        try:
            token = self.token_file.read_text().strip()  # re-read: the kubelet rotates it
            context = ssl.create_default_context(cafile=str(self.ca_file))
        except (OSError, ssl.SSLError) as exc:
            raise AddressUnknown(
                f"no service account token or CA ({_one_line(str(exc))}): the pod's addresses cannot be asked"
            ) from None
        path = f"/api/v1/namespaces/{namespace}/pods/{pod}"
        try:
            status, raw = _get(self.base_url, path, token, context)
        except (OSError, ValueError, http.client.HTTPException) as exc:  # refused, timed out, TLS, a bad URL
            raise AddressUnknown(f"the Kubernetes API did not answer ({_one_line(str(exc))})") from None
        if status != 200:
            why = "no RBAC to get pods" if status == 403 else "no such pod" if status == 404 else ""
            raise AddressUnknown(f"the Kubernetes API answered {status} {why}".strip())
        if len(raw) > MAX_ANSWER_BYTES:
            raise AddressUnknown(f"the Kubernetes API's answer is over {MAX_ANSWER_BYTES} bytes")
        try:
            return pod_ips(json.loads(raw))
        except (ValueError, RecursionError):
            raise AddressUnknown("the Kubernetes API's answer is not JSON") from None
