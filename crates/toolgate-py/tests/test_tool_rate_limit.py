"""``ToolRateLimit`` and ``@policy.tool``: the per-tool sliding-window API (rpm,
behavior, max_wait_seconds), with pools, a shared store and upstream 429s."""

from __future__ import annotations

import asyncio
import math
import time

import httpx
import pytest

from toolgate import (
    MAX_WAIT_SECONDS,
    AdmissionRejected,
    Permit,
    RateLimit,
    Rejection,
    ToolRateLimit,
    ToolRateLimitPolicy,
)
from toolgate.testing import ManualClock


async def settle() -> None:
    """Lets woken waiters run (wake-ups arrive through call_soon_threadsafe)."""
    for _ in range(20):
        await asyncio.sleep(0.001)


async def until(done: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:  # type: ignore[operator]
        await asyncio.sleep(0.001)
    await settle()


# --- the value and its checks ---


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({}, TypeError, "rpm is required"),
        ({"rpm": True}, TypeError, "rpm: True: must be a whole number"),
        ({"rpm": 2.5}, TypeError, "rpm: 2.5: must be a whole number"),
        ({"rpm": math.nan}, TypeError, "rpm: nan: must be a whole number"),
        ({"rpm": "10"}, TypeError, "rpm: '10': must be a whole number"),
        ({"rpm": 0}, ValueError, "rpm: 0: must be between 1 and 1000000"),
        ({"rpm": -3}, ValueError, "rpm: -3: must be between 1 and 1000000"),
        ({"rpm": 10**12}, ValueError, "rpm: 1000000000000: must be between 1 and 1000000"),
        ({"rpm": 5, "per": 0}, ValueError, "per: 0: must be greater than 0"),
        ({"rpm": 5, "per": -1.0}, ValueError, "per: -1.0: must be greater than 0"),
        ({"rpm": 5, "per": math.nan}, ValueError, "per: nan: must be a finite number of seconds"),
        ({"rpm": 5, "per": math.inf}, ValueError, "per: inf: must be a finite number of seconds"),
        ({"rpm": 5, "per": 1e7}, ValueError, "per: 10000000.0: must be at most 86400 seconds"),
        ({"rpm": 5, "behavior": "block"}, ValueError, "behavior: 'block': must be \"wait\" or \"error\""),
        ({"rpm": 5, "max_wait_seconds": -1}, ValueError, "max_wait_seconds: -1: must be at least 0"),
        ({"rpm": 5, "max_wait_seconds": math.nan}, ValueError, "max_wait_seconds: nan: must be a finite"),
        ({"rpm": 5, "max_wait_seconds": 1e9}, ValueError, "max_wait_seconds: 1000000000.0: must be at most 3600"),
        ({"rpm": 5, "behavior": "error", "max_wait_seconds": -1}, ValueError, "max_wait_seconds: -1: must be at least 0"),
    ],
)
def test_invalid_values_are_refused_naming_the_field(kwargs: dict[str, object], error: type, message: str) -> None:
    with pytest.raises(error) as e:
        ToolRateLimit(**kwargs)  # type: ignore[arg-type]
    assert message in str(e.value)


def test_error_never_waits_whatever_max_wait_seconds_says() -> None:
    cfg = ToolRateLimit(rpm=5, behavior="error", max_wait_seconds=30.0).to_config()
    assert (cfg["on_limit"], cfg["max_wait"]) == ("reject", "0s")


def test_the_longest_wait_is_the_engines_limit_of_one_hour() -> None:
    assert MAX_WAIT_SECONDS == 3600.0
    assert ToolRateLimit(10).to_config() == {
        "rate": "10/60000000000ns",
        "window": "sliding",
        "on_limit": "wait",
        "max_wait": "3600000000000ns",
    }
    assert ToolRateLimit(rpm=3, per=1.5, behavior="error").to_config()["on_limit"] == "reject"
    with pytest.raises(TypeError):
        ToolRateLimit(10, 30.0)  # type: ignore[misc]  # per is keyword-only


# --- exact sliding window ---


async def test_error_behavior_is_an_exact_sliding_window_of_60_seconds(clock: ManualClock) -> None:
    policy = ToolRateLimitPolicy(limits={"lookup": ToolRateLimit(rpm=3, behavior="error")}, clock=clock)
    for _ in range(3):
        assert isinstance(await policy.decide("lookup"), Permit)
        clock.advance(10.0)
    # t=30: three calls in the last 60 s. A token bucket of 3/min would have
    # refilled 1.5 calls by now; the window admits nothing until t=60.
    r = await policy.decide("lookup")
    assert isinstance(r, Rejection)
    assert (r.tool, r.quota, r.reason) == ("lookup", "tools.lookup.rate", "rate_limited")
    assert r.retry_after == pytest.approx(30.0)
    clock.advance(29.999)
    assert isinstance(policy.try_admit("lookup"), Rejection)
    clock.advance(0.001)  # t=60: the call of t=0 leaves the window
    assert isinstance(policy.try_admit("lookup"), Permit)
    clock.advance(5.0)  # t=65: the next to leave is the call of t=10, at t=70
    r = policy.try_admit("lookup")
    assert isinstance(r, Rejection) and r.retry_after == pytest.approx(5.0)


