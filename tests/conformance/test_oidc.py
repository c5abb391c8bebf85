"""OIDC login for the browser, against a real OpenID Connect provider: panva's `oidc-provider`
(tests/oidc-provider, installed with `npm ci` on first use) with its development login and
consent pages, started by this module with two confidential clients: `teamster` (the server's,
redirect URI `<server>/api/v1/auth/callback`) and `other-app` (a client the server must not
trust). A `teamster serve` with `--oidc-issuer` (and API keys too) is driven the way a browser
is: /api/v1/auth/login, the provider's pages (forms posted), the callback, the `id_token`
cookie. Runs on the suite's backend (SQLite, or PostgreSQL with TEAMSTER_TEST_BACKEND)."""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import typing
import urllib.parse
from unittest import mock

import httpx
import pytest

import conftest
import wire

PROVIDER_DIR = conftest.REPO_ROOT / "tests" / "oidc-provider"
CLIENT_SECRET = "teamster-client-secret-0123456789"
OTHER_SECRET = "other-client-secret-0123456789"
# The other client's redirect URI: never opened, its code is read from the Location header.
OTHER_REDIRECT = "http://127.0.0.1:9/callback"
SPEC = {"model": {"name": "offline/echo"}, "instructions": "Be brief."}


def node() -> str:
    """Node 22 when scripts/node22 has unpacked it, else the system's (oidc-provider runs on 20
    with a warning)."""
    unpacked = conftest.REPO_ROOT / ".cache" / "node22" / "bin" / "node"
    found = str(unpacked) if unpacked.is_file() else shutil.which("node")
    if found is None:
        pytest.fail("Node.js is needed to run the OIDC provider (apt-get install nodejs npm)", pytrace=False)
    return found


def install_provider() -> None:
    """`npm ci` in tests/oidc-provider unless node_modules matches package-lock.json. Workers
    of one run take turns (a file lock): two `npm ci` in one directory undo each other."""
    stamp = PROVIDER_DIR / "node_modules" / ".package-lock.sha256"
    wanted = hashlib.sha256((PROVIDER_DIR / "package-lock.json").read_bytes()).hexdigest()
    with open(os.path.join(tempfile.gettempdir(), "teamster-oidc-provider-install.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.is_file() and stamp.read_text().strip() == wanted:
            return
        npm = shutil.which("npm", path=f"{os.path.dirname(node())}{os.pathsep}{os.environ.get('PATH', '')}")
        assert npm, "npm is needed to install the OIDC provider"
        subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--silent"], cwd=PROVIDER_DIR, check=True,
                       stdin=subprocess.DEVNULL, timeout=600)
        stamp.write_text(wanted)


class Setup(typing.NamedTuple):
    issuer: str
    url: str
    server: conftest.TeamsterServer


@pytest.fixture(scope="module")
def oidc(workdir, fake_model) -> typing.Iterator[Setup]:
    install_provider()
    port = conftest.free_port()
    url = f"http://127.0.0.1:{port}"
    clients = [
        {"client_id": "teamster", "client_secret": CLIENT_SECRET, "redirect_uris": [f"{url}/api/v1/auth/callback"]},
        {"client_id": "other-app", "client_secret": OTHER_SECRET, "redirect_uris": [OTHER_REDIRECT]},
    ]
    provider = conftest.Process("oidc-provider", [node(), str(PROVIDER_DIR / "provider.mjs")],
                                workdir / "oidc-provider.log", env={"OIDC_CLIENTS": json.dumps(clients)})
    issuer = provider.start()
    secret_file = workdir / "oidc-client-secret"
    secret_file.write_text(CLIENT_SECRET + "\n")
    secret_file.chmod(0o600)
    server = conftest.TeamsterServer(workdir, fake_model, extra_args=[
        "--auth", "api-keys",
        "--oidc-issuer", issuer, "--oidc-client-id", "teamster", "--oidc-client-secret-file", str(secret_file),
        "--oidc-tenant-claim", "tenant", "--oidc-admin-claim", "groups=teamster-admins",
    ])
    try:
        # The provider knows the server's redirect URI, so the server listens on that port.
        with mock.patch.object(conftest, "free_port", lambda: port):
            server.start()
        assert server.url == url
        yield Setup(issuer, url, server)
    finally:
        server.close()
        provider.kill()


def browser() -> httpx.Client:
    return httpx.Client(timeout=wire.TIMEOUT, follow_redirects=False)


def set_cookies(response: httpx.Response) -> list[str]:
    return response.headers.get_list("set-cookie")


def through_provider(client: httpx.Client, location: str, stop_at: str, login: typing.Optional[str],
                     abort: bool = False) -> str:
    """Follows the provider's redirects and fills its pages (login as `login`, then consent;
    with `abort`, gives up at the login page) until it sends the browser to `stop_at`; returns
    that URL."""
    for _ in range(20):
        if location.startswith(stop_at):
            return location
        response = client.get(location)
        if response.status_code in (302, 303):
            location = urllib.parse.urljoin(location, response.headers["location"])
            continue
        assert response.status_code == 200, (location, response.status_code, response.text[:500])
        page = response.text
        action = urllib.parse.urljoin(location, re.search(r'<form[^>]*action="([^"]+)"', page).group(1))
        if 'name="login"' in page:
            if abort:
                location = urllib.parse.urljoin(location, action.rstrip("/") + "/abort")
                continue
            form = {"prompt": "login", "login": login, "password": "any"}
        else:
            assert 'value="consent"' in page, page[:500]
            form = {"prompt": "consent"}
        submitted = client.post(action, data=form)
        assert submitted.status_code in (302, 303), (submitted.status_code, submitted.text[:500])
        location = urllib.parse.urljoin(action, submitted.headers["location"])
    raise AssertionError(f"the provider never sent the browser to {stop_at}")


def begin(setup: Setup, client: httpx.Client, return_to: typing.Optional[str] = None) -> str:
    """GET /api/v1/auth/login: the redirect to the provider, checked; returns its URL."""
    params = {} if return_to is None else {"return_to": return_to}
    response = client.get(f"{setup.url}/api/v1/auth/login", params=params)
    assert response.status_code == 302, response.text
    location = response.headers["location"]
    assert location.startswith(f"{setup.issuer}/auth?"), location
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(location).query))
    assert query["response_type"] == "code" and query["client_id"] == "teamster"
    assert query["redirect_uri"] == f"{setup.url}/api/v1/auth/callback"
    assert query["code_challenge_method"] == "S256" and len(query["code_challenge"]) == 43
    assert len(query["state"]) >= 32 and len(query["nonce"]) >= 32 and query["state"] != query["nonce"]
    assert "openid" in query["scope"].split()
    (pending,) = [cookie for cookie in set_cookies(response) if cookie.startswith("oidc_login_")]
    assert "HttpOnly" in pending and "SameSite=Lax" in pending and "Path=/api/v1/auth/callback" in pending
    return location


