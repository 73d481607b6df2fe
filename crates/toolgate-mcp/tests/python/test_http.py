"""The MCP gateway over Streamable HTTP: the official Python `mcp` client against
`toolgate serve`'s /mcp, in front of server-everything (npm) on stdio."""

from __future__ import annotations

import time
from collections.abc import Iterator

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from conftest import TOKEN_A, TOKEN_B, Gateway, start_gateway, tokens_table, upstream_table

CONFIG = (
    tokens_table()
    + upstream_table()
    + """
[tools."mcp:everything/echo"]
rate = "2/min"
burst = 2

[tools."mcp:everything/get-sum"]
rate = "1/s"
burst = 1
on_limit = "wait"
max_wait = "3s"

[tools."mcp:everything/get-env"]
rate = "1/3s"
burst = 1
on_limit = "wait"
max_wait = "5s"

[tools."mcp:everything/get-tiny-image"]
rate = "1/min"
burst = 1
"""
)


@pytest.fixture(scope="module")
def gw() -> Iterator[Gateway]:
    yield from start_gateway(CONFIG)


def client(gw: Gateway, token: str = TOKEN_A, **kw: object) -> Client:
    http = create_mcp_http_client(headers=gw.headers(token))
    return Client(streamable_http_client(gw.mcp, http_client=http), cache=None, **kw)  # type: ignore[arg-type]


def initialize(n: int) -> dict:
    """A handshake-era `initialize` request (it opens a session)."""
    return {
        "jsonrpc": "2.0",
        "id": n,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }


def total_decisions(gw: Gateway) -> int:
    tools = httpx2.get(f"{gw.url}/v1/tools", headers=gw.headers()).json()["tools"]
    return sum(t["admitted"] + t["rejected"] for t in tools)


async def test_tools_are_listed_under_their_exposed_names(gw: Gateway) -> None:
    async with client(gw) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    assert "everything__echo" in tools, sorted(tools)
    assert "everything__get-sum" in tools
    echo = tools["everything__echo"]
    assert echo.description == "Echoes back the input string"
    assert echo.input_schema["properties"]["message"]["type"] == "string"
    assert echo.annotations is not None and echo.annotations.read_only_hint is True


async def test_a_call_within_quota_returns_the_upstreams_result_and_beyond_it_a_rejection(
    gw: Gateway,
) -> None:
    before = gw.upstream_calls("mcp:everything/echo")
    async with client(gw) as c:
        ok = [await c.call_tool("everything__echo", {"message": f"hi {i}"}) for i in range(2)]
        assert [r.is_error for r in ok] == [False, False]
        assert ok[1].content[0].text == "Echo: hi 1"  # type: ignore[union-attr]
        denied = await c.call_tool("everything__echo", {"message": "one too many"})
    assert denied.is_error is True
    data = denied.structured_content
    assert data is not None
    assert data["tool"] == "everything__echo"
    assert data["quota"] == 'tools."mcp:everything/echo".rate'
    assert data["reason"] == "rate_limited"
    # 2/min: the next token in 30 s.
    assert 25_000 <= data["retry_after_ms"] <= 30_000, data
    text = denied.content[0].text  # type: ignore[union-attr]
    assert text.startswith('everything__echo is rate limited (tools."mcp:everything/echo".rate); retry after ')
    assert text.endswith(" s")
    # The rejected call never reached the upstream.
    assert gw.upstream_calls("mcp:everything/echo") - before == 2
    state = gw.tool("mcp:everything/echo")
    assert (state["admitted"], state["rejected"]) == (2, 1)


