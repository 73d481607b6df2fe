"""Fixtures of the MCP gateway's end-to-end tests: the `toolgate` binary, the
server-everything upstream (npm) and a running `toolgate serve` in front of it.

scripts/test.d/45-mcp.sh installs the packages and sets TOOLGATE_BIN and
TOOLGATE_MCP_EVERYTHING."""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest

HERE = Path(__file__).parent
ROOT = HERE.parents[3]
TOKEN_A = "token-of-acme"
TOKEN_B = "token-of-globex"


def toolgate_bin() -> str:
    path = Path(os.environ.get("TOOLGATE_BIN", ROOT / "target" / "debug" / "toolgate"))
    if not path.exists():
        pytest.fail(f"{path} not found: build it with `cargo build -p toolgate-gateway` (45-mcp.sh does)")
    return str(path)


def everything_js() -> str:
    default = ROOT / "target" / "mcp-node" / "node_modules" / "@modelcontextprotocol" / "server-everything"
    path = Path(os.environ.get("TOOLGATE_MCP_EVERYTHING", default / "dist" / "index.js"))
    if not path.exists():
        pytest.fail(f"{path} not found: scripts/test.d/45-mcp.sh installs it (npm ci)")
    return str(path)


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def upstream_table(extra: str = "") -> str:
    """`[mcp.servers.everything]`: server-everything on stdio, started by toolgate."""
    return f"""
[mcp.servers.everything]
command = "node"
args = [{json.dumps(everything_js())}]
{extra}
"""


@dataclass
class Gateway:
    """A running `toolgate serve`."""

    url: str
    process: subprocess.Popen[str]
    stderr: list[str]

    @property
    def mcp(self) -> str:
        return f"{self.url}/mcp"

    def headers(self, token: str = TOKEN_A) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    def tool(self, name: str) -> dict:
        r = httpx2.get(f"{self.url}/v1/tools/{name}", headers=self.headers())
        r.raise_for_status()
        return r.json()

    def upstream_calls(self, tool: str) -> int:
        """`toolgate_mcp_upstream_calls_total` of `tool` (a policy key): calls that
        reached the upstream."""
        text = httpx2.get(f"{self.url}/metrics").text
        total = 0
        for line in text.splitlines():
            if line.startswith("toolgate_mcp_upstream_calls_total{") and f'tool="{tool}"' in line:
                total += int(float(line.rsplit(" ", 1)[1]))
        return total

    def children(self) -> list[int]:
        """The process ids of toolgate's child processes (its stdio upstreams)."""
        out = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == self.process.pid:
                out.append(int(stat.parent.name))
        return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_crm(*tls: str) -> Iterator[str]:
    """crm_server.py (a Streamable HTTP upstream) on an ephemeral port; with `tls`
    (CERTFILE, KEYFILE) over https. Yields its URL."""
    port = free_port()
    p = subprocess.Popen([sys.executable, str(HERE / "crm_server.py"), str(port), *tls], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                if p.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"the upstream did not start: {p.stderr.read() if p.stderr else ''}")
                time.sleep(0.05)
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}/mcp"
    finally:
        p.terminate()
        p.wait(10)


def start_gateway(config: str, env: dict[str, str] | None = None) -> Iterator[Gateway]:
    """`toolgate serve` with `config`, its environment toolgate's plus `env`."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "toolgate.toml"
        path.write_text(config)
        p = subprocess.Popen(
            [toolgate_bin(), "serve", "--config", str(path), "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "RUST_LOG": "warn", **(env or {})},
        )
        stderr: list[str] = []
        assert p.stderr is not None and p.stdout is not None
        threading.Thread(target=lambda: stderr.extend(p.stderr), daemon=True).start()  # type: ignore[arg-type]
        url = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            if not line:
                break
            m = re.match(r"toolgate listening on (http://\S+)", line)
            if m:
                url = m.group(1)
            if line.startswith("mcp: "):
                break
        if url is None:
            p.kill()
            pytest.fail(f"toolgate did not start: {''.join(stderr)}")
        threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()  # type: ignore[union-attr]
        try:
            yield Gateway(url, p, stderr)
        finally:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def tokens_table() -> str:
    return f"""
[[gateway.tokens]]
tenant = "acme"
sha256 = "{sha(TOKEN_A)}"
admin = true

[[gateway.tokens]]
tenant = "globex"
sha256 = "{sha(TOKEN_B)}"
"""