async def test_wait_behavior_queues_in_fifo_order_as_the_window_slides(clock: ManualClock) -> None:
    policy = ToolRateLimitPolicy(clock=clock)
    ran: list[int] = []

    @policy.tool("search", max_calls_per_minute=2)
    async def search(i: int) -> int:
        ran.append(i)
        return i

    tasks = [asyncio.create_task(search(i)) for i in range(5)]
    await settle()
    assert ran == [0, 1]
    state = policy.state("search")
    assert state is not None and state["waiting"] == 3
    clock.advance(60.0)
    await until(lambda: len(ran) >= 4)
    assert ran == [0, 1, 2, 3]
    clock.advance(60.0)
    assert await asyncio.gather(*tasks) == [0, 1, 2, 3, 4]
    assert ran == [0, 1, 2, 3, 4]


async def test_a_wait_longer_than_max_wait_seconds_is_refused_up_front(clock: ManualClock) -> None:
    policy = ToolRateLimitPolicy(
        limits={"pay": ToolRateLimit(rpm=1, per=1.0, max_wait_seconds=1.5)}, clock=clock
    )
    first = await policy.admit("pay")
    second = asyncio.create_task(policy.admit("pay"))  # due at t=1
    await until(lambda: (policy.state("pay") or {}).get("waiting") == 1)
    started = clock.now()
    with pytest.raises(AdmissionRejected) as e:
        await policy.admit("pay")  # would be due at t=2 > 1.5: refused now
    assert clock.now() == started, "refused without sleeping first"
    assert (e.value.tool, e.value.quota, e.value.reason) == ("pay", "tools.pay.rate", "max_wait_exceeded")
    assert e.value.retry_after == pytest.approx(2.0)
    clock.advance(1.0)
    assert (await second).waited == pytest.approx(1.0)
    first.complete()


async def test_wait_behavior_in_real_time_admits_as_the_window_slides() -> None:
    policy = ToolRateLimitPolicy(limits={"t": ToolRateLimit(rpm=2, per=0.3)})
    started: list[float] = []

    @policy.tool("t")
    async def t() -> None:
        started.append(time.monotonic())

    await asyncio.wait_for(asyncio.gather(*(t() for _ in range(5))), timeout=10)
    # Each body runs as soon as its call is admitted: times from the first admission.
    offsets = [s - started[0] for s in started]
    assert offsets[1] < 0.29, offsets  # two in the first window
    assert 0.29 <= offsets[2] <= offsets[3] < 5.0, offsets  # then two once it slid
    assert 0.59 <= offsets[4] < 5.0, offsets


# --- @policy.tool ---


async def test_policy_tool_raises_admission_rejected_with_the_fields(clock: ManualClock) -> None:
    policy = ToolRateLimitPolicy(clock=clock)
    ran = 0

    @policy.tool("lookup", rate_limit=ToolRateLimit(rpm=2, behavior="error"))
    async def lookup(customer: int) -> dict[str, int]:
        nonlocal ran
        ran += 1
        return {"customer": customer}

    assert await lookup(1) == {"customer": 1}
    assert await lookup(2) == {"customer": 2}
    with pytest.raises(AdmissionRejected) as e:
        await lookup(3)
    assert (e.value.tool, e.value.quota, e.value.reason) == ("lookup", "tools.lookup.rate", "rate_limited")
    assert e.value.retry_after == pytest.approx(60.0)
    assert ran == 2, "a rejected call does not run"
    assert lookup.__name__ == "lookup"
    assert "lookup" in policy.tools


def test_policy_tool_refuses_conflicting_or_repeated_limits_and_sync_functions() -> None:
    policy = ToolRateLimitPolicy(limits={"a": RateLimit(2)})

    async def body() -> None:
        pass

    def sync_tool() -> None:
        pass

    with pytest.raises(ValueError, match="give max_calls_per_minute or rate_limit, not both"):
        policy.tool("b", max_calls_per_minute=30, rate_limit=ToolRateLimit(rpm=30))
    with pytest.raises(ValueError, match="already has a limit"):
        policy.tool("a", max_calls_per_minute=30)(body)
    with pytest.raises(TypeError, match="async callables"):
        policy.tool("b", max_calls_per_minute=30)(sync_tool)  # type: ignore[arg-type]
    assert "b" not in policy.tools, "a refused decoration declares nothing"
    shared = policy.tool("b", max_calls_per_minute=30)
    shared(body)
    shared(body)  # one declaration, several callables
    assert "b" in policy.tools
    with pytest.raises(ValueError, match="already has a limit"):
        policy.tool("b", rate_limit=ToolRateLimit(rpm=5))(body)
    with pytest.raises(ValueError, match="rpm: 0"):
        policy.tool("c", max_calls_per_minute=0)
    with pytest.raises(TypeError, match="must be a ToolRateLimit"):
        policy.tool("c", rate_limit=RateLimit(2))  # type: ignore[arg-type]
    assert "c" not in policy.tools


