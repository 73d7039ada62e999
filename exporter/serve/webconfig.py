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
import difflib
import hashlib
import hmac
import logging
import os
import re
import secrets
import ssl
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bcrypt
import yaml

from exporter.policy.thresholds import (
    WEB_AUTH_CHECKS,
    WEB_AUTH_FAILED,
    WEB_AUTH_VERIFIED,
    WEB_AUTH_WAIT,
    WEB_BCRYPT_MAX_COST,
    WEB_MAX_DEPTH,
    WEB_MAX_FILE_BYTES,
)

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
_SALT_LAST = ".Oeu"  # the 22nd character of the salt carries 2 bits: its other 4 must be 0
_HEADER_VALUE = re.compile(r"^[\x20-\x7e]*$")
MAX_FILE_BYTES = int(WEB_MAX_FILE_BYTES.value)
MAX_DEPTH = int(WEB_MAX_DEPTH.value)
MAX_COST = int(WEB_BCRYPT_MAX_COST.value)
AUTH_CACHE = int(WEB_AUTH_VERIFIED.value)
FAILURE_CACHE = int(WEB_AUTH_FAILED.value)
AUTH_WAIT = WEB_AUTH_WAIT.value
# bcrypt's key schedule reads the first 72 bytes of a password and never the rest (a fact of the
# algorithm); Go's CompareHashAndPassword, which Prometheus' exporters use, checks a longer password by
# those 72 bytes, and so does this exporter (newer Python bcrypt refuses longer input instead)
BCRYPT_PASSWORD_BYTES = 72
PATH_MAX = 4096  # Linux's longest path: a longer "path" is something else pasted into the file
OPEN_PATHS = frozenset({"/healthz", "/readyz"})  # kubelet probes carry no credentials; they reveal nothing
PUSH_PATHS = frozenset({"/v1/progress"})  # with a push token, authorised by it alone, apart from scrapes
# Reading the files of a web config (and the push token) is given this long, on a worker thread: a hung
# network mount or a secret volume being swapped must not hold the start, nor any request on SIGHUP.
READ_DEADLINE_S = 10.0
MAX_PEM_BYTES = 1 << 20  # a certificate chain or key is a few KiB; a larger "certificate" is another file
MAX_TOKEN_BYTES = 4096
MIN_TOKEN_CHARS = 16  # a guessable push token protects nothing
_TOKEN = re.compile(r"^[\x21-\x7e]+$")  # printable ASCII without spaces: what an HTTP header carries whole


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


