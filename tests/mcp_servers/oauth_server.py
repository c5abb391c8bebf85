"""An OAuth-protected MCP server for tests: one process that is both the authorization server and
the MCP server (resource server), built on the official Python `mcp` package's auth support.

    python tests/mcp_servers/oauth_server.py [--port 0] [--token-ttl 3600] [--default-user NAME]
                                             [--no-resource-metadata] [--oidc-discovery-only]

The server binds 127.0.0.1 (port 0 picks a free one) and prints one line `LISTENING <port>` on
stdout once it accepts connections. It serves:

- the authorization server: RFC 8414 metadata at `/.well-known/oauth-authorization-server`,
  dynamic client registration at `/register` (RFC 7591), `/authorize` and `/token` (authorization
  code with PKCE S256, refresh tokens, RFC 8707 resource indicators), all from the `mcp` package's
  handlers over the in-memory `TestProvider` below. `/authorize` shows no login page: it logs in
  the user named by its `login_as` query parameter (or `--default-user`) and redirects straight
  back to the client with a code; with neither, it redirects back with `error=access_denied`;
- the protected resource metadata (RFC 9728) at `/.well-known/oauth-protected-resource/mcp`;
- the MCP endpoint `/mcp` (streamable HTTP), which answers 401 with
  `WWW-Authenticate: Bearer ..., resource_metadata="..."` unless the request carries a valid
  access token issued for it. Its tools are `whoami` (the user the token belongs to) and `echo`;
- `GET /test/grants`, unauthenticated: how many registrations, authorization code grants and
  refresh grants the server has seen, so tests can tell whether a client refreshed;
- `GET /test/secrets`, unauthenticated: every access token, refresh token and client secret it
  has issued, so tests can check that a client stores none of them in the clear.

Access tokens live `--token-ttl` seconds; refresh tokens are rotated on every use. With
`--no-resource-metadata` the server behaves like a 2025-03-26 server (no protected resource
metadata, a bare challenge); with `--oidc-discovery-only` its metadata is served only at
`/.well-known/openid-configuration`.
"""

from __future__ import annotations

import argparse
import contextvars
import json
import secrets
import socket
import time
from typing import Any
from urllib.parse import parse_qs

import uvicorn
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    OAuthAuthorizationServerProvider,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from mcp_types import ToolAnnotations
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

SCOPE = "mcp"
RFC8414_PATH = "/.well-known/oauth-authorization-server"
OIDC_PATH = "/.well-known/openid-configuration"

# The user `/authorize` logs in, set per request from its `login_as` query parameter.
LOGIN_AS: contextvars.ContextVar[str | None] = contextvars.ContextVar("login_as", default=None)


class TestProvider(OAuthAuthorizationServerProvider[AuthorizationCode, RefreshToken, AccessToken]):
    """An in-memory authorization server whose only login is the `login_as` parameter."""

    def __init__(self, token_ttl: float, default_user: str | None) -> None:
        self.token_ttl = token_ttl
        self.default_user = default_user
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        # Access tokens with their exact expiry (AccessToken.expires_at is whole seconds).
        self.access_tokens: dict[str, tuple[AccessToken, float]] = {}
        self.refresh_tokens: dict[str, RefreshToken] = {}
        self.grants = {"registrations": 0, "authorization_code": 0, "refresh_token": 0}
        # Every secret issued, for `/test/secrets`.
        self.issued: dict[str, list[str]] = {"access_tokens": [], "refresh_tokens": [], "client_secrets": []}

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info
        self.grants["registrations"] += 1
        if client_info.client_secret:
            self.issued["client_secrets"].append(client_info.client_secret)

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        user = LOGIN_AS.get() or self.default_user
        if not user:
            raise AuthorizeError("access_denied", "nobody is logged in (pass login_as)")
        assert client.client_id is not None
        # Without a requested scope, the client gets the scopes it registered with.
        scopes = params.scopes if params.scopes is not None else (client.scope or "").split()
        code = secrets.token_urlsafe(32)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=scopes,
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
            subject=user,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        code = self.codes.get(authorization_code)
        return code if code is not None and code.client_id == client.client_id else None

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        self.grants["authorization_code"] += 1
        return self._issue(
            authorization_code.client_id,
            authorization_code.scopes,
            authorization_code.resource,
            authorization_code.subject,
        )

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> RefreshToken | None:
        token = self.refresh_tokens.get(refresh_token)
        return token if token is not None and token.client_id == client.client_id else None

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        self.refresh_tokens.pop(refresh_token.token, None)
        self.grants["refresh_token"] += 1
        return self._issue(
            refresh_token.client_id, scopes or refresh_token.scopes, refresh_token.resource, refresh_token.subject
        )

    async def load_access_token(self, token: str) -> AccessToken | None:
        entry = self.access_tokens.get(token)
        if entry is None or entry[1] <= time.time():
            return None
        return entry[0]

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access_tokens.pop(token.token, None)
        self.refresh_tokens.pop(token.token, None)

    def user_of(self, access_token: str) -> str | None:
        entry = self.access_tokens.get(access_token)
        return entry[0].subject if entry is not None else None

    def _issue(self, client_id: str, scopes: list[str], resource: str | None, subject: str | None) -> OAuthToken:
        access = secrets.token_urlsafe(32)
        refresh = secrets.token_urlsafe(32)
        expires = time.time() + self.token_ttl
        self.issued["access_tokens"].append(access)
        self.issued["refresh_tokens"].append(refresh)
        self.access_tokens[access] = (
            AccessToken(
                token=access,
                client_id=client_id,
                scopes=scopes,
                expires_at=int(expires) + 1,
                resource=resource,
                subject=subject,
            ),
            expires,
        )
        self.refresh_tokens[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource, subject=subject
        )
        return OAuthToken(
            access_token=access,
            expires_in=max(1, round(self.token_ttl)),
            scope=" ".join(scopes) or None,
            refresh_token=refresh,
        )


