"""The proposal's reproducible demonstration, on a controllable clock."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter

import pytest
from conftest import proposal_policy

from toolgate import AdmissionRejected, RateLimit, ToolRateLimitPolicy
from toolgate.testing import ManualClock


def test_the_proposal_snippet_runs_verbatim() -> None:
    from toolgate import AdmissionRejected, RateLimit, ToolRateLimitPolicy  # noqa: F401

    policy = ToolRateLimitPolicy(
        limits={"lookup_customer": RateLimit(requests=2, per_seconds=1.0, burst=2),
                "get_payment_status": RateLimit(requests=1, per_seconds=1.0, burst=1),
                "search_documents": RateLimit(requests=10, per_seconds=1.0, burst=10)},
        on_limit="reject",
    )
    assert policy.tools == {"lookup_customer", "get_payment_status", "search_documents"}


async def test_five_concurrent_lookups_two_admitted_three_rejected_before_running(clock: ManualClock) -> None:
    policy = proposal_policy(clock)
    ran: Counter[str] = Counter()

    @policy
    async def lookup_customer(customer_id: int) -> str:
        ran["lookup_customer"] += 1
        await asyncio.sleep(0)
        return f"customer {customer_id}"

    @policy
    async def search_documents(query: str) -> str:
        ran["search_documents"] += 1
        return query

    results = await asyncio.gather(*(lookup_customer(i) for i in range(5)), return_exceptions=True)
    rejected = [r for r in results if isinstance(r, AdmissionRejected)]
    assert len(rejected) == 3 and ran["lookup_customer"] == 2
    for r in rejected:
        assert (r.tool, r.reason, r.quota) == ("lookup_customer", "rate_limited", "tools.lookup_customer.rate")
        assert r.retry_after == pytest.approx(0.5)

    # Document search has its own quota and is unaffected.
    docs = await asyncio.gather(*(search_documents(f"q{i}") for i in range(10)))
    assert docs == [f"q{i}" for i in range(10)] and ran["search_documents"] == 10

    # Refill: one more lookup every 0.5 s, up to the burst of 2.
    clock.advance(0.5)
    assert await lookup_customer(5) == "customer 5"
    with pytest.raises(AdmissionRejected):
        await lookup_customer(6)
    clock.advance(10.0)
    results = await asyncio.gather(*(lookup_customer(i) for i in range(5)), return_exceptions=True)
    assert sum(not isinstance(r, AdmissionRejected) for r in results) == 2
    assert ran["lookup_customer"] == 5


async def test_no_race_bypass_with_1000_concurrent_tasks(clock: ManualClock) -> None:
    policy = proposal_policy(clock)
    ran = 0

    async def body() -> None:
        nonlocal ran
        ran += 1
        await asyncio.sleep(0)

    async def call() -> bool:
        await asyncio.sleep(0)  # interleave the tasks
        try:
            async with policy.guard("lookup_customer"):
                await body()
            return True
        except AdmissionRejected:
            return False

    results = await asyncio.gather(*(asyncio.create_task(call()) for _ in range(1000)))
    assert sum(results) == 2 and ran == 2
    state = policy.state("lookup_customer")
    assert state is not None and (state["admitted"], state["rejected"], state["in_flight"]) == (2, 998, 0)


def test_no_race_bypass_across_threads_and_event_loops(clock: ManualClock) -> None:
    policy = ToolRateLimitPolicy(limits={"t": RateLimit(requests=50, per_seconds=1.0, burst=50)}, clock=clock)
    admitted = Counter[int]()
    start = threading.Barrier(8)

    def worker(n: int) -> None:
        async def main() -> None:
            for _ in range(125):
                try:
                    async with policy.guard("t"):
                        admitted[n] += 1
                except AdmissionRejected:
                    pass

        start.wait()
        asyncio.run(main())

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(admitted.values()) == 50


async def test_tools_without_a_policy_are_untouched(clock: ManualClock) -> None:
    policy = proposal_policy(clock)

    @policy
    async def get_weather() -> str:
        return "sunny"

    assert [await get_weather() for _ in range(100)] == ["sunny"] * 100
    assert policy.state("get_weather") is None


async def test_a_tool_failure_is_not_a_rejection(clock: ManualClock) -> None:
    policy = proposal_policy(clock)

    @policy.limit("lookup_customer")
    async def broken() -> None:
        raise KeyError("no such customer")

    with pytest.raises(KeyError):
        await broken()
    with pytest.raises(KeyError):
        await broken()
    with pytest.raises(AdmissionRejected):
        await broken()
