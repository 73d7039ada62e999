"""--web.config.file: TLS, client certificates, basic authentication and headers, through the real command
and real TLS clients (Python's ssl through httpx, curl, openssl s_client); SIGHUP rotates the
certificate without a restart; a bad file is one line and exit status 2."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import httpx
import pytest

from exporter.serve import webconfig
from exporter.serve.webconfig import Authenticator, WebConfigError, load, parse
from tests.conftest import REPO, require_tool
from tests.faults.certs import Authority, Issued
from tests.faults.http_command import Command
from tests.timing import HANG_GUARD_S

PASSWORD = "s3cret-scrape"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, object]:
    folder = tmp_path_factory.mktemp("pki")
    ca, other = Authority(folder, "good"), Authority(folder, "wrong")
    return {
        "folder": folder,
        "ca": ca,
        "other": other,
        "server": ca.issue("server"),
        "client": ca.issue("client", server=False),
        "stranger": other.issue("stranger", server=False),
        "hash": bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode(),
    }


def _web_config(folder: Path, text: str, name: str = "web.yml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def _client(ca: Path | None, cert: Issued | None = None, **kwargs: object) -> httpx.Client:
    context = ssl.create_default_context(cafile=str(ca)) if ca else ssl.create_default_context()
    if cert is not None:
        context.load_cert_chain(cert.cert, cert.key)
    return httpx.Client(verify=context, timeout=5, **kwargs)


def _peer_serial(port: int, ca: Path) -> int:
    context = ssl.create_default_context(cafile=str(ca))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        return int(tls.getpeercert()["serialNumber"], 16)


@pytest.fixture(scope="module")
def tls_auth(pki, tmp_path_factory) -> Iterator[Command]:
    """TLS with basic authentication and security headers; paths relative to the file's folder."""
    folder = pki["folder"]
    config = _web_config(
        folder,
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server-key.pem\n  min_version: TLS13\n"
        f"basic_auth_users:\n  prometheus: '{pki['hash']}'\n"
        "http_server_config:\n  headers:\n    X-Frame-Options: deny\n"
        "    Strict-Transport-Security: max-age=300\n",
        "auth.yml",
    )
    cmd = Command(
        tmp_path_factory.mktemp("tls") / "log.txt", "--web.config.file", str(config), scheme="https"
    )
    ca = pki["ca"].pem
    try:
        cmd.wait_ready(lambda url: _client(ca).get(url))
        yield cmd
    finally:
        assert cmd.stop() == 0, cmd.text()
        assert "Traceback" not in cmd.text(), cmd.text()


@pytest.fixture(scope="module")
def mtls(pki, tmp_path_factory) -> Iterator[Command]:
    config = _web_config(
        pki["folder"],
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server-key.pem\n"
        f"  client_ca_file: {pki['ca'].pem}\n  client_auth_type: RequireAndVerifyClientCert\n",
        "mtls.yml",
    )
    cmd = Command(
        tmp_path_factory.mktemp("mtls") / "log.txt", "--web.config.file", str(config), scheme="https"
    )
    try:
        cmd.wait_ready(lambda url: _client(pki["ca"].pem, pki["client"]).get(url))
        yield cmd
    finally:
        assert cmd.stop() == 0, cmd.text()


# ---- TLS ---------------------------------------------------------------------------------------------


def test_a_client_trusting_the_ca_scrapes_over_tls(pki, tls_auth):
    with _client(pki["ca"].pem, auth=("prometheus", PASSWORD)) as client:
        response = client.get(tls_auth.url + "/metrics")
    assert response.status_code == 200 and "gpu_up" in response.text
    assert "https://" in tls_auth.text()  # the log names the scheme it serves


def test_a_client_trusting_another_ca_refuses_the_server(pki, tls_auth):
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        _client(pki["other"].pem).get(tls_auth.url + "/healthz")


def test_plain_http_to_the_tls_port_gets_no_metrics(tls_auth):
    response = httpx.get(tls_auth.url.replace("https://", "http://") + "/metrics", timeout=5)
    assert response.status_code == 400 and "gpu_up" not in response.text


def test_below_the_minimum_tls_version_there_is_no_handshake(pki, tls_auth):
    context = ssl.create_default_context(cafile=str(pki["ca"].pem))
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(httpx.ConnectError):
        httpx.Client(verify=context, timeout=5).get(tls_auth.url + "/healthz")


