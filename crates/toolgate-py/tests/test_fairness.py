"""Fair sharing in-process (issue 17): tenants by weight on a contended quota, a share
reserved for interactive calls, interactive waiters first — the real engine on the
real clock, with generous tolerances."""

from __future__ import annotations

import asyncio
import functools
import time

import pytest

from toolgate import AdmissionRejected, Permit, Rejection, ToolRateLimitPolicy

FAIR = {
    "tools": {
        "search": {
            "rate": "20/s",
            "burst": 1,
            "on_limit": "wait",
            "max_wait": "30s",
            "queue_limit": 1000,
            "fairness": "tenant",
        },
    },
    "tenants": {"heavy": {"weight": 3}},
}


async def admit_and_record(policy: ToolRateLimitPolicy, order: list[str], tenant: str) -> None:
    """Admits a call of ``tenant``, waiting if need be, and records its turn."""
    permit = await policy.admit("search", tenant=tenant)
    order.append(tenant)
    permit.complete("success")


async def test_a_flooding_tenant_delays_another_by_about_one_turn() -> None:
    policy = ToolRateLimitPolicy.from_dict(FAIR)
    (await policy.admit("search", tenant="a")).complete("success")
    order: list[str] = []
    call = functools.partial(admit_and_record, policy, order)

    flood = [asyncio.create_task(call("a")) for _ in range(40)]  # two seconds' worth
    await asyncio.sleep(0.05)
    at_arrival = len(order)
    started = time.monotonic()
    await call("b")
    took = time.monotonic() - started
    assert took < 0.8, f"b waited {took:.3f} s"
    # The call in its turn and at most one more of a's went between b's arrival and b.
    assert order.index("b") - at_arrival <= 3, order[:8]
    for task in flood:
        task.cancel()
    await asyncio.gather(*flood, return_exceptions=True)


async def test_weights_share_the_quota_three_to_one_while_both_wait() -> None:
    policy = ToolRateLimitPolicy.from_dict(FAIR)
    (await policy.admit("search", tenant="heavy")).complete("success")
    order: list[str] = []
    call = functools.partial(admit_and_record, policy, order)

    tasks = [asyncio.create_task(call("heavy")) for _ in range(30)]
    tasks += [asyncio.create_task(call("light")) for _ in range(30)]
    while len(order) < 20:
        await asyncio.sleep(0.05)
    first = order[:20]
    heavy = first.count("heavy")
    assert 13 <= heavy <= 17, first
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_reserve_keeps_its_share_for_interactive_calls() -> None:
    policy = ToolRateLimitPolicy.from_dict(
        {"tools": {"search": {"rate": "1/min", "burst": 10, "reserve": {"interactive": "20%"}}}}
    )
    batch = [policy.try_admit("search", priority="batch") for _ in range(10)]
    assert sum(isinstance(p, Permit) for p in batch) == 8
    refused = policy.try_admit("search", priority="batch")
    assert isinstance(refused, Rejection)
    assert refused.reason == "rate_limited"
    for _ in range(2):
        (await policy.admit("search", priority="interactive")).complete("success")
    with pytest.raises(AdmissionRejected):
        await policy.admit("search", priority="interactive")