class _Map(dict[str, Any]):
    """A YAML mapping, with the line of each key: messages name lines, never what the file says there
    (a misplaced password hash or key would be printed to a log)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: dict[str, int] = {}

    def at(self, key: str) -> str:
        return f"line {self.lines[key]}" if key in self.lines else "a default"


def read_regular(path: Path, limit: int, origin: str) -> bytes:
    """A regular file's bytes, at most ``limit``: a FIFO, a device or a directory is refused before it is
    read (opening a FIFO without O_NONBLOCK waits for a writer forever)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise WebConfigError(f"{origin}: cannot read ({exc.strerror or type(exc).__name__})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # before fdopen, which refuses a directory itself
        os.close(fd)
        raise WebConfigError(f"{origin}: not a regular file")
    with os.fdopen(fd, "rb") as handle:
        raw = handle.read(limit + 1)
    if len(raw) > limit:
        raise WebConfigError(f"{origin}: larger than {limit} bytes")
    return raw


def _regular(path: Path, origin: str) -> None:
    """``path`` is a regular file of at most MAX_PEM_BYTES, before OpenSSL opens it by name."""
    try:
        info = os.stat(path)
    except OSError:
        return  # OpenSSL's own error names the file
    if not stat.S_ISREG(info.st_mode):
        raise WebConfigError(f"{origin}: {path} is not a regular file")
    if info.st_size > MAX_PEM_BYTES:
        raise WebConfigError(
            f"{origin}: {path} is larger than {MAX_PEM_BYTES} bytes: not a certificate or key"
        )


def _document(text: str, origin: str) -> Any:
    """The file as plain values, mappings as ``_Map``. Bounded before anything recursive reads it: the
    parser's events stream by first, and nesting deeper than ``web.max_depth`` or an alias (a web config
    needs neither; aliases multiply what a small file holds) is refused at its line."""
    try:
        depth = 0
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            line = event.start_mark.line + 1
            if isinstance(event, yaml.AliasEvent):
                raise WebConfigError(f"{origin}: line {line}: an alias (*name): a web config uses none")
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    raise WebConfigError(
                        f"{origin}: line {line}: nested more than {MAX_DEPTH} levels deep: not a web config"
                    )
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        return None if node is None else _plain(node, yaml.SafeLoader(""), origin)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise WebConfigError(f"{origin}: not valid YAML{where}") from None


_CORE = "tag:yaml.org,2002:"
# what a node of each kind may be tagged: the tags plain YAML gives it; another (!!python/object:...,
# !custom) is a mistake the safe loader would otherwise read past as a plain mapping
_PLAIN_TAGS = {
    yaml.MappingNode: {_CORE + "map"},
    yaml.SequenceNode: {_CORE + "seq"},
    yaml.ScalarNode: {_CORE + name for name in ("str", "int", "float", "bool", "null")},
}


def _plain(node: yaml.Node, loader: yaml.SafeLoader, origin: str) -> Any:
    line = node.start_mark.line + 1
    if node.tag not in _PLAIN_TAGS.get(type(node), ()):
        tag = node.tag.removeprefix(_CORE)
        shown = tag if len(tag) <= 64 and tag.isprintable() else "too long to show"
        raise WebConfigError(f"{origin}: line {line}: a YAML tag ({shown}): a web config uses none")
    if isinstance(node, yaml.MappingNode):
        out = _Map()
        for key_node, value_node in node.value:
            key_line = key_node.start_mark.line + 1
            key = _plain(key_node, loader, origin) if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, str):
                raise WebConfigError(f"{origin}: line {key_line}: a key must be a name")
            if key in out:
                raise WebConfigError(f"{origin}: line {key_line}: a key given twice ({out.at(key)} has it)")
            out[key] = _plain(value_node, loader, origin)
            out.lines[key] = key_line
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_plain(item, loader, origin) for item in node.value]
    try:
        return loader.construct_object(node)
    except (ValueError, TypeError, OverflowError):  # a tagged value that does not convert (!!int x)
        raise WebConfigError(f"{origin}: line {line}: a value that does not read as its tag says") from None


def _mapping(value: Any, where: str) -> _Map:
    if value is None:
        return _Map()
    if not isinstance(value, _Map):
        raise WebConfigError(f"{where}: must be a mapping")
    return value


def _unknown(where: str, section: _Map, key: str, known: Iterable[str]) -> WebConfigError:
    """An unknown key, named by its line; a known key it looks like a typo of is suggested."""
    # a key longer than any known one by far is no typo (and comparing it would cost its length squared)
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.75) if len(key) <= 64 else []
    hint = f"; did you mean {close[0]}?" if close else ""
    names = ", ".join(sorted(known))
    return WebConfigError(f"{where}: unknown key at {section.at(key)}{hint} (known: {names})")


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise WebConfigError(f"{where}: must be a non-empty string")
    return value


def _path(section: _Map, key: str, where: str, base: Path) -> Path:
    """A file path; something else pasted in its place (a PEM block, a key) is refused unprinted."""
    value = _string(section[key], f"{where}.{key}: {section.at(key)}")
    if len(value) > PATH_MAX or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise WebConfigError(
            f"{where}.{key}: {section.at(key)}: not a file path (certificates and keys are read from files)"
        )
    return base / value


