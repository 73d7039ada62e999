"""``--web.config.file``: TLS and basic authentication in the file format Prometheus exporters share
(the exporter toolkit's): ``tls_server_config``, ``basic_auth_users`` (bcrypt hashes) and
``http_server_config`` headers. Strict: an unknown key, a setting this exporter cannot honour or a file
that does not load is an error naming it, never a silently weaker server.

``WebState`` holds what is in force; ``reload`` (SIGHUP) re-reads the file and swaps it in whole, or
keeps the old one and says why. New connections use the new certificate; open ones keep theirs."""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import logging
import re
import ssl
from collections import OrderedDict
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bcrypt
import yaml

log = logging.getLogger(__name__)

TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
# client_auth_type -> what Python's ssl module does. RequestClientCert and RequireAnyClientCert ask for a
# certificate without verifying it, which the ssl module cannot do: refused rather than made stricter.
CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
UNSUPPORTED_AUTH = ("RequestClientCert", "RequireAnyClientCert")
TLS_KEYS = {"cert_file", "key_file", "client_ca_file", "client_auth_type", "min_version", "max_version"}
TLS_UNSUPPORTED = {
    "cert",
    "key",
    "client_ca",
    "cipher_suites",
    "curve_preferences",
    "prefer_server_cipher_suites",
    "client_allowed_sans",
}
TOP_KEYS = {"tls_server_config", "http_server_config", "basic_auth_users"}
# the response headers the exporter toolkit lets a web config set
HEADERS = {
    "strict-transport-security": "Strict-Transport-Security",
    "x-content-type-options": "X-Content-Type-Options",
    "x-frame-options": "X-Frame-Options",
    "x-xss-protection": "X-XSS-Protection",
    "content-security-policy": "Content-Security-Policy",
}
_BCRYPT = re.compile(r"^\$2[aby]?\$(0[4-9]|[12]\d|3[01])\$[./A-Za-z0-9]{53}$")
_HEADER_VALUE = re.compile(r"^[\x20-\x7e]*$")
MAX_FILE_BYTES = 1 << 20  # a web config is a few lines; this only keeps a wrong path from being read whole
AUTH_CACHE = 64  # verified (user, password) digests kept, so a scrape does not pay a bcrypt check each time
OPEN_PATHS = frozenset({"/healthz", "/readyz"})  # kubelet probes carry no credentials; they reveal nothing


class WebConfigError(ValueError):
    """A web config that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class TlsSettings:
    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None
    client_auth_type: str = "NoClientCert"
    min_version: str = "TLS12"
    max_version: str = "TLS13"


@dataclass(frozen=True)
class WebConfig:
    tls: TlsSettings | None = None
    users: dict[str, bytes] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise WebConfigError(f"{where}: must be a mapping")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise WebConfigError(f"{where}: must be a non-empty string")
    return value


def parse(text: str, base: Path, origin: str = "web config") -> WebConfig:
    """The file's settings, validated; relative paths are relative to ``base`` (the file's folder)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise WebConfigError(f"{origin}: not valid YAML{where}") from None
    top = _mapping(data, origin)
    unknown = sorted(set(top) - TOP_KEYS)
    if unknown:
        raise WebConfigError(f"{origin}: unknown key {unknown[0]!r} (known: {', '.join(sorted(TOP_KEYS))})")
    return WebConfig(
        tls=_tls(_mapping(top.get("tls_server_config"), f"{origin}: tls_server_config"), base, origin),
        users=_users(_mapping(top.get("basic_auth_users"), f"{origin}: basic_auth_users"), origin),
        headers=_headers(_mapping(top.get("http_server_config"), f"{origin}: http_server_config"), origin),
    )


