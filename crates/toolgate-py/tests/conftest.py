from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest

from toolgate import RateLimit, ToolRateLimitPolicy
from toolgate.testing import ManualClock


def proposal_policy(clock: ManualClock | None = None, **kw: object) -> ToolRateLimitPolicy:
    """The configuration of the original Agent Framework proposal."""
    return ToolRateLimitPolicy(
        limits={
            "lookup_customer": RateLimit(requests=2, per_seconds=1.0, burst=2),
            "get_payment_status": RateLimit(requests=1, per_seconds=1.0, burst=1),
            "search_documents": RateLimit(requests=10, per_seconds=1.0, burst=10),
        },
        clock=clock,
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    if shutil.which("redis-server") is None:
        if os.environ.get("TOOLGATE_SKIP_REDIS") == "1" and not os.environ.get("CI"):
            pytest.skip("redis-server not found; skipped because TOOLGATE_SKIP_REDIS=1")
        pytest.fail("redis-server not found (scripts/test installs it)")
    with tempfile.TemporaryDirectory() as d:
        for _ in range(10):
            port = _free_port()
            proc = subprocess.Popen(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", d],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and proc.poll() is None and not _ping(port):
                time.sleep(0.01)
            if _ping(port):
                try:
                    yield f"redis://127.0.0.1:{port}"
                finally:
                    proc.kill()
                    proc.wait()
                return
            proc.kill()
            proc.wait()
        pytest.fail("could not start redis-server")
