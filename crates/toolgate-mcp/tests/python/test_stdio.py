"""`toolgate mcp` on stdio: the official Python `mcp` client launches it as a command,
as desktop assistants and IDEs do; server-everything (npm) is its upstream."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from conftest import toolgate_bin, upstream_table

CONFIG = (
    upstream_table()
    + """
[mcp]
on_reject = "jsonrpc_error"

[tools."mcp:everything/echo"]
rate = "1/min"
burst = 1
"""
)


@pytest.fixture
def config() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "toolgate.toml"
        path.write_text(CONFIG)
        yield str(path)


async def test_the_stdio_server_lists_admits_and_rejects(config: str) -> None:
    params = StdioServerParameters(command=toolgate_bin(), args=["mcp", "--config", config])
    async with Client(params, cache=None) as c:
        names = [t.name for t in (await c.list_tools()).tools]
        assert "everything__echo" in names, names
        ok = await c.call_tool("everything__echo", {"message": "over stdio"})
        assert ok.is_error is False
        assert ok.content[0].text == "Echo: over stdio"  # type: ignore[union-attr]
        # on_reject = "jsonrpc_error": the rejection is a JSON-RPC error with the data.
        with pytest.raises(Exception) as info:
            await c.call_tool("everything__echo", {"message": "again"})
    err = info.value
    assert getattr(err, "code", None) == -32000, repr(err)
    data = err.error.data  # type: ignore[attr-defined]
    assert data["tool"] == "everything__echo"
    assert data["quota"] == 'tools."mcp:everything/echo".rate'
    assert data["reason"] == "rate_limited"
    assert data["retry_after_ms"] > 50_000
    assert "is rate limited" in str(err)