def sign_in(setup: Setup, login: str, return_to: typing.Optional[str] = None) -> tuple[httpx.Client, httpx.Response]:
    """A browser that signed in as `login`, and the callback's answer."""
    client = browser()
    callback = through_provider(client, begin(setup, client, return_to), f"{setup.url}/api/v1/auth/callback", login)
    answer = client.get(callback)
    assert answer.status_code == 302, answer.text
    return client, answer


def id_token(client: httpx.Client) -> str:
    (token,) = [cookie.value for cookie in client.cookies.jar if cookie.name == "id_token"]
    return token


def me(setup: Setup, client: httpx.Client, **kw: typing.Any) -> httpx.Response:
    return client.get(f"{setup.url}/api/v1/auth/me", **kw)


def error_marker(response: httpx.Response) -> str:
    assert response.status_code == 302, response.text
    location = response.headers["location"]
    assert location.startswith("/?error="), location
    return location.removeprefix("/?error=")


def segment(token: str, index: int) -> dict:
    part = token.split(".")[index]
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


def encode(value: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def test_a_browser_signs_in_and_the_cookie_is_a_session(oidc):
    client, answer = sign_in(oidc, "alice")
    assert answer.headers["location"] == "/"
    cookies = set_cookies(answer)
    (session,) = [cookie for cookie in cookies if cookie.startswith("id_token=")]
    attributes = [part.strip() for part in session.split(";")]
    assert {"HttpOnly", "SameSite=Lax", "Path=/"} <= set(attributes), session
    assert "Secure" not in attributes  # the public URL is plain http
    max_age = int(next(part for part in attributes if part.startswith("Max-Age=")).removeprefix("Max-Age="))
    claims = segment(id_token(client), 1)
    assert 0 < max_age <= claims["exp"] - claims["iat"]
    assert claims["aud"] == "teamster" and claims["iss"] == oidc.issuer and claims["sub"] == "alice"
    # The pending login is cleared.
    assert any(cookie.startswith("oidc_login_") and "Max-Age=0" in cookie for cookie in cookies), cookies

    body = me(oidc, client)
    assert body.status_code == 200, body.text
    assert body.json() == {"type": "oidc-connected", "email": "alice@example.com", "role": "member"}
    # Nothing but the cookie: without it the same request is a 401 in the error shape.
    anonymous = me(oidc, browser())
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["code"] == "unauthorized"
    assert anonymous.headers["teamster-login"] == "oidc"


def test_sessions_belong_to_the_signed_in_subject(oidc):
    alice, _ = sign_in(oidc, "alice")
    bob, _ = sign_in(oidc, "bob")
    origin = {"origin": oidc.url}
    created = alice.post(f"{oidc.url}/api/v1/sessions", json={"agent": {"spec": SPEC}}, headers=origin)
    assert created.status_code == 201, created.text
    session = created.json()["data"]
    assert session["created_by"] == "default:alice"
    sid = session["id"]
    assert alice.get(f"{oidc.url}/api/v1/sessions/{sid}").status_code == 200
    # Another user of the same provider and tenant does not see it at all.
    hidden = bob.get(f"{oidc.url}/api/v1/sessions/{sid}")
    assert hidden.status_code == 404, hidden.text
    assert sid not in {item["id"] for item in bob.get(f"{oidc.url}/api/v1/sessions").json()["data"]}
    # Deleting is idempotent (204 for a missing session), and another's session stays.
    assert bob.delete(f"{oidc.url}/api/v1/sessions/{sid}", headers=origin).status_code == 204
    assert alice.get(f"{oidc.url}/api/v1/sessions/{sid}").status_code == 200
    # The owner's bearer ID token is the same caller as the owner's cookie.
    bearer = httpx.get(f"{oidc.url}/api/v1/sessions/{sid}", headers={"authorization": f"Bearer {id_token(alice)}"},
                       timeout=wire.TIMEOUT)
    assert bearer.status_code == 200, bearer.text
    run = alice.post(f"{oidc.url}/api/v1/sessions/{sid}/turns", headers=origin, json={
        "input": [{"type": "user.message", "content": "hello"}], "stream": False})
    assert run.status_code == 200, run.text


def test_a_cookie_request_that_changes_something_must_come_from_our_pages(oidc):
    alice, _ = sign_in(oidc, "alice")
    body = {"agent": {"spec": SPEC}}
    for headers in ({}, {"origin": "http://127.0.0.1:1"}, {"origin": "null"}, {"referer": "http://evil.example/page"}):
        refused = alice.post(f"{oidc.url}/api/v1/sessions", json=body, headers=headers)
        assert refused.status_code == 403, (headers, refused.text)
        assert refused.json()["error"]["code"] in ("csrf_refused", "origin_not_allowed"), refused.text
    accepted = alice.post(f"{oidc.url}/api/v1/sessions", json=body, headers={"referer": f"{oidc.url}/#/chat/x"})
    assert accepted.status_code == 201, accepted.text
    # A bearer is not a cookie: it needs no origin.
    bearer = httpx.post(f"{oidc.url}/api/v1/sessions", json=body, timeout=wire.TIMEOUT,
                        headers={"authorization": f"Bearer {id_token(alice)}"})
    assert bearer.status_code == 201, bearer.text


def test_bearer_id_tokens_and_api_keys_work_side_by_side(oidc):
    admin, _ = sign_in(oidc, "admin-root")
    token = id_token(admin)
    as_admin = {"authorization": f"Bearer {token}"}
    assert httpx.get(f"{oidc.url}/api/v1/auth/me", headers=as_admin, timeout=wire.TIMEOUT).json() == {
        "type": "oidc-connected", "email": "admin-root@example.com", "role": "admin"}
    created = httpx.post(f"{oidc.url}/api/v1/keys", json={"subject": "ci-bot", "service_account": True},
                         headers=as_admin, timeout=wire.TIMEOUT)
    assert created.status_code == 201, created.text
    key = created.json()["data"]["secret"]
    assert key.startswith("tsk_")
    as_key = httpx.get(f"{oidc.url}/api/v1/auth/me", headers={"authorization": f"Bearer {key}"}, timeout=wire.TIMEOUT)
    assert as_key.json() == {"type": "default", "email": "ci-bot", "role": "member"}
    # A member signed in with OIDC is no admin.
    alice, _ = sign_in(oidc, "alice")
    assert alice.get(f"{oidc.url}/api/v1/keys").status_code == 403
    # The tenant comes from the token's tenant claim.
    carol, _ = sign_in(oidc, "acme.carol")
    session = carol.post(f"{oidc.url}/api/v1/sessions", json={"agent": {"spec": SPEC}}, headers={"origin": oidc.url})
    assert session.json()["data"]["created_by"] == "acme:acme.carol"


def other_app_token(setup: Setup) -> str:
    """An ID token the provider issued to `other-app`: a real, signed token for another audience."""
    client = browser()
    query = urllib.parse.urlencode({
        "response_type": "code", "client_id": "other-app", "redirect_uri": OTHER_REDIRECT, "scope": "openid email",
        "state": "s" * 32, "nonce": "n" * 32, "code_challenge": base64.urlsafe_b64encode(
            hashlib.sha256(b"v" * 43).digest()).rstrip(b"=").decode(), "code_challenge_method": "S256"})
    redirected = through_provider(client, f"{setup.issuer}/auth?{query}", OTHER_REDIRECT, "alice")
    code = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(redirected).query))["code"]
    discovery = httpx.get(f"{setup.issuer}/.well-known/openid-configuration", timeout=wire.TIMEOUT).json()
    tokens = httpx.post(discovery["token_endpoint"], auth=("other-app", OTHER_SECRET), timeout=wire.TIMEOUT, data={
        "grant_type": "authorization_code", "code": code, "redirect_uri": OTHER_REDIRECT, "code_verifier": "v" * 43})
    assert tokens.status_code == 200, tokens.text
    return tokens.json()["id_token"]


