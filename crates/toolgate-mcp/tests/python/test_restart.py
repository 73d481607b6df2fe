"""An upstream child process killed mid-session: calls fail with a clear error, the
child is started again, later calls succeed; on shutdown the child is stopped."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from collections.abc import Iterator

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from conftest import Gateway, start_gateway, tokens_table, upstream_table


@pytest.fixture
def gw() -> Iterator[Gateway]:
    yield from start_gateway(tokens_table() + upstream_table())


async def test_a_killed_upstream_is_restarted(gw: Gateway) -> None:
    http = create_mcp_http_client(headers=gw.headers())
    async with Client(streamable_http_client(gw.mcp, http_client=http), cache=None) as c:
        ok = await c.call_tool("everything__echo", {"message": "before"})
        assert ok.is_error is False
        [child] = gw.children()
        os.kill(child, signal.SIGKILL)
        # Until it is back, calls fail at once with a clear error.
        failed = None
        with anyio.fail_after(5):
            while failed is None:
                r = await c.call_tool("everything__echo", {"message": "during"})
                if r.is_error:
                    failed = r
                else:
                    await anyio.sleep(0.01)
        text = failed.content[0].text  # type: ignore[union-attr]
        assert text.startswith("everything__echo failed: "), text
        assert "everything" in text and ("not connected" in text or "failed" in text), text
        # The child is started again, and calls succeed.
        with anyio.fail_after(20):
            while True:
                r = await c.call_tool("everything__echo", {"message": "after"})
                if not r.is_error:
                    break
                await anyio.sleep(0.1)
        assert r.content[0].text == "Echo: after"  # type: ignore[union-attr]
        [new_child] = gw.children()
        assert new_child != child
    # SIGTERM: toolgate stops its children before it exits.
    gw.process.terminate()
    assert gw.process.wait(10) == 0
    with anyio.fail_after(5):
        while Path(f"/proc/{new_child}").exists() and "Z" not in _state(new_child):
            await anyio.sleep(0.05)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"