def _tls(section: dict[str, Any], base: Path, origin: str) -> TlsSettings | None:
    if not section:
        return None
    where = f"{origin}: tls_server_config"
    for key in section:
        if key in TLS_UNSUPPORTED:
            raise WebConfigError(f"{where}.{key}: not supported by this exporter")
        if key not in TLS_KEYS:
            raise WebConfigError(f"{where}: unknown key {key!r}")
    if "cert_file" not in section or "key_file" not in section:
        raise WebConfigError(f"{where}: cert_file and key_file are both required")
    auth = _string(section.get("client_auth_type", "NoClientCert"), f"{where}.client_auth_type")
    if auth in UNSUPPORTED_AUTH:
        raise WebConfigError(
            f"{where}.client_auth_type: {auth} (a certificate asked for but not verified) is not supported; "
            "use RequireAndVerifyClientCert or VerifyClientCertIfGiven"
        )
    if auth not in CLIENT_AUTH:
        raise WebConfigError(f"{where}.client_auth_type: {auth!r} is not one of {', '.join(CLIENT_AUTH)}")
    ca = section.get("client_ca_file")
    if ca is not None and auth == "NoClientCert":
        raise WebConfigError(f"{where}: client_ca_file is set but client_auth_type is NoClientCert")
    if ca is None and auth != "NoClientCert":
        raise WebConfigError(f"{where}.client_auth_type: {auth} needs client_ca_file")
    versions = {}
    for key, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
        versions[key] = _string(section.get(key, default), f"{where}.{key}")
        if versions[key] not in TLS_VERSIONS:
            raise WebConfigError(f"{where}.{key}: {versions[key]!r} is not one of {', '.join(TLS_VERSIONS)}")
    if TLS_VERSIONS[versions["min_version"]] > TLS_VERSIONS[versions["max_version"]]:
        raise WebConfigError(f"{where}: min_version is above max_version")
    return TlsSettings(
        cert_file=base / _string(section["cert_file"], f"{where}.cert_file"),
        key_file=base / _string(section["key_file"], f"{where}.key_file"),
        client_ca_file=base / _string(ca, f"{where}.client_ca_file") if ca is not None else None,
        client_auth_type=auth,
        **versions,
    )


def _users(section: dict[str, Any], origin: str) -> dict[str, bytes]:
    users = {}
    for name, hashed in section.items():
        if not name or ":" in name:
            raise WebConfigError(f"{origin}: basic_auth_users: {name!r} is not a user name (no ':')")
        if not isinstance(hashed, str) or not _BCRYPT.match(hashed):
            raise WebConfigError(f"{origin}: basic_auth_users.{name}: not a bcrypt hash ($2y$10$...)")
        users[name] = hashed.encode()
    return users


def _headers(section: dict[str, Any], origin: str) -> dict[str, str]:
    for key in section:
        if key not in ("headers", "http2"):
            raise WebConfigError(f"{origin}: http_server_config: unknown key {key!r}")
    if "http2" in section and not isinstance(section["http2"], bool):
        raise WebConfigError(f"{origin}: http_server_config.http2: must be true or false")
    headers = {}
    for name, value in _mapping(section.get("headers"), f"{origin}: http_server_config.headers").items():
        canonical = HEADERS.get(name.lower())
        if canonical is None:
            raise WebConfigError(
                f"{origin}: http_server_config.headers: {name!r} cannot be set (allowed: "
                + ", ".join(HEADERS.values())
                + ")"
            )
        if not isinstance(value, str) or not _HEADER_VALUE.match(value):
            raise WebConfigError(f"{origin}: http_server_config.headers.{name}: not a printable header value")
        headers[canonical] = value
    return headers


def ssl_context(tls: TlsSettings, origin: str) -> ssl.SSLContext:
    """The server context for ``tls``; every file is read now, so a bad one is an error here."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = TLS_VERSIONS[tls.min_version]
    context.maximum_version = TLS_VERSIONS[tls.max_version]
    try:
        context.load_cert_chain(tls.cert_file, tls.key_file)
    except (OSError, ssl.SSLError) as exc:
        raise WebConfigError(
            f"{origin}: tls_server_config: cannot load cert_file {tls.cert_file} with key_file "
            f"{tls.key_file} ({getattr(exc, 'strerror', None) or exc})"
        ) from None
    if tls.client_ca_file is not None:
        try:
            context.load_verify_locations(cafile=tls.client_ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise WebConfigError(
                f"{origin}: tls_server_config: cannot load client_ca_file {tls.client_ca_file} "
                f"({getattr(exc, 'strerror', None) or exc})"
            ) from None
    context.verify_mode = CLIENT_AUTH[tls.client_auth_type]
    return context


class Authenticator:
    """Basic authentication against bcrypt hashes. Every check of a password costs one bcrypt check:
    an unknown user is checked against a dummy hash, so the time taken does not tell which users
    exist; names are compared with ``hmac.compare_digest``. Verified credentials are remembered by
    digest so a scraper's every request does not pay for bcrypt again."""

    def __init__(self, users: dict[str, bytes]) -> None:
        self.users = users
        self._dummy = bcrypt.hashpw(b"no such user", bcrypt.gensalt(self._cost()))
        self._good: OrderedDict[bytes, None] = OrderedDict()

    def _cost(self) -> int:
        """The dummy hash costs what the real ones do."""
        costs = [int(h.split(b"$")[2]) for h in self.users.values()]
        return max(costs) if costs else 10

    @staticmethod
    def credentials(header: str | None) -> tuple[str, str] | None:
        if not header or header[:6].lower() != "basic ":
            return None
        try:
            decoded = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        user, sep, password = decoded.partition(":")
        return (user, password) if sep else None

    def _digest(self, user: str, password: str) -> bytes:
        return hashlib.sha256(user.encode() + b"\0" + password.encode()).digest()

    def remembered(self, user: str, password: str) -> bool:
        digest = self._digest(user, password)
        return any(hmac.compare_digest(digest, good) for good in self._good)

    def check(self, user: str, password: str) -> bool:
        """The slow path: a bcrypt check, against the user's hash or the dummy."""
        hashed = None
        for name, candidate in self.users.items():
            if hmac.compare_digest(name.encode(), user.encode()):
                hashed = candidate
        ok = bcrypt.checkpw(password.encode(), hashed if hashed is not None else self._dummy)
        if ok and hashed is not None:
            self._good[self._digest(user, password)] = None
            while len(self._good) > AUTH_CACHE:
                self._good.popitem(last=False)
            return True
        return False