def parse(text: str, base: Path, origin: str = "web config") -> WebConfig:
    """The file's settings, validated; relative paths are relative to ``base`` (the file's folder)."""
    top = _mapping(_document(text, origin), origin)
    for key in top:
        if key not in TOP_KEYS:
            raise _unknown(origin, top, key, TOP_KEYS)
    return WebConfig(
        tls=_tls(_mapping(top.get("tls_server_config"), f"{origin}: tls_server_config"), base, origin),
        users=_users(_mapping(top.get("basic_auth_users"), f"{origin}: basic_auth_users"), origin),
        headers=_headers(_mapping(top.get("http_server_config"), f"{origin}: http_server_config"), origin),
    )


def _tls(section: _Map, base: Path, origin: str) -> TlsSettings | None:
    if not section:
        return None
    where = f"{origin}: tls_server_config"
    for key in section:
        if key in TLS_UNSUPPORTED:
            raise WebConfigError(f"{where}.{key}: not supported by this exporter")
        if key not in TLS_KEYS:
            raise _unknown(where, section, key, TLS_KEYS)
    if "cert_file" not in section or "key_file" not in section:
        raise WebConfigError(f"{where}: cert_file and key_file are both required")
    auth_where = f"{where}.client_auth_type: {section.at('client_auth_type')}"
    auth = _string(section.get("client_auth_type", "NoClientCert"), auth_where)
    if auth in UNSUPPORTED_AUTH:
        raise WebConfigError(
            f"{where}.client_auth_type: {auth} (a certificate asked for but not verified) is not supported; "
            "use RequireAndVerifyClientCert or VerifyClientCertIfGiven"
        )
    if auth not in CLIENT_AUTH:
        raise WebConfigError(f"{auth_where}: not one of {', '.join(CLIENT_AUTH)}")
    has_ca = section.get("client_ca_file") is not None
    if has_ca and auth == "NoClientCert":
        raise WebConfigError(f"{where}: client_ca_file is set but client_auth_type is NoClientCert")
    if not has_ca and auth != "NoClientCert":
        raise WebConfigError(f"{where}.client_auth_type: {auth} needs client_ca_file")
    versions = {}
    for key, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
        key_where = f"{where}.{key}: {section.at(key)}"
        versions[key] = _string(section.get(key, default), key_where)
        if versions[key] not in TLS_VERSIONS:
            raise WebConfigError(f"{key_where}: not one of {', '.join(TLS_VERSIONS)}")
    if TLS_VERSIONS[versions["min_version"]] > TLS_VERSIONS[versions["max_version"]]:
        raise WebConfigError(f"{where}: min_version is above max_version")
    return TlsSettings(
        cert_file=_path(section, "cert_file", where, base),
        key_file=_path(section, "key_file", where, base),
        client_ca_file=_path(section, "client_ca_file", where, base) if has_ca else None,
        client_auth_type=auth,
        **versions,
    )


def _users(section: _Map, origin: str) -> dict[str, bytes]:
    users = {}
    where = f"{origin}: basic_auth_users"
    for name, hashed in section.items():
        at = section.at(name)
        if not name or ":" in name:
            raise WebConfigError(f"{where}: {at}: not a user name (not empty, no ':')")
        if not isinstance(hashed, str) or not _BCRYPT.match(hashed):
            raise WebConfigError(f"{where}: {at}: not a bcrypt hash ($2y$10$...)")
        if hashed.startswith("$2$") or hashed[28] not in _SALT_LAST:
            # Go reads these; Python's bcrypt refuses them at every login
            raise WebConfigError(f"{where}: {at}: a bcrypt hash this exporter cannot check; make it again")
        cost = int(hashed.split("$")[2])
        if cost > MAX_COST:
            raise WebConfigError(
                f"{where}: {at}: bcrypt cost {cost} is above {MAX_COST}, the most one login may cost "
                "(web.bcrypt_max_cost); hash the password again at a lower cost (htpasswd -nBC 10 NAME)"
            )
        users[name] = hashed.encode()
    return users


