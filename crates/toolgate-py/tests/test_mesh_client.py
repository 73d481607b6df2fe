"""``toolgate.mesh.submit`` / ``call`` with the real ``nats-py`` client, against a real
``nats-server`` and ``toolgate serve --mesh`` (both started here on free ports) in
front of a local upstream."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import AsyncIterator, Iterator

import nats
import pytest
from nats.aio.client import Client as NATS
from nats.js.api import DeliverPolicy
from support import Upstream, gateway, nats_server, upstream

from toolgate import ClientError, call_options, mesh


def config(up: str) -> str:
    return f"""
[tools.lookup_customer]
rate = "50/s"
[tools.lookup_customer.upstream]
url = "{up}/echo"

[tools."crm:lookup/v2"]
rate = "50/s"
[tools."crm:lookup/v2".upstream]
url = "{up}/echo"

[tools.broken]
rate = "50/s"
[tools.broken.upstream]
url = "{up}/broken"

[tools.slow]
rate = "50/s"
[tools.slow.upstream]
url = "{up}/slow"
"""


@pytest.fixture(scope="module")
def mesh_url() -> Iterator[str]:
    def mesh_up(health: dict[str, object]) -> bool:
        m = health.get("mesh")
        return isinstance(m, dict) and m.get("status") == "ok"

    with upstream() as up, nats_server() as url, gateway(config(up), "--mesh", url, ready=mesh_up):
        yield url


@pytest.fixture
async def nc(mesh_url: str) -> AsyncIterator[NATS]:
    conn = await nats.connect(mesh_url)
    try:
        yield conn
    finally:
        await conn.close()


async def test_call_publishes_an_envelope_and_returns_its_result(nc: NATS) -> None:
    r = await mesh.call(nc, "lookup_customer", {"id": 42}, tenant="acme", deadline=10.0, tokens=5, timeout=15)
    assert r.ok and r.outcome == "success" and r.status == 200, r
    assert r.tool == "lookup_customer" and len(r.call_id) == 32
    assert r.result == {"echo": {"id": 42}}
    assert r.attempts and r.attempts[0]["outcome"] == "success"


async def test_one_idempotency_key_runs_the_upstream_once(nc: NATS) -> None:
    before = len(Upstream.seen)
    a = await mesh.call(nc, "lookup_customer", {"id": 7}, idempotency_key="order-7", timeout=15)
    b = await mesh.call(nc, "lookup_customer", {"id": 7}, idempotency_key="order-7", timeout=15)
    assert a.ok and b.ok and a.call_id != b.call_id
    assert a.result == b.result == {"echo": {"id": 7}}
    assert len(Upstream.seen) == before + 1


async def test_a_tool_name_that_needs_encoding(nc: NATS) -> None:
    assert mesh.call_subject("crm:lookup/v2") == "toolgate.calls.crm%3Alookup%2Fv2"
    assert mesh.result_subject("a.b") == "toolgate.results.a%2Eb"
    r = await mesh.call(nc, "crm:lookup/v2", {"id": 1}, call_id="call.with.dots", timeout=15)
    assert r.ok and r.call_id == "call.with.dots" and r.tool == "crm:lookup/v2"


async def test_failures_are_results_not_exceptions(nc: NATS) -> None:
    r = await mesh.call(nc, "broken", {}, timeout=15)
    assert not r.ok and r.outcome == "error", r
    assert r.error is not None and r.error["code"] == "upstream_error"
    unknown = await mesh.call(nc, "no_such_tool", {}, timeout=15)
    assert unknown.outcome == "rejected" and unknown.error is not None, unknown


async def test_submit_returns_the_call_id_and_the_result_comes_on_its_subject(nc: NATS) -> None:
    call_id = await mesh.submit(nc, "lookup_customer", {"id": 3}, deadline=dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=10))
    sub = await nc.jetstream().subscribe(mesh.result_subject(call_id), deliver_policy=DeliverPolicy.ALL)
    msg = await sub.next_msg(timeout=15)
    await sub.unsubscribe()
    assert b'"outcome":"success"' in msg.data and call_id.encode() in msg.data


async def test_the_deadline_of_enclosing_call_options_goes_into_the_envelope(nc: NATS) -> None:
    before = len(Upstream.seen)
    with call_options(deadline=dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=1)):
        late = await mesh.call(nc, "lookup_customer", {"id": 9}, deadline=30.0, timeout=15)
    assert late.outcome == "deadline_exceeded", late  # the earlier of the two deadlines
    assert len(Upstream.seen) == before, "a call past its deadline never reaches the upstream"


async def test_no_result_in_time_is_a_client_error(nc: NATS) -> None:
    t0 = time.monotonic()
    with pytest.raises(ClientError) as e:
        await mesh.call(nc, "slow", {}, timeout=0.5)  # the upstream answers after 3 s
    assert e.value.code == "timeout" and time.monotonic() - t0 < 2.5


async def test_without_a_gateway_there_is_no_stream() -> None:
    with nats_server() as url:
        conn = await nats.connect(url)
        try:
            with pytest.raises(ClientError) as e:
                await mesh.submit(conn, "lookup_customer", {})
            assert e.value.code == "no_stream"
        finally:
            await conn.close()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tool": ""}, "tool: '': must be a non-empty string"),
        ({"tool": "t" * 300}, "tool: 300 bytes: must be at most 256"),
        ({"call_id": "c" * 200}, "call_id: 200 bytes: must be at most 128"),
        ({"arguments": [1]}, "arguments: list: must be a mapping"),
        ({"tokens": -1}, "tokens: -1: must be a whole number"),
        ({"deadline": float("nan")}, "deadline: nan: must be a finite number"),
        ({"deadline": dt.datetime(2030, 1, 1)}, "deadline: a datetime must be timezone-aware"),
        ({"deadline": 2 * 86_400.0}, "at most 86400 s ahead is accepted"),
        ({"tenant": "x" * 300}, "tenant: 300 bytes"),
    ],
)
async def test_values_the_mesh_would_refuse_are_refused_before_publishing(
    kwargs: dict[str, object], message: str
) -> None:
    args: dict[str, object] = {"tool": "t", "arguments": {}, **kwargs}
    with pytest.raises(ValueError) as e:
        await mesh.submit(None, **args)  # type: ignore[arg-type]  # refused before the connection is used
    assert message in str(e.value)