async def test_declaring_a_tool_keeps_the_other_tools_state(clock: ManualClock) -> None:
    policy = ToolRateLimitPolicy(limits={"a": RateLimit(requests=2, per_seconds=60.0)}, clock=clock)
    assert isinstance(policy.try_admit("a"), Permit)
    assert isinstance(policy.try_admit("a"), Permit)

    @policy.tool("b", max_calls_per_minute=1)
    async def b() -> None:
        pass

    r = policy.try_admit("a")
    assert isinstance(r, Rejection) and r.reason == "rate_limited", "a's bucket was not refilled by the change"
    assert isinstance(policy.try_admit("b"), Permit)


async def test_tool_rate_limits_sit_beside_rate_limits_and_share_pools(clock: ManualClock) -> None:
    policy = ToolRateLimitPolicy.from_dict(
        {
            "pools": {"crm": {"rate": "3/min", "window": "sliding"}},
            "tools": {"lookup": {"pools": ["crm"]}, "update": {"pools": ["crm"], "rate": "10/s"}},
        },
        clock=clock,
    )

    @policy.tool("lookup")
    async def lookup() -> str:
        return "ok"

    @policy.tool("update")
    async def update() -> str:
        return "ok"

    assert [await lookup(), await update(), await lookup()] == ["ok"] * 3
    with pytest.raises(AdmissionRejected) as e:
        await update()
    assert e.value.quota == "pools.crm.rate" and e.value.retry_after == pytest.approx(60.0)
    mixed = ToolRateLimitPolicy(
        limits={"a": RateLimit(requests=1, per_seconds=1.0), "b": ToolRateLimit(rpm=1, behavior="error")},
        clock=clock,
    )
    assert isinstance(mixed.try_admit("a"), Permit) and isinstance(mixed.try_admit("b"), Permit)
    clock.advance(1.0)
    assert isinstance(mixed.try_admit("a"), Permit), "a token bucket refills"
    assert isinstance(mixed.try_admit("b"), Rejection), "the window holds the call for 60 s"


# --- upstream 429s ---


def _too_many_requests(retry_after: str) -> httpx.HTTPStatusError:
    request = httpx.Request("POST", "https://api.example.test/search")
    response = httpx.Response(429, headers={"Retry-After": retry_after}, request=request)
    return httpx.HTTPStatusError("429 Too Many Requests", request=request, response=response)


async def test_a_429_with_retry_after_from_the_tool_pauses_it(clock: ManualClock) -> None:
    policy = ToolRateLimitPolicy(clock=clock)
    answers: list[Exception | None] = [_too_many_requests("7"), None]

    @policy.tool("search", rate_limit=ToolRateLimit(rpm=100, behavior="error"))
    async def search() -> str:
        error = answers.pop(0)
        if error is not None:
            raise error
        return "found"

    with pytest.raises(httpx.HTTPStatusError):
        await search()  # the tool's own failure passes through unchanged
    with pytest.raises(AdmissionRejected) as e:
        await search()
    assert (e.value.reason, e.value.quota) == ("rate_limited", "tools.search.retry_after")
    assert e.value.retry_after == pytest.approx(7.0)
    clock.advance(7.0)
    assert await search() == "found"


async def test_retry_after_is_read_from_the_common_exception_shapes() -> None:
    from toolgate._permits import upstream_retry_after

    class Explicit(Exception):
        retry_after = 2.5

    class Aiohttp(Exception):  # aiohttp.ClientResponseError's shape
        status = 503
        headers = {"Retry-After": "4"}

    class NotLimited(Exception):
        status = 500
        headers = {"Retry-After": "4"}

    assert upstream_retry_after(_too_many_requests("3")) == 3.0
    assert upstream_retry_after(Explicit()) == 2.5
    assert upstream_retry_after(Aiohttp()) == 4.0
    assert upstream_retry_after(NotLimited()) is None
    assert upstream_retry_after(ValueError("boom")) is None
    assert upstream_retry_after(_too_many_requests("soon")) is None
    assert upstream_retry_after(AdmissionRejected("t", "tools.t.rate", "rate_limited", 1.0)) is None
    dated = upstream_retry_after(_too_many_requests("Fri, 01 Jan 2100 00:00:00 GMT"))
    assert dated == 86_400.0, "a date far ahead is bounded"


# --- a shared store ---


async def test_a_declared_window_is_shared_through_redis(redis_url: str) -> None:
    a = ToolRateLimitPolicy(store=redis_url)
    b = ToolRateLimitPolicy(store=redis_url)
    limit = ToolRateLimit(rpm=3, behavior="error")

    @a.tool("shared_window", rate_limit=limit)
    async def in_a() -> str:
        return "a"

    @b.tool("shared_window", rate_limit=limit)
    async def in_b() -> str:
        return "b"

    assert [await in_a(), await in_b(), await in_a()] == ["a", "b", "a"]
    with pytest.raises(AdmissionRejected) as e:
        await in_b()
    assert e.value.reason == "rate_limited" and e.value.retry_after is not None
    assert 50.0 < e.value.retry_after <= 60.0
