"""``toolgate.AsyncClient`` against a real ``toolgate serve`` (started here)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from support import gateway

from toolgate import AdmissionRejected, AsyncClient, AsyncLease, ClientError

CONFIG = """
[tools.lookup_customer]
rate = "2/s"
burst = 2

[tools.one_at_a_time]
concurrency = 1

[tools.waits]
rate = "2/s"
burst = 1
on_limit = "wait"
max_wait = "5s"

[tools.plan]
rate = "1/min"

[tools.tenanted]
rate = "1/min"
partition = "tenant"
"""


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with gateway(CONFIG) as base:
        yield base


async def test_async_with_admit_completes_the_lease(base_url: str) -> None:
    async with AsyncClient(base_url) as gate:
        async with gate.admit("one_at_a_time") as lease:
            assert isinstance(lease, AsyncLease) and not lease.done
            assert (await gate.tool("one_at_a_time"))["in_flight"] == 1
            with pytest.raises(AdmissionRejected) as e:
                await gate.admit("one_at_a_time")
            assert e.value.reason == "concurrency_limited"
        assert lease.done
        lease = await gate.admit("one_at_a_time")  # awaited: completed by hand
        await lease.complete("error", latency=0.25)
        assert (await gate.tool("one_at_a_time"))["in_flight"] == 0


async def test_concurrent_admissions_are_decided_by_the_gateway(base_url: str) -> None:
    async with AsyncClient(base_url) as gate:
        results = await asyncio.gather(*(gate.admit("lookup_customer") for _ in range(5)), return_exceptions=True)
        admitted = [r for r in results if isinstance(r, AsyncLease)]
        rejected = [r for r in results if isinstance(r, AdmissionRejected)]
        assert (len(admitted), len(rejected)) == (2, 3), results
        assert all(r.quota == "tools.lookup_customer.rate" and r.retry_after for r in rejected)
        for lease in admitted:
            await lease.complete()


async def test_waiters_are_served_in_order_and_a_cancelled_one_gives_its_place_up(base_url: str) -> None:
    async with AsyncClient(base_url) as gate:
        await (await gate.admit("waits")).complete()
        t0 = time.monotonic()
        first = asyncio.create_task(gate.admit("waits"))  # due after 0.5 s
        await asyncio.sleep(0.1)
        doomed = asyncio.create_task(gate.admit("waits"))  # due after 1.0 s
        await asyncio.sleep(0.1)
        doomed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await doomed
        lease = await first
        assert 0.3 < lease.waited <= 1.0
        await lease.complete()
        # The cancelled waiter's slot (due at 1.0 s) went to the next caller, asking at
        # about 0.5 s: it waits about 0.5 s, not 1.0 s behind a waiter still queued.
        nxt = await gate.admit("waits")
        assert time.monotonic() - t0 >= 0.9 and nxt.waited < 0.85, nxt
        await nxt.complete()


async def test_reserve_with_async_with_gives_back_unused_leases(base_url: str) -> None:
    async with AsyncClient(base_url, tenant="t1") as gate:
        async with gate.reserve({"plan": 1}) as plan:
            assert [lease.tool for lease in plan.leases] == ["plan"]
            with pytest.raises(AdmissionRejected):
                await gate.admit("plan")
        lease = await gate.admit("plan")  # the unused reservation was given back
        await lease.complete()


async def test_the_client_tenant_and_a_calls_own_tenant(base_url: str) -> None:
    async with AsyncClient(base_url, tenant="a") as gate:
        await (await gate.admit("tenanted")).complete()
        with pytest.raises(AdmissionRejected):
            await gate.admit("tenanted")
        await (await gate.admit("tenanted", tenant="b")).complete()


async def test_gateway_errors_are_client_errors(base_url: str) -> None:
    async with AsyncClient(base_url) as gate:
        with pytest.raises(ClientError) as e:
            await gate.invoke("lookup_customer", {"id": 1})
        assert (e.value.status, e.value.code) == (404, "no_upstream")
        lease = await gate.admit("lookup_customer")
        await lease.complete()
        lease._done = False  # a second completion of the same lease reaches the gateway
        with pytest.raises(ClientError) as e:
            await lease.complete()
        assert (e.value.status, e.value.code) == (404, "unknown_lease")
