"""A call's priority and deadline through ``Client`` and ``AsyncClient`` against a real
``toolgate serve`` (issue 17): the gateway refuses what cannot finish in time."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from support import gateway, upstream

from toolgate import AdmissionRejected, AsyncClient, Client, call_options


def config(upstream_url: str) -> str:
    return f"""
[tools.one]
rate = "1/s"
burst = 1
on_limit = "wait"
max_wait = "5s"

[tools.fast]
rate = "100/s"

[tools.echo]
rate = "100/s"
[tools.echo.upstream]
url = "{upstream_url}/echo"
"""


class Recording(httpx.HTTPTransport):
    """The real transport, keeping the JSON body of every request it sends."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[dict[str, Any]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content or b"{}"))
        return super().handle_request(request)


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with upstream() as up, gateway(config(up)) as base:
        yield base


def past() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=1)


def assert_refused_by_deadline(e: pytest.ExceptionInfo[AdmissionRejected]) -> None:
    assert (e.value.reason, e.value.quota) == ("max_wait_exceeded", "deadline")


def test_the_client_sends_priority_and_deadline_and_the_gateway_honours_the_deadline(base_url: str) -> None:
    sent = Recording()
    with Client(base_url, timeout=10, transport=sent) as client:
        client.admit("fast", priority="interactive", deadline=30.0).complete()
        body = sent.bodies[0]
        assert body["priority"] == "interactive"
        assert abs(body["deadline"] / 1000 - (time.time() + 30)) < 5, body
        with pytest.raises(AdmissionRejected) as e:
            client.admit("fast", deadline=past())
        assert_refused_by_deadline(e)
        with pytest.raises(AdmissionRejected) as e:
            client.reserve({"fast": 2}, deadline=past())
        assert_refused_by_deadline(e)
        assert sent.bodies[-1]["calls"] == [{"tool": "fast", "count": 2, "deadline": sent.bodies[-1]["calls"][0]["deadline"]}]
        with pytest.raises(AdmissionRejected) as e:
            client.invoke("echo", {"q": 1}, deadline=past())
        assert_refused_by_deadline(e)
        assert client.invoke("echo", {"q": 2}, priority="batch", deadline=30.0).result == {"echo": {"q": 2}}
        assert sent.bodies[-1]["priority"] == "batch"


def test_over_http_a_deadline_shorter_than_the_wait_is_refused_at_once_and_a_far_one_waits(base_url: str) -> None:
    with Client(base_url, timeout=10) as client:
        client.admit("one").complete()  # the bucket is empty for ~1 s
        t0 = time.monotonic()
        with pytest.raises(AdmissionRejected) as e:
            client.admit("one", deadline=0.3)
        assert_refused_by_deadline(e)
        assert time.monotonic() - t0 < 0.5
        with client.admit("one", deadline=10.0) as lease:
            assert 0.3 < lease.waited < 2.5, lease


def test_the_client_takes_call_options_and_checks_values_before_sending(base_url: str) -> None:
    sent = Recording()
    with Client(base_url, timeout=10, transport=sent) as client:
        with call_options(priority="batch", deadline=past()):
            with pytest.raises(AdmissionRejected) as e:
                client.admit("fast")
        assert_refused_by_deadline(e)
        assert sent.bodies[-1]["priority"] == "batch"
        count = len(sent.bodies)
        with pytest.raises(ValueError, match="^priority: 'urgent'"):
            client.admit("fast", priority="urgent")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="^deadline: a datetime must be timezone-aware"):
            client.invoke("echo", deadline=dt.datetime(2030, 1, 1))
        with pytest.raises(ValueError, match="at most 86400 s ahead"):
            client.reserve(["fast"], deadline=90_000)
        assert len(sent.bodies) == count, "nothing invalid was sent"


async def test_the_async_client_sends_the_deadline_too(base_url: str) -> None:
    async with AsyncClient(base_url, timeout=10) as client:
        with pytest.raises(AdmissionRejected) as e:
            await client.admit("fast", priority="batch", deadline=past())
        assert_refused_by_deadline(e)
        with pytest.raises(AdmissionRejected) as e:
            await client.invoke("echo", deadline=past())
        assert_refused_by_deadline(e)
        async with client.admit("fast", deadline=30.0) as lease:
            assert lease.waited < 1