def test_tampered_and_foreign_tokens_are_refused(oidc):
    alice, _ = sign_in(oidc, "alice")
    token = id_token(alice)
    header, payload, signature = token.split(".")
    claims = segment(token, 1)
    foreign = other_app_token(oidc)
    assert segment(foreign, 1)["aud"] == "other-app"
    candidates = {
        "another subject, same signature": f"{header}.{encode({**claims, 'sub': 'bob'})}.{signature}",
        "a flipped signature": f"{header}.{payload}.{signature[:-4]}{'AAAA' if signature[-4:] != 'AAAA' else 'BBBB'}",
        "alg none": f"{encode({'alg': 'none'})}.{payload}.",
        "HS256 with a guessable key": f"{encode({**segment(token, 0), 'alg': 'HS256'})}.{payload}.{signature}",
        "an unknown key id": f"{encode({**segment(token, 0), 'kid': 'nobody'})}.{payload}.{signature}",
        "another client's token": foreign,
        "not a token": "garbage",
    }
    for what, candidate in candidates.items():
        refused = httpx.get(f"{oidc.url}/api/v1/auth/me", headers={"authorization": f"Bearer {candidate}"}, timeout=wire.TIMEOUT)
        assert refused.status_code == 401, (what, refused.text)
        assert refused.json()["error"]["type"] == "authentication_error", what
        # As a cookie too; a broken session cookie is cleared.
        cookie = me(oidc, browser(), headers={"cookie": f"id_token={candidate}"})
        assert cookie.status_code == 401, (what, cookie.text)
        assert any(line.startswith("id_token=;") and "Max-Age=0" in line for line in set_cookies(cookie)), what
    # The genuine token still works after all that.
    assert httpx.get(f"{oidc.url}/api/v1/auth/me", headers={"authorization": f"Bearer {token}"},
                     timeout=wire.TIMEOUT).status_code == 200