@dataclass(frozen=True)
class Loaded:
    config: WebConfig
    context: ssl.SSLContext | None
    auth: Authenticator | None


def load(path: str | Path) -> Loaded:
    """Read, validate and prepare the file: the certificates loaded, the dummy hash made."""
    path = Path(path)
    origin = str(path)
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise WebConfigError(f"{origin}: cannot read ({exc.strerror or exc})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise WebConfigError(f"{origin}: larger than {MAX_FILE_BYTES} bytes: not a web config")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise WebConfigError(f"{origin}: not a UTF-8 text file") from None
    config = parse(text, path.parent, origin)
    context = ssl_context(config.tls, origin) if config.tls else None
    return Loaded(config, context, Authenticator(config.users) if config.users else None)


class WebState:
    """The web config in force. Without a file: plain HTTP, no authentication."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else None
        self.current = load(self.path) if self.path else Loaded(WebConfig(), None, None)
        self.reloads = 0
        self.reload_errors = 0
        self.auth_failures = 0
        self._checks = asyncio.Semaphore(2)  # bcrypt checks at once: a flood of guesses waits its turn

    @property
    def tls(self) -> bool:
        return self.current.context is not None

    def ssl_context(self) -> ssl.SSLContext | None:
        return self.current.context

    def reload(self) -> bool:
        """Re-read the file; on an error the old settings stay in force and the error is logged. TLS
        cannot be turned on or off by a reload (the listener's scheme is fixed at start)."""
        if self.path is None:
            log.info("SIGHUP: no --web.config.file to re-read")
            return False
        try:
            loaded = load(self.path)
            if (loaded.context is None) != (self.current.context is None):
                raise WebConfigError(f"{self.path}: turning TLS on or off needs a restart")
        except WebConfigError as exc:
            self.reload_errors += 1
            log.error("SIGHUP: keeping the web config in force: %s", exc)
            return False
        self.current = loaded
        self.reloads += 1
        log.info("SIGHUP: re-read %s", self.path)
        return True

    async def allowed(self, path: str, authorization: str | None) -> bool:
        auth = self.current.auth
        if auth is None or path in OPEN_PATHS:
            return True
        credentials = auth.credentials(authorization)
        if credentials is None:
            return False
        if auth.remembered(*credentials):
            return True
        async with self._checks:
            return await asyncio.to_thread(auth.check, *credentials)


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class WebMiddleware:
    """ASGI: basic authentication (401 with a challenge) and the configured response headers."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], state: WebState) -> None:
        self.app, self.state = app, state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = self.state.current.config.headers
        extra = [(k.lower().encode(), v.encode()) for k, v in headers.items()]

        async def send_with_headers(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start" and extra:
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        authorization = None
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                authorization = value.decode("latin-1")
        if not await self.state.allowed(scope.get("path", ""), authorization):
            self.state.auth_failures += 1
            await send_with_headers(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"text/plain; charset=utf-8"),
                        (b"www-authenticate", b'Basic realm="gpu-bottleneck-exporter", charset="UTF-8"'),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": b"Unauthorized\n"})
            return
        await self.app(scope, receive, send_with_headers)