def _headers(section: _Map, origin: str) -> dict[str, str]:
    for key in section:
        if key not in ("headers", "http2"):
            raise _unknown(f"{origin}: http_server_config", section, key, ("headers", "http2"))
    if "http2" in section and not isinstance(section["http2"], bool):
        raise WebConfigError(f"{origin}: http_server_config.http2: must be true or false")
    headers = {}
    listed = _mapping(section.get("headers"), f"{origin}: http_server_config.headers")
    for name, value in listed.items():
        canonical = HEADERS.get(name.lower())
        if canonical is None:
            raise WebConfigError(
                f"{origin}: http_server_config.headers: {listed.at(name)}: a header that cannot be set "
                "(allowed: " + ", ".join(HEADERS.values()) + ")"
            )
        if not isinstance(value, str) or not _HEADER_VALUE.match(value):
            raise WebConfigError(
                f"{origin}: http_server_config.headers.{canonical}: not a printable header value"
            )
        headers[canonical] = value
    return headers


class _Encrypted(Exception):
    pass


def _no_passphrase() -> bytes:
    """OpenSSL asks for an encrypted key's passphrase; without this it would prompt on the terminal."""
    raise _Encrypted


def ssl_context(tls: TlsSettings, origin: str) -> ssl.SSLContext:
    """The server context for ``tls``; every file is read now, so a bad one is an error here."""
    for path in (tls.cert_file, tls.key_file, tls.client_ca_file):
        if path is not None:
            _regular(path, f"{origin}: tls_server_config")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = TLS_VERSIONS[tls.min_version]
    context.maximum_version = TLS_VERSIONS[tls.max_version]
    try:
        context.load_cert_chain(tls.cert_file, tls.key_file, password=_no_passphrase)
    except _Encrypted:
        raise WebConfigError(
            f"{origin}: tls_server_config: key_file {tls.key_file} is encrypted; this exporter reads keys "
            "without a passphrase"
        ) from None
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
    an unknown user is checked against a dummy hash of the same cost, so the time taken does not tell
    which users exist; names are compared with ``hmac.compare_digest``. A password is checked by its
    first 72 bytes, as Go's bcrypt (and so Prometheus' exporters) checks it: bcrypt reads no more.

    Outcomes are remembered by keyed digest (a random key per process): the last verified pairs, so a
    scraper pays bcrypt once, and the last refused ones, so repeating a wrong password costs one check.
    A re-read keeps both for every user whose hash it leaves unchanged."""

    def __init__(self, users: dict[str, bytes], previous: Authenticator | None = None) -> None:
        self.users = users
        cost = self._cost()
        if previous is not None and previous._dummy_cost == cost:
            self._key, self._dummy = previous._key, previous._dummy  # a re-read makes no new dummy hash
        else:
            self._key = previous._key if previous is not None else secrets.token_bytes(32)
            self._dummy = bcrypt.hashpw(b"no such user", bcrypt.gensalt(cost))
        self._dummy_cost = cost
        self._lock = threading.Lock()  # checks finish on worker threads; lookups run on the event loop
        self._good: OrderedDict[bytes, str] = OrderedDict()  # digest -> the user it verified
        self._bad: OrderedDict[bytes, str | None] = OrderedDict()  # digest -> the user, None: unknown
        if previous is not None:
            self._keep(previous)

    def _keep(self, previous: Authenticator) -> None:
        same = {name for name, hashed in self.users.items() if previous.users.get(name) == hashed}
        names_kept = set(self.users) <= set(previous.users)  # no user added: unknown names stay unknown
        with previous._lock:
            self._good.update((d, user) for d, user in previous._good.items() if user in same)
            self._bad.update(
                (d, user) for d, user in previous._bad.items() if (user in same if user else names_kept)
            )

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
        name = user.encode()
        message = len(name).to_bytes(4, "big") + name + password.encode()
        return hmac.new(self._key, message, hashlib.sha256).digest()

    def remembered(self, user: str, password: str) -> bool | None:
        """True: verified before; False: refused before, against the same hash; None: not known."""
        digest = self._digest(user, password)
        with self._lock:
            if digest in self._good:
                self._good.move_to_end(digest)
                return True
            if digest in self._bad:
                return False
        return None

    def known_name(self, user: str) -> str | None:
        """``user`` when it is a configured user's name (compared as ``check`` compares), else None."""
        found = None
        for name in self.users:
            if hmac.compare_digest(name.encode(), user.encode()):
                found = name
        return found

    def check(self, user: str, password: str) -> bool:
        """The slow path: a bcrypt check, against the user's hash or the dummy."""
        hashed = None
        for name, candidate in self.users.items():
            if hmac.compare_digest(name.encode(), user.encode()):
                hashed = candidate
        secret = password.encode()[:BCRYPT_PASSWORD_BYTES]
        try:
            ok = bcrypt.checkpw(secret, hashed if hashed is not None else self._dummy) and hashed is not None
        except ValueError:  # a hash this bcrypt refuses (parse() turns the known ones away): not a login
            log.warning("basic auth: a configured hash cannot be checked by this bcrypt; make it again")
            ok = False
        digest = self._digest(user, password)
        with self._lock:
            if ok:
                self._remember(self._good, digest, user, AUTH_CACHE)
            else:
                self._remember(self._bad, digest, user if hashed is not None else None, FAILURE_CACHE)
        return ok

    @staticmethod
    def _remember(cache: OrderedDict[bytes, Any], digest: bytes, user: str | None, limit: int) -> None:
        cache[digest] = user
        cache.move_to_end(digest)
        while len(cache) > limit:
            cache.popitem(last=False)