def test_openssl_s_client_verifies_the_chain(pki, tls_auth):
    openssl = require_tool("openssl")
    result = subprocess.run(
        [openssl, "s_client", "-connect", f"127.0.0.1:{tls_auth.port}", "-CAfile", str(pki["ca"].pem)],
        input="",
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert "Verify return code: 0 (ok)" in result.stdout, result.stdout + result.stderr


# ---- client certificates -----------------------------------------------------------------------------


def test_a_client_certificate_from_the_ca_is_let_in(pki, mtls):
    response = _client(pki["ca"].pem, pki["client"]).get(mtls.url + "/metrics")
    assert response.status_code == 200


@pytest.mark.parametrize("who", [None, "stranger"])
def test_no_client_certificate_or_one_from_another_ca_is_refused(pki, mtls, who):
    cert = pki[who] if who else None
    with pytest.raises(httpx.HTTPError):
        _client(pki["ca"].pem, cert).get(mtls.url + "/metrics")
    assert mtls.proc.poll() is None


def test_curl_with_and_without_its_client_certificate(pki, mtls):
    curl = require_tool("curl")
    base = [curl, "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--cacert", str(pki["ca"].pem)]
    ok = subprocess.run(
        [*base, "--cert", str(pki["client"].cert), "--key", str(pki["client"].key), mtls.url + "/metrics"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert ok.returncode == 0 and ok.stdout == "200", ok.stderr
    refused = subprocess.run([*base, mtls.url + "/metrics"], capture_output=True, text=True, timeout=30)
    assert refused.returncode != 0 and refused.stdout != "200"


# ---- basic authentication ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "auth", [None, ("prometheus", "wrong"), ("nobody", PASSWORD), ("prometheus", ""), ("", PASSWORD)]
)
def test_a_bad_password_or_user_is_401_with_a_challenge(pki, tls_auth, auth):
    with _client(pki["ca"].pem, auth=auth) as client:
        response = client.get(tls_auth.url + "/metrics")
    assert response.status_code == 401 and "gpu_up" not in response.text
    assert response.headers["www-authenticate"].startswith("Basic realm=")
    with _client(pki["ca"].pem, auth=("prometheus", PASSWORD)) as client:
        deadline = time.monotonic() + HANG_GUARD_S
        while "gpu_exporter_http_auth_failures_total 0" in (
            text := client.get(tls_auth.url + "/metrics").text
        ):
            assert time.monotonic() < deadline, text
            time.sleep(0.2)
    assert "gpu_exporter_http_auth_failures_total " in text


def test_malformed_authorization_headers_are_401(pki, tls_auth):
    with _client(pki["ca"].pem) as client:
        for value in ("Basic", "Basic !!!", "Bearer abc", "Basic " + "QQ==" * 3000):
            assert client.get(tls_auth.url + "/metrics", headers={"Authorization": value}).status_code in (
                401,
                431,
            )


def test_probes_need_no_credentials_and_headers_are_set(pki, tls_auth):
    with _client(pki["ca"].pem) as client:
        for path in ("/healthz", "/readyz"):
            response = client.get(tls_auth.url + path)
            assert response.status_code == 200, path
            assert response.headers["x-frame-options"] == "deny"
            assert response.headers["strict-transport-security"] == "max-age=300"
        assert client.get(tls_auth.url + "/").status_code == 401


def test_every_password_check_costs_one_bcrypt_check_known_user_or_not(pki, monkeypatch):
    """Unknown users are checked against a dummy hash of the same cost, so a wrong user name takes as
    long as a wrong password; names are compared with hmac.compare_digest."""
    users = {"prometheus": pki["hash"].encode()}
    auth = Authenticator(users)
    checked: list[bytes] = []
    real = bcrypt.checkpw

    def counting(password: bytes, hashed: bytes) -> bool:
        checked.append(hashed)
        return real(password, hashed)

    compared: list[tuple[bytes, bytes]] = []
    real_compare = webconfig.hmac.compare_digest

    def comparing(a, b):
        compared.append((a, b))
        return real_compare(a, b)

    monkeypatch.setattr(webconfig.bcrypt, "checkpw", counting)
    monkeypatch.setattr(webconfig.hmac, "compare_digest", comparing)
    assert auth.check("nobody", PASSWORD) is False
    assert len(checked) == 1 and checked[0] not in users.values()
    assert checked[0].split(b"$")[2] == users["prometheus"].split(b"$")[2]  # the same cost
    assert (b"prometheus", b"nobody") in compared
    assert auth.check("prometheus", "wrong") is False and checked[-1] == users["prometheus"]
    assert auth.check("prometheus", PASSWORD) is True and len(checked) == 3
    assert auth.remembered("prometheus", PASSWORD) and not auth.remembered("prometheus", "wrong")


# ---- SIGHUP ------------------------------------------------------------------------------------------


def test_sighup_rotates_the_certificate_and_keeps_serving(pki, tmp_path):
    ca: Authority = pki["ca"]
    first = ca.issue("rotating")
    config = _web_config(
        pki["folder"],
        "tls_server_config:\n  cert_file: rotating.pem\n  key_file: rotating-key.pem\n",
        "rot.yml",
    )
    cmd = Command(tmp_path / "log.txt", "--web.config.file", str(config), scheme="https")
    try:
        cmd.wait_ready(lambda url: _client(ca.pem).get(url))
        assert _peer_serial(cmd.port, ca.pem) == first.serial
        with _client(ca.pem) as kept:
            assert kept.get(cmd.url + "/metrics").status_code == 200
            second = ca.issue("rotating")  # the same files, a new certificate
            cmd.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + HANG_GUARD_S
            while _peer_serial(cmd.port, ca.pem) != second.serial:
                assert time.monotonic() < deadline, cmd.text()
                time.sleep(0.1)
            assert kept.get(cmd.url + "/metrics").status_code == 200  # the open connection goes on
        # a broken file: the certificate in force stays, the process too, the log says why
        (pki["folder"] / "rotating-key.pem").write_text("not a key")
        cmd.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + HANG_GUARD_S
        while "keeping the web config in force" not in cmd.text():
            assert time.monotonic() < deadline, cmd.text()
            time.sleep(0.1)
        assert _peer_serial(cmd.port, ca.pem) == second.serial
        assert cmd.proc.poll() is None
        deadline = time.monotonic() + HANG_GUARD_S
        while 'gpu_exporter_web_config_reloads_total{result="failure"} 1' not in (
            text := _client(ca.pem).get(cmd.url + "/metrics").text
        ):
            assert time.monotonic() < deadline, text
            time.sleep(0.2)
        assert 'gpu_exporter_web_config_reloads_total{result="success"} 1' in text
    finally:
        assert cmd.stop() == 0, cmd.text()


def test_sighup_without_a_web_config_does_not_kill_the_command(tmp_path):
    cmd = Command(tmp_path / "log.txt")
    try:
        cmd.wait_ready()
        cmd.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + HANG_GUARD_S
        while "no --web.config.file to re-read" not in cmd.text():
            assert time.monotonic() < deadline and cmd.proc.poll() is None, cmd.text()
            time.sleep(0.1)
        assert httpx.get(cmd.url + "/metrics", timeout=5).status_code == 200
    finally:
        assert cmd.stop() == 0, cmd.text()


# ---- validation --------------------------------------------------------------------------------------

GOOD_HASH = "$2y$10$" + "a" * 53


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("nonsense: 1\n", "unknown key at line 1 (known: basic_auth_users"),
        ("tls_server_config: [1, 2]\n", "tls_server_config: must be a mapping"),
        ("tls_server_config:\n  cert_file: a.pem\n", "cert_file and key_file are both required"),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: [X]\n",
            "cipher_suites: not supported",
        ),
        ("tls_server_config:\n  cert_file: a\n  key_file: b\n  bogus: 1\n", "unknown key at line 4"),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS14\n",
            "min_version: line 4: not one of TLS10",
        ),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS13\n  max_version: TLS12\n",
            "min_version is above max_version",
        ),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequireAnyClientCert\n",
            "RequireAnyClientCert (a certificate asked for but not verified) is not supported",
        ),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n"
            "  client_auth_type: RequireAndVerifyClientCert\n",
            "RequireAndVerifyClientCert needs client_ca_file",
        ),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_ca_file: c\n",
            "client_ca_file is set but client_auth_type is NoClientCert",
        ),
        ("basic_auth_users:\n  bob: plaintext\n", "basic_auth_users: line 2: not a bcrypt hash"),
        (f"basic_auth_users:\n  'a:b': '{GOOD_HASH}'\n", "line 2: not a user name"),
        ("http_server_config:\n  headers:\n    Set-Cookie: x\n", "line 3: a header that cannot be set"),
        ('http_server_config:\n  headers:\n    X-Frame-Options: "a\\nb"\n', "not a printable header value"),
        ("http_server_config:\n  http2: maybe\n", "http2: must be true or false"),
        ("tls_server_config: {\n", "not valid YAML at line"),
    ],
)
def test_a_web_config_is_strict(tmp_path, text, said):
    with pytest.raises(WebConfigError, match=None) as caught:
        parse(text, tmp_path, "web.yml")
    assert said in str(caught.value) and str(caught.value).startswith("web.yml")


def test_missing_certificate_files_are_named(tmp_path):
    path = _web_config(tmp_path, "tls_server_config:\n  cert_file: none.pem\n  key_file: none-key.pem\n")
    with pytest.raises(WebConfigError, match=r"cannot load cert_file .*none.pem"):
        load(path)


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("tls_server_config:\n  cert_file: none.pem\n  key_file: none-key.pem\n", "cannot load cert_file"),
        ("basic_auth_users:\n  bob: plaintext\n", "not a bcrypt hash"),
        (None, "cannot read"),
    ],
)
def test_the_command_refuses_a_bad_web_config_in_one_line(tmp_path, content, said):
    path = tmp_path / "web.yml"
    if content is not None:
        path.write_text(content)
    result = subprocess.run(
        [sys.executable, "-m", "exporter", "--simulate", "healthy", "--web.config.file", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-bottleneck-exporter: --web.config.file: ")
    assert said in lines[0] and "Traceback" not in result.stderr
