"""A small, real MCP server for tests, written with the official Python `mcp` package (MCPServer,
the package's FastMCP).

Run it over stdio, streamable HTTP or SSE:

    python tests/mcp_servers/tools_server.py --transport stdio
    python tests/mcp_servers/tools_server.py --transport streamable-http [--port 0] [--require-token T]
    python tests/mcp_servers/tools_server.py --transport sse [--port 0]

Over HTTP the server binds 127.0.0.1 (port 0 picks a free one) and prints one line
`LISTENING <port>` on stdout once it accepts connections, so a test can wait for it without
polling. `--require-token T` answers 401 with a `WWW-Authenticate` challenge to every request
whose `Authorization` header is not `Bearer T`. `--page-size N` makes `tools/list` answer in pages
of N tools, to exercise cursors.

The tools cover what a client must handle: plain text (`echo`), structured output only (`add`),
annotations (`write_note`, `delete_everything`), tool errors (`fail`), slow calls for timeouts and
cancellation (`slow`, `cancelled_calls`), large results (`big`), per-process state (`counter`),
request headers (`whoami`), mixed content blocks (`picture`), the process environment (`getenv`),
a server that dies mid-call (`crash`), progress reports (`phases`), a tool with a title and no
hints (`lookup`) and the request's `_meta` (`request_meta`).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import sys
from typing import Any

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import (
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ListToolsResult,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
)

# A 1x1 transparent PNG.
PIXEL = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
    )
).decode()


class PagedServer(MCPServer):
    """MCPServer whose `tools/list` answers in pages when a page size is set."""

    page_size: int | None = None

    async def _handle_list_tools(self, ctx: Any, params: Any) -> ListToolsResult:
        tools = await self.list_tools()
        if not self.page_size:
            return ListToolsResult(tools=tools)
        cursor = getattr(params, "cursor", None) if params is not None else None
        start = int(cursor) if cursor else 0
        end = start + self.page_size
        next_cursor = str(end) if end < len(tools) else None
        return ListToolsResult(tools=tools[start:end], next_cursor=next_cursor)


server = PagedServer("teamster-test-server", version="1.2.3")

state = {"counter": 0, "cancelled": 0, "notes": []}


@server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
def echo(text: str) -> str:
    """Returns the text it is given."""
    return text


@server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
def add(a: int, b: int) -> CallToolResult:
    """Adds two integers; the result is structured content only."""
    return CallToolResult(content=[], structured_content={"sum": a + b})


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
def write_note(text: str) -> str:
    """Stores a note in memory."""
    state["notes"].append(text)
    return f"noted ({len(state['notes'])} notes)"


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
def delete_everything() -> str:
    """Deletes every note."""
    state["notes"].clear()
    return "deleted"


@server.tool()
def fail(message: str) -> str:
    """Fails with the given message."""
    raise ToolError(message)


@server.tool()
async def slow(seconds: float) -> str:
    """Sleeps, then answers; counts the calls cancelled while sleeping."""
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        state["cancelled"] += 1
        raise
    return f"slept {seconds}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def cancelled_calls() -> int:
    """How many `slow` calls were cancelled in this process."""
    return state["cancelled"]


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def big(n_bytes: int) -> str:
    """Returns a text of n_bytes bytes."""
    return "x" * n_bytes


@server.tool()
def counter() -> int:
    """Increments a per-process counter and returns it."""
    state["counter"] += 1
    return state["counter"]


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def whoami(ctx: Context) -> str:
    """Returns the Authorization header of the request, or an empty text without one."""
    headers = ctx.headers or {}
    return headers.get("authorization", "")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def picture() -> CallToolResult:
    """Returns a caption, an image and an embedded text resource."""
    return CallToolResult(
        content=[
            TextContent(text="a pixel"),
            ImageContent(data=PIXEL, mime_type="image/png"),
            EmbeddedResource(
                resource=TextResourceContents(uri="note://1", mime_type="text/plain", text="hello")
            ),
        ]
    )


@server.tool()
def crash() -> str:
    """Exits the server process in the middle of the call."""
    sys.stdout.flush()
    os._exit(3)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def getenv(name: str) -> str:
    """Returns an environment variable of the server process, or `<unset>`."""
    return os.environ.get(name, "<unset>")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def phases(steps: int, ctx: Context) -> str:
    """Works through its steps, reporting each as progress (`notifications/progress`)."""
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"phase {step} of {steps}")
        await anyio.sleep(0.01)
    return f"{steps} phases done"


@server.tool(title="Look up a word")
def lookup(word: str) -> str:
    """Looks a word up; listed with a title and no hints at all."""
    return f"{word}: a word"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def request_meta(ctx: Context) -> str:
    """Returns the `_meta` of the call's request as JSON, the progress token and the protocol's
    own keys left out."""
    meta = dict(ctx.request_context.meta or {})
    own = {key: value for key, value in meta.items()
           if key not in ("progressToken", "progress_token") and not key.startswith("io.modelcontextprotocol/")}
    return json.dumps(own, sort_keys=True)


def require_token(app: Any, token: str) -> Any:
    """Wraps an ASGI app so that requests without `Authorization: Bearer <token>` get a 401."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization") != expected:
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b'Bearer realm="teamster-test"'),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": b'{"error":"unauthorized"}'})
                return
        await app(scope, receive, send)

    return guarded


def serve_http(app: Any, port: int) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(64)
    print(f"LISTENING {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", choices=["stdio", "streamable-http", "sse"], default="stdio")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--require-token", default=None)
    parser.add_argument("--page-size", type=int, default=None)
    args = parser.parse_args()
    server.page_size = args.page_size

    if args.transport == "stdio":
        server.run("stdio")
        return
    if args.transport == "sse":
        app = server.sse_app()
    else:
        app = server.streamable_http_app()
    if args.require_token:
        app = require_token(app, args.require_token)
    serve_http(app, args.port)


if __name__ == "__main__":
    main()