async def test_initialize_and_tools_list_consume_nothing(gw: Gateway) -> None:
    before = total_decisions(gw)
    # 100 sessions, each opened with `initialize` and listing the tools (the
    # handshake-era protocol, which has sessions) ...
    accept = {"Accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient(headers={**gw.headers(), **accept}) as http:
        for i in range(100):
            r = await http.post(gw.mcp, json=initialize(i))
            assert r.status_code == 200, r.text
            h = {"mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
            r = await http.post(gw.mcp, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=h)
            assert r.status_code == 202, r.text
            r = await http.post(gw.mcp, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=h)
            assert "everything__echo" in r.text, r.text
            r = await http.post(gw.mcp, json={"jsonrpc": "2.0", "id": 3, "method": "ping"}, headers=h)
            assert r.status_code == 200, r.text
            assert (await http.delete(gw.mcp, headers=h)).status_code in (200, 202, 204)
    # ... and 100 listings through the official client (2026-07-28, no sessions).
    async with client(gw) as c:
        for _ in range(100):
            assert (await c.list_tools()).tools
    assert total_decisions(gw) == before
    assert gw.upstream_calls("mcp:everything/echo") == gw.tool("mcp:everything/echo")["admitted"]


async def test_wait_mode_admits_a_queued_call_when_the_quota_refills(gw: Gateway) -> None:
    async with client(gw) as c:
        first = await c.call_tool("everything__get-sum", {"a": 1, "b": 2})
        t0 = time.monotonic()
        second = await c.call_tool("everything__get-sum", {"a": 20, "b": 22})
        waited = time.monotonic() - t0
    assert first.is_error is False and second.is_error is False, (first, second)
    assert "42" in second.content[0].text  # type: ignore[union-attr]
    # 1/s with burst 1: the second call waits for the refill (about 1 s), then runs.
    assert 0.6 <= waited <= 2.5, waited
    assert gw.tool("mcp:everything/get-sum")["rejected"] == 0


async def test_a_cancelled_waiting_call_leaves_no_trace(gw: Gateway) -> None:
    tool = "mcp:everything/get-env"
    async with client(gw) as c:
        assert (await c.call_tool("everything__get-env", {})).is_error is False
        # The first call was admitted before it returned: 1/3s with burst 1 refills
        # at most 3 s after this.
        t_first = time.monotonic()
        async with anyio.create_task_group() as tg:
            tg.start_soon(c.call_tool, "everything__get-env", {})
            with anyio.fail_after(3):
                while gw.tool(tool)["waiting"] != 1:
                    await anyio.sleep(0.05)
            tg.cancel_scope.cancel()
        with anyio.fail_after(3):
            while gw.tool(tool)["waiting"] != 0:
                await anyio.sleep(0.05)
        state = gw.tool(tool)
        assert (state["admitted"], state["rejected"], state["in_flight"]) == (1, 0, 0), state
        # The next call takes the refill the cancelled one would have had: it
        # completes at most one period (3 s) after the first call returned. Had the
        # cancelled call kept its place, the refill would be its and this call would
        # wait for the next one, two periods (6 s) after the first's admission;
        # 4.5 s leaves 1.5 s for a loaded machine and still tells the two apart.
        third = await c.call_tool("everything__get-env", {})
        assert third.is_error is False
        assert time.monotonic() - t_first < 4.5, time.monotonic() - t_first
    assert gw.upstream_calls(tool) == 2
    assert gw.tool(tool)["admitted"] == 2


async def test_jsonrpc_and_auth_edges(gw: Gateway) -> None:
    # No token: the gateway's usual 401, before MCP.
    r = httpx2.post(gw.mcp, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert r.status_code == 401
    # An unknown tool is a JSON-RPC error (invalid params), not a tool result.
    async with client(gw) as c:
        with pytest.raises(Exception, match="unknown tool"):
            await c.call_tool("everything__no_such_tool", {})


async def test_a_session_belongs_to_the_tenant_that_opened_it(gw: Gateway) -> None:
    init = initialize(1)
    accept = {"Accept": "application/json, text/event-stream"}
    r = httpx2.post(gw.mcp, json=init, headers={**gw.headers(TOKEN_A), **accept})
    assert r.status_code == 200, r.text
    session = r.headers["mcp-session-id"]
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    theirs = {**gw.headers(TOKEN_B), **accept, "mcp-session-id": session, "mcp-protocol-version": "2025-06-18"}
    r = httpx2.post(gw.mcp, json=ping, headers=theirs)
    assert r.status_code == 404, r.text
    mine = {**theirs, **gw.headers(TOKEN_A)}
    r = httpx2.post(gw.mcp, json=ping, headers=mine)
    assert r.status_code in (200, 202), r.text


async def test_progress_of_a_running_call_reaches_the_client(gw: Gateway) -> None:
    seen: list[tuple[float, float | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total))

    async with client(gw) as c:
        r = await c.call_tool(
            "everything__trigger-long-running-operation",
            {"duration": 0.6, "steps": 3},
            progress_callback=on_progress,
        )
    assert r.is_error is False, r
    assert "Long running operation completed" in r.content[0].text  # type: ignore[union-attr]
    assert seen == [(1, 3), (2, 3), (3, 3)], seen