@dataclass(frozen=True)
class Loaded:
    config: WebConfig
    context: ssl.SSLContext | None
    auth: Authenticator | None
    push_token: bytes | None = None  # POST /v1/progress: this bearer token, not the scrape users


class PushTokenError(WebConfigError):
    """The push token file cannot be used (named apart from the web config's own errors)."""


def read_token(path: str | Path) -> bytes:
    """The push token: one word of printable ASCII, of at least MIN_TOKEN_CHARS, around it only
    whitespace (a Secret's value often ends in a newline)."""
    origin = str(path)
    try:
        raw = read_regular(Path(path), MAX_TOKEN_BYTES, origin)
    except WebConfigError as exc:
        raise PushTokenError(str(exc)) from None
    text = raw.strip()
    if not text:
        raise PushTokenError(f"{origin}: empty: no token to compare pushes with")
    if not _TOKEN.match(text.decode("latin-1")):
        raise PushTokenError(f"{origin}: not one token of printable ASCII without spaces")
    if len(text) < MIN_TOKEN_CHARS:
        raise PushTokenError(f"{origin}: a token of {len(text)} characters; at least {MIN_TOKEN_CHARS}")
    return text


def bearer_matches(header: str | None, token: bytes) -> bool:
    """``Authorization: Bearer <token>``, compared in constant time."""
    if not header or header[:7].lower() != "bearer ":
        return False
    return hmac.compare_digest(header[7:].strip().encode("latin-1", "replace"), token)


def load(path: str | Path, previous: Authenticator | None = None) -> Loaded:
    """Read, validate and prepare the file: the certificates loaded, the dummy hash made (or taken from
    ``previous``, the authenticator in force, with what it remembers of unchanged users)."""
    path = Path(path)
    origin = str(path)
    raw = read_regular(path, MAX_FILE_BYTES, origin)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise WebConfigError(f"{origin}: not a UTF-8 text file") from None
    try:
        config = parse(text, path.parent, origin)
    except (RecursionError, MemoryError):  # bounded by web.max_depth and web.max_file_bytes; never shown
        raise WebConfigError(f"{origin}: too deeply nested to read: not a web config") from None
    context = ssl_context(config.tls, origin) if config.tls else None
    return Loaded(config, context, Authenticator(config.users, previous) if config.users else None)