def test_bad_reused_and_crossed_states_are_refused(oidc):
    # A state no login of this browser began.
    client = browser()
    begin(oidc, client)
    assert error_marker(client.get(f"{oidc.url}/api/v1/auth/callback", params={"state": "forged", "code": "x"})) == "invalid_state"
    assert "id_token" not in {cookie.name for cookie in client.cookies.jar}

    # A finished login's callback, replayed: the pending login is gone.
    client = browser()
    callback = through_provider(client, begin(oidc, client), f"{oidc.url}/api/v1/auth/callback", "alice")
    pending = [(cookie.name, cookie.value) for cookie in client.cookies.jar if cookie.name.startswith("oidc_login_")]
    assert client.get(callback).status_code == 302
    assert error_marker(browser().get(callback)) == "invalid_state"
    # Replayed with the pending login's cookie kept by an attacker: the provider refuses the
    # used code, so no session comes of it.
    replay = browser()
    replayed = replay.get(callback, headers={"cookie": "; ".join(f"{name}={value}" for name, value in pending)})
    assert error_marker(replayed) == "token_exchange_failed"
    assert not any(line.startswith("id_token=") and "Max-Age=0" not in line for line in set_cookies(replayed))

    # Two logins crossed: the pending login of one does not open for the state of the other.
    first, second = browser(), browser()
    first_callback = through_provider(first, begin(oidc, first), f"{oidc.url}/api/v1/auth/callback", "alice")
    begin(oidc, second)
    (second_pending,) = [cookie.value for cookie in second.cookies.jar if cookie.name.startswith("oidc_login_")]
    first_state = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(first_callback).query))["state"]
    # Under the first login's cookie name, so only the seal's binding to its state refuses it.
    crossed = browser().get(first_callback, headers={"cookie": f"oidc_login_{first_state[:16]}={second_pending}"})
    assert error_marker(crossed) == "invalid_state"
    # A callback that names another issuer (RFC 9207: a provider mix-up).
    client = browser()
    callback = through_provider(client, begin(oidc, client), f"{oidc.url}/api/v1/auth/callback", "alice")
    assert "iss=" in callback
    mixed_up = re.sub(r"iss=[^&]+", "iss=" + urllib.parse.quote("https://evil.example", safe=""), callback)
    assert error_marker(client.get(mixed_up)) == "invalid_issuer"
    # Without a state at all.
    assert error_marker(browser().get(f"{oidc.url}/api/v1/auth/callback", params={"code": "x"})) == "invalid_state"


