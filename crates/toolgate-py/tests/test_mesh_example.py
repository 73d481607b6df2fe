"""The Python example of docs/mesh.md, run as written with the real ``nats-py``
client against a real ``nats-server`` and a ``toolgate serve --mesh`` process (both
started here on free ports) in front of a local upstream."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _nats_server() -> str:
    for candidate in (os.environ.get("TOOLGATE_NATS_SERVER"), shutil.which("nats-server"), "/usr/sbin/nats-server"):
        if candidate and Path(candidate).exists():
            return candidate
    pytest.fail("nats-server not found (scripts/test installs it)")


def _toolgate() -> str:
    path = Path(os.environ.get("TOOLGATE_BIN", ROOT / "target" / "debug" / "toolgate"))
    if not path.exists():
        pytest.fail(f"{path} not found: build it with `cargo build -p toolgate-gateway` (scripts/test does)")
    return str(path)


def _example() -> str:
    """The ```python block of the "Publishing from Python" section, verbatim."""
    text = (ROOT / "docs" / "mesh.md").read_text()
    section = text.split("## Publishing from Python", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


class _Upstream(BaseHTTPRequestHandler):
    keys: list[str | None] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Upstream.keys.append(self.headers.get("Idempotency-Key"))
        data = json.dumps({"customer": body["id"], "name": "Ada"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def gateway() -> Iterator[str]:
    upstream = HTTPServer(("127.0.0.1", 0), _Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory() as d:
        nats_port = _free_port()
        nats = subprocess.Popen(
            [_nats_server(), "-js", "-a", "127.0.0.1", "-p", str(nats_port), "-sd", d],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"nats://127.0.0.1:{nats_port}"
        config = Path(d) / "toolgate.toml"
        config.write_text(
            "[tools.lookup_customer]\nrate = \"10/s\"\n"
            f"[tools.lookup_customer.upstream]\nurl = \"http://127.0.0.1:{upstream.server_port}/\"\n"
        )
        gw = subprocess.Popen(
            [_toolgate(), "serve", "--listen", "127.0.0.1:0", "--config", str(config), "--mesh", url],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert gw.stdout is not None
            base = gw.stdout.readline().split("toolgate listening on ", 1)[1].split()[0]
            deadline = time.monotonic() + 15
            while True:
                try:
                    with urllib.request.urlopen(f"{base}/healthz", timeout=1) as r:
                        if json.load(r).get("mesh", {}).get("status") == "ok":
                            break
                except OSError:
                    pass
                assert time.monotonic() < deadline, "the gateway's mesh did not come up"
                time.sleep(0.05)
            yield url
        finally:
            gw.kill()
            gw.wait()
            nats.kill()
            nats.wait()
            upstream.shutdown()


def test_the_docs_example_publishes_a_call_and_prints_its_result(gateway: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _example()],
        env={**os.environ, "NATS_URL": gateway},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["outcome"] == "success", result
    assert result["tool"] == "lookup_customer"
    assert result["result"] == {"customer": 42, "name": "Ada"}
    assert _Upstream.keys == ["order-42"], "the idempotency key reaches the upstream"
