"""OIDC behind TLS, as an attack, against the same real OpenID Connect provider test_oidc.py
starts: with an `https` public URL the session cookie is `__Host-id_token` (`Secure`, `Path=/`,
no `Domain`), so a sibling subdomain or a plain-http page cannot plant a session of its own
choosing, and only that name is read: an `id_token` cookie carrying a perfectly valid token is
refused. The server also maps `--oidc-operator-subjects` to the operator, while the admin group
makes a tenant admin, who is refused the server's settings. Runs on the suite's backend."""

from __future__ import annotations

import json
import typing
import urllib.parse
from unittest import mock

import httpx
import pytest

import conftest
import wire
from test_oidc import CLIENT_SECRET, PROVIDER_DIR, browser, install_provider, node, through_provider


class Setup(typing.NamedTuple):
    issuer: str
    # Where the test reaches the server (plain http), and the https URL it is published at.
    url: str
    public_url: str


@pytest.fixture(scope="module")
def tls(workdir, fake_model) -> typing.Iterator[Setup]:
    install_provider()
    port = conftest.free_port()
    url, public_url = f"http://127.0.0.1:{port}", f"https://127.0.0.1:{port}"
    clients = [{"client_id": "teamster", "client_secret": CLIENT_SECRET, "redirect_uris": [f"{public_url}/api/v1/auth/callback"]}]
    provider = conftest.Process("oidc-provider-tls", [node(), str(PROVIDER_DIR / "provider.mjs")],
                                workdir / "oidc-provider-tls.log", env={"OIDC_CLIENTS": json.dumps(clients)})
    issuer = provider.start()
    secret_file = workdir / "oidc-tls-client-secret"
    secret_file.write_text(CLIENT_SECRET + "\n")
    secret_file.chmod(0o600)
    server = conftest.TeamsterServer(workdir, fake_model, extra_args=[
        "--no-sandbox", "--public-url", public_url,
        "--oidc-issuer", issuer, "--oidc-client-id", "teamster", "--oidc-client-secret-file", str(secret_file),
        "--oidc-admin-claim", "groups=teamster-admins", "--oidc-operator-subjects", "ops-root",
    ])
    try:
        with mock.patch.object(conftest, "free_port", lambda: port):
            server.start()
        assert server.url == url
        yield Setup(issuer, url, public_url)
    finally:
        server.close()
        provider.kill()


def sign_in(setup: Setup, login: str) -> list[str]:
    """Signs in as `login` the way a browser behind TLS does, and returns the callback's
    `Set-Cookie` lines. (The client reaches the server over plain http, so it hands the `Secure`
    pending cookie over itself.)"""
    client = browser()
    started = client.get(f"{setup.url}/api/v1/auth/login")
    assert started.status_code == 302, started.text
    (pending,) = [line.split(";", 1)[0] for line in started.headers.get_list("set-cookie") if line.startswith("oidc_login_")]
    callback = through_provider(client, started.headers["location"], f"{setup.public_url}/api/v1/auth/callback", login)
    query = urllib.parse.urlsplit(callback).query
    answer = httpx.get(f"{setup.url}/api/v1/auth/callback?{query}", headers={"cookie": pending}, timeout=wire.TIMEOUT)
    assert answer.status_code == 302 and "error" not in answer.headers["location"], answer.headers
    return answer.headers.get_list("set-cookie")


def session_token(lines: list[str]) -> str:
    (line,) = [line for line in lines if line.startswith("__Host-id_token=")]
    attributes = {part.strip() for part in line.split(";")[1:]}
    assert {"Secure", "Path=/", "HttpOnly", "SameSite=Lax"} <= attributes, line
    assert not any(attribute.lower().startswith("domain") for attribute in attributes), line
    return line.split(";", 1)[0].removeprefix("__Host-id_token=")


def me(setup: Setup, cookie: str) -> httpx.Response:
    return httpx.get(f"{setup.url}/api/v1/auth/me", headers={"cookie": cookie}, timeout=wire.TIMEOUT)


def test_on_https_the_session_cookie_is_host_prefixed_and_only_that_name_counts(tls: Setup):
    lines = sign_in(tls, "alice")
    assert not [line for line in lines if line.startswith("id_token=")], lines
    token = session_token(lines)
    assert me(tls, f"__Host-id_token={token}").json() == {"type": "oidc-connected", "email": "alice@example.com", "role": "member"}
    # The same valid token under the unprefixed name, as a sibling subdomain or an http page
    # could set it: not a session.
    wire.assert_error(me(tls, f"id_token={token}"), 401)
    # Logging out clears the prefixed cookie.
    out = httpx.post(f"{tls.url}/api/v1/auth/logout", headers={"origin": tls.public_url}, timeout=wire.TIMEOUT)
    assert any(line.startswith("__Host-id_token=;") and "Max-Age=0" in line for line in out.headers.get_list("set-cookie"))


def test_the_operator_and_a_tenant_admin_are_mapped_apart(tls: Setup):
    operator = f"__Host-id_token={session_token(sign_in(tls, 'ops-root'))}"
    admin = f"__Host-id_token={session_token(sign_in(tls, 'admin-root'))}"
    assert me(tls, operator).json()["role"] == "operator"
    assert me(tls, admin).json()["role"] == "admin"
    settings = f"{tls.url}/api/v1/settings/model-providers"
    assert httpx.get(settings, headers={"cookie": operator}, timeout=wire.TIMEOUT).status_code == 200
    wire.assert_error(httpx.get(settings, headers={"cookie": admin}, timeout=wire.TIMEOUT), 403)
    wire.assert_error(httpx.get(f"{tls.url}/metrics", headers={"cookie": admin}, timeout=wire.TIMEOUT), 403)