class WebState:
    """The web config and push token in force. Without a file: plain HTTP, no authentication.

    Files are read on a worker thread with a deadline (READ_DEADLINE_S), at start and on SIGHUP
    (``reload_soon``): a slow mount or a costly bcrypt dummy hash never holds the event loop."""

    def __init__(self, path: str | Path | None = None, token_path: str | Path | None = None) -> None:
        self.path = Path(path) if path else None
        self.token_path = Path(token_path) if token_path else None
        self._stuck: threading.Thread | None = None  # a read left in a hung read past its deadline
        self.current = self._within_deadline(lambda: self._load(None))
        self.reloads = 0
        self.reload_errors = 0
        self.auth_failures = 0
        self.push_refused = 0
        self._reloading: float | None = None  # when the re-read in progress began
        self._again = False  # a SIGHUP came while one ran: read once more when it ends
        self._reload_lock = threading.Lock()
        # bcrypt checks at once, off the event loop: a flood of guesses waits its turn
        self._checks = asyncio.Semaphore(int(WEB_AUTH_CHECKS.value))
        # ...and before that, in its user's lane (one check at a time per configured user; names no
        # user has share one lane): a flood of guesses for one name queues in its own lane, so another
        # user's first login waits for at most one check of each other lane, however long the flood
        self._lanes: dict[str | None, asyncio.Lock] = {}

    def _load(self, previous: Authenticator | None) -> Loaded:
        loaded = load(self.path, previous) if self.path else Loaded(WebConfig(), None, None)
        if self.token_path is None:
            return loaded
        return Loaded(loaded.config, loaded.context, loaded.auth, read_token(self.token_path))

    def _within_deadline(self, work: Callable[[], Loaded]) -> Loaded:
        """``work`` on a daemon thread, given READ_DEADLINE_S; a thread stuck in a hung read is left, and
        no other read starts while it is stuck (each SIGHUP against a hung mount would leave one more)."""
        if self._stuck is not None and self._stuck.is_alive():
            raise WebConfigError("the previous read of the web config is still stuck (a hung mount?)")
        box: list[Loaded | BaseException] = []

        def run() -> None:
            try:
                box.append(work())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                box.append(exc)

        thread = threading.Thread(target=run, name="web-config-read", daemon=True)
        thread.start()
        thread.join(READ_DEADLINE_S)
        if not box:
            self._stuck = thread
            what = ", ".join(str(p) for p in (self.path, self.token_path) if p is not None)
            raise WebConfigError(f"{what}: not read within {READ_DEADLINE_S:g} s (a hung mount?)")
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]

    @property
    def tls(self) -> bool:
        return self.current.context is not None

    def ssl_context(self) -> ssl.SSLContext | None:
        return self.current.context

    def reload_soon(self) -> None:
        """SIGHUP: the re-read on a thread of its own; the handler returns at once. A SIGHUP during a
        re-read asks for one more after it (the files may have changed again), never a second thread."""
        with self._reload_lock:
            if self._reloading is not None:
                self._again = True
                return
            self._reloading = time.monotonic()
        threading.Thread(target=self._reload_loop, name="web-config-reload", daemon=True).start()

    def _reload_loop(self) -> None:
        while True:
            self.reload()
            with self._reload_lock:
                if not self._again:
                    self._reloading = None
                    return
                self._again = False

    def reload(self) -> bool:
        """Re-read the files; on an error the old settings stay in force and the error is logged and
        counted. TLS cannot be turned on or off by a reload (the listener's scheme is fixed at start).
        Never raises."""
        if self.path is None and self.token_path is None:
            log.info("SIGHUP: no --web.config.file to re-read")
            return False
        what = ", ".join(str(p) for p in (self.path, self.token_path) if p is not None)
        try:
            loaded = self._within_deadline(lambda: self._load(self.current.auth))
            if (loaded.context is None) != (self.current.context is None):
                raise WebConfigError(f"{self.path}: turning TLS on or off needs a restart")
        except Exception as exc:  # noqa: BLE001 - whatever the file does, the server keeps serving
            self.reload_errors += 1
            said = str(exc) if isinstance(exc, WebConfigError) else f"{what}: {type(exc).__name__}"
            # the text is the message: the log's flood limit holds back repeats of one error, not the next
            log.error(f"SIGHUP: keeping the web config in force: {said}")
            return False
        self.current = loaded
        self.reloads += 1
        log.info("SIGHUP: re-read %s", what)
        return True

    def push_allowed(self, authorization: str | None) -> bool | None:
        """A push with the push token: True or False; None: no push token, the scrape rules apply."""
        token = self.current.push_token
        if token is None:
            return None
        if bearer_matches(authorization, token):
            return True
        self.push_refused += 1
        return False

    async def allowed(
        self, path: str, authorization: str | None, client: ReadAhead | None = None
    ) -> bool | None:
        """True: let in; False: refused (401); None: a bcrypt check could not start within
        ``web.auth_wait_seconds`` behind others (503): the asker has given up by then. A client that
        went away while it waited is not checked: a flood that stops leaves no work behind."""
        if path in PUSH_PATHS:
            push = self.push_allowed(authorization)
            if push is not None:
                return push
        auth = self.current.auth
        if auth is None or path in OPEN_PATHS:
            return True
        credentials = auth.credentials(authorization)
        if credentials is None:
            return False
        known = auth.remembered(*credentials)
        if known is not None:
            return known
        if client is not None:
            await client.start()
        lane = self._lanes.setdefault(auth.known_name(credentials[0]), asyncio.Lock())
        try:
            async with asyncio.timeout(AUTH_WAIT):
                await lane.acquire()
                try:
                    await self._checks.acquire()
                except BaseException:
                    lane.release()
                    raise
        except TimeoutError:
            return None
        try:
            known = auth.remembered(*credentials)  # decided while this one waited (the same guess, again)
            if known is not None:
                return known
            if client is not None and client.gone():
                return False
            return await asyncio.to_thread(auth.check, *credentials)
        finally:
            self._checks.release()
            lane.release()


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class ReadAhead:
    """The request's ``receive``, read one message ahead while a login waits for a bcrypt check: after
    a request's last body message the next one is the client going away (or the response done). The
    app gets every message in order."""

    def __init__(self, receive: Receive) -> None:
        self.receive = receive
        self._first: MutableMapping[str, Any] | None = None
        self._next: asyncio.Future[MutableMapping[str, Any]] | None = None
        self._started = False

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        self._first = await self.receive()
        if self._first.get("type") == "http.request" and not self._first.get("more_body", False):
            self._next = asyncio.ensure_future(self.receive())

    def gone(self) -> bool:
        if self._first is not None and self._first.get("type") == "http.disconnect":
            return True
        return (
            self._next is not None
            and self._next.done()
            and not self._next.cancelled()
            and (self._next.result().get("type") == "http.disconnect")
        )

    async def __call__(self) -> MutableMapping[str, Any]:
        if self._first is not None:
            first, self._first = self._first, None
            return first
        if self._next is not None:
            ahead, self._next = self._next, None
            return await ahead
        return await self.receive()

    def close(self) -> None:
        if self._next is not None and not self._next.done():
            self._next.cancel()


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
        client = ReadAhead(receive)
        try:
            await self._answer(scope, client, send_with_headers, authorization)
        finally:
            client.close()

    async def _answer(self, scope: Scope, client: ReadAhead, send: Send, authorization: str | None) -> None:
        verdict = await self.state.allowed(scope.get("path", ""), authorization, client)
        if verdict is None:
            await send(
                {
                    "type": "http.response.start",
                    "status": 503,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"retry-after", b"1")],
                }
            )
            await send({"type": "http.response.body", "body": b"Too many password checks waiting\n"})
            return
        if not verdict:
            pushed = scope.get("path", "") in PUSH_PATHS and self.state.current.push_token is not None
            if not pushed:
                self.state.auth_failures += 1
            challenge = b"Bearer" if pushed else b'Basic realm="gpu-bottleneck-exporter", charset="UTF-8"'
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"text/plain; charset=utf-8"),
                        (b"www-authenticate", challenge),
                    ],
                }
            )
            body = b"a push needs the push token (Authorization: Bearer)\n" if pushed else b"Unauthorized\n"
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, client, send)