def test_an_identity_provider_error_comes_back_as_an_error_marker(oidc):
    client = browser()
    callback = through_provider(client, begin(oidc, client), f"{oidc.url}/api/v1/auth/callback", None, abort=True)
    assert dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(callback).query))["error"] == "access_denied"
    answer = client.get(callback)
    assert error_marker(answer) == "access_denied"
    assert not any(line.startswith("id_token=") for line in set_cookies(answer))
    assert me(oidc, client).status_code == 401


@pytest.mark.parametrize("return_to, expected", [
    ("/#/chat/c1", "/#/chat/c1"),
    ("/#/settings?x=1", "/#/settings?x=1"),
    ("//evil.example/", "/"),
    ("/\\evil.example", "/"),
    ("https://evil.example/", "/"),
    ("javascript:alert(1)", "/"),
])
def test_only_same_origin_paths_are_returned_to(oidc, return_to, expected):
    _, answer = sign_in(oidc, "alice", return_to)
    assert answer.headers["location"] == expected


def test_logout_clears_the_session(oidc):
    client, _ = sign_in(oidc, "alice")
    assert me(oidc, client).status_code == 200
    out = client.post(f"{oidc.url}/api/v1/auth/logout", headers={"origin": oidc.url})
    assert out.status_code == 204
    (cleared,) = [line for line in set_cookies(out) if line.startswith("id_token=")]
    assert cleared.startswith("id_token=;") and "Max-Age=0" in cleared and "Path=/" in cleared
    assert "id_token" not in {cookie.name for cookie in client.cookies.jar}
    assert me(oidc, client).status_code == 401


def test_without_authentication_the_routes_lead_straight_back(server):
    url = server.url
    client = browser()
    assert client.get(f"{url}/api/v1/auth/login").headers["location"] == "/"
    assert client.get(f"{url}/api/v1/auth/login", params={"return_to": "/#/chat/c1"}).headers["location"] == "/#/chat/c1"
    assert client.get(f"{url}/api/v1/auth/login", params={"return_to": "//evil.example"}).headers["location"] == "/"
    assert client.get(f"{url}/api/v1/auth/callback", params={"state": "s", "code": "c"}).headers["location"] == "/"
    out = client.post(f"{url}/api/v1/auth/logout")
    assert out.status_code == 204 and not set_cookies(out)
    assert client.get(f"{url}/api/v1/auth/me").json() == {"type": "default", "email": "default", "role": "operator"}


def test_the_log_names_no_secret_code_or_token(oidc):
    client = browser()
    callback = through_provider(client, begin(oidc, client), f"{oidc.url}/api/v1/auth/callback", "alice")
    code = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(callback).query))["code"]
    assert client.get(callback).status_code == 302
    token = id_token(client)
    # Failures are logged with their reasons: a replayed code, a broken token.
    assert error_marker(browser().get(callback)) == "invalid_state"
    assert me(oidc, browser(), headers={"cookie": f"id_token={token[:-6]}AAAAAA"}).status_code == 401
    log = oidc.server.db_path.with_suffix(".log").read_text()
    assert "signed in with OIDC" in log and "an OIDC login failed" in log
    for secret in (CLIENT_SECRET, code, token, token.split(".")[1], token.split(".")[2]):
        assert secret not in log