def build_server(base_url: str, provider: TestProvider, resource_metadata: bool) -> MCPServer:
    resource_url = f"{base_url}/mcp" if resource_metadata else None
    server = MCPServer(
        "teamster-oauth-test-server",
        version="1.0.0",
        auth_server_provider=provider,
        auth=AuthSettings(
            issuer_url=base_url,
            resource_server_url=resource_url,
            validate_token_resource=True if resource_url else None,
            required_scopes=[SCOPE],
            client_registration_options=ClientRegistrationOptions(
                enabled=True, valid_scopes=[SCOPE], default_scopes=[SCOPE]
            ),
        ),
    )

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def whoami(ctx: Context) -> str:
        """Returns the user the request's access token belongs to."""
        authorization = (ctx.headers or {}).get("authorization", "")
        token = authorization[7:] if authorization.lower().startswith("bearer ") else ""
        return provider.user_of(token) or ""

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
    def echo(text: str) -> str:
        """Returns the text it is given."""
        return text

    @server.custom_route("/test/grants", methods=["GET"])
    async def grants(request: Request) -> Response:
        return JSONResponse(provider.grants)

    @server.custom_route("/test/secrets", methods=["GET"])
    async def issued(request: Request) -> Response:
        return JSONResponse(provider.issued)

    return server


def test_hooks(app: Any, oidc_discovery_only: bool) -> Any:
    """Wraps the ASGI app: records `login_as` for `/authorize`, and with `oidc_discovery_only`
    serves the authorization server metadata only under its OpenID Connect name."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        path = scope.get("path", "")
        if path == "/authorize":
            query = parse_qs(scope.get("query_string", b"").decode())
            LOGIN_AS.set((query.get("login_as") or [None])[0])
        if oidc_discovery_only and path == RFC8414_PATH:
            body = json.dumps({"error": "not found"}).encode()
            await send(
                {"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"application/json")]}
            )
            await send({"type": "http.response.body", "body": body})
            return
        if oidc_discovery_only and path == OIDC_PATH:
            scope = {**scope, "path": RFC8414_PATH, "raw_path": RFC8414_PATH.encode()}
        await app(scope, receive, send)

    return wrapped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token-ttl", type=float, default=3600.0, help="access token lifetime in seconds")
    parser.add_argument("--default-user", default=None, help="user logged in when /authorize has no login_as")
    parser.add_argument("--no-resource-metadata", action="store_true")
    parser.add_argument("--oidc-discovery-only", action="store_true")
    args = parser.parse_args()

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(64)
    port = sock.getsockname()[1]

    provider = TestProvider(args.token_ttl, args.default_user)
    server = build_server(f"http://127.0.0.1:{port}", provider, not args.no_resource_metadata)
    app = test_hooks(server.streamable_http_app(), args.oidc_discovery_only)
    print(f"LISTENING {port}", flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
