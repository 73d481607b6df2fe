"""Real servers for the tests: a ``toolgate serve`` process, a ``nats-server`` and
small HTTP upstreams, each on a free port of 127.0.0.1 and stopped afterwards."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def toolgate_bin() -> str:
    path = Path(os.environ.get("TOOLGATE_BIN", ROOT / "target" / "debug" / "toolgate"))
    if not path.exists():
        pytest.fail(f"{path} not found: build it with `cargo build -p toolgate-gateway` (scripts/test does)")
    return str(path)


def nats_server_bin() -> str:
    for candidate in (os.environ.get("TOOLGATE_NATS_SERVER"), shutil.which("nats-server"), "/usr/sbin/nats-server"):
        if candidate and Path(candidate).exists():
            return candidate
    pytest.fail("nats-server not found (scripts/test installs it)")


@contextmanager
def gateway(config: str | None, *args: str, ready: Callable[[dict[str, object]], bool] | None = None) -> Iterator[str]:
    """``toolgate serve`` with ``config`` (``None``: the bundled one) on a free port;
    yields its base URL once ``/healthz`` answers (and ``ready(health)`` holds, when
    given)."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "toolgate.toml"
        if config is not None:
            path.write_text(config)
            args = ("--config", str(path), *args)
        proc = subprocess.Popen(
            [toolgate_bin(), "serve", "--listen", "127.0.0.1:0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert "toolgate listening on " in line, f"the gateway did not start: {line!r}"
            base = line.split("toolgate listening on ", 1)[1].split()[0]
            deadline = time.monotonic() + 15
            while True:
                try:
                    with urllib.request.urlopen(f"{base}/healthz", timeout=1) as r:
                        if ready is None or ready(json.load(r)):
                            break
                except OSError:
                    pass
                assert time.monotonic() < deadline, "the gateway did not come up"
                time.sleep(0.05)
            yield base
        finally:
            proc.kill()
            proc.wait()


@contextmanager
def nats_server() -> Iterator[str]:
    """A ``nats-server`` with JetStream; yields its URL once it accepts connections."""
    with tempfile.TemporaryDirectory() as d:
        port = free_port()
        proc = subprocess.Popen(
            [nats_server_bin(), "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", d],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "nats-server did not start"
                    time.sleep(0.02)
            yield f"nats://127.0.0.1:{port}"
        finally:
            proc.kill()
            proc.wait()


class Upstream(BaseHTTPRequestHandler):
    """An upstream tool: ``/echo`` answers ``{"echo": <the JSON body>}``, ``/broken``
    a 500, ``/limited`` a 429 with ``Retry-After: 30``, ``/slow`` an echo after 3 s.
    Every request is recorded."""

    seen: list[tuple[str, object]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"null")
        Upstream.seen.append((self.path, body))
        if self.path == "/broken":
            self._answer(500, {"error": "down"})
        elif self.path == "/slow":
            time.sleep(3)
            self._answer(200, {"echo": body})
        elif self.path == "/limited":
            self._answer(429, {"error": "slow down"}, {"Retry-After": "30"})
        else:
            self._answer(200, {"echo": body})

    def _answer(self, status: int, data: object, headers: dict[str, str] | None = None) -> None:
        raw = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def upstream() -> Iterator[str]:
    """An :class:`Upstream` on a free port; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
