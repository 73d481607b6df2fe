"""A call's priority and deadline in-process (issue 17): the real engine on the real
clock, with generous tolerances."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from typing import Any

import pytest

from toolgate import AdmissionRejected, Decision, Permit, Rejection, ToolRateLimitPolicy, call_options

TOOLS = {
    "tools": {
        # Plenty of capacity: only the deadline can refuse a call.
        "slow": {"rate": "100/s", "on_limit": "wait", "max_wait": "5s"},
        # One call a second, waiting up to 5 s.
        "one": {"rate": "1/s", "burst": 1, "on_limit": "wait", "max_wait": "5s"},
        # Fail-fast, plenty of capacity.
        "fast": {"rate": "100/s"},
    }
}


def policy(decisions: list[Decision] | None = None) -> ToolRateLimitPolicy:
    return ToolRateLimitPolicy.from_dict(TOOLS, on_decision=decisions.append if decisions is not None else None)


def past() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=1)


def refused_by_deadline(r: Permit | Rejection) -> bool:
    return isinstance(r, Rejection) and (r.reason, r.quota) == ("max_wait_exceeded", "deadline")


async def test_a_deadline_closer_than_the_observed_p90_latency_is_refused_at_once() -> None:
    p = policy()
    for _ in range(10):
        permit = p.try_admit("slow")
        assert isinstance(permit, Permit)
        permit.complete(latency=2.0)  # the tool's p90 is now 2 s
    t0 = time.monotonic()
    r = await p.decide("slow", deadline=1.0)
    assert refused_by_deadline(r), r
    assert time.monotonic() - t0 < 0.5, "refused at once, not after a wait"
    far = await p.decide("slow", deadline=10.0)
    assert isinstance(far, Permit) and far.waited < 0.5
    far.complete()


async def test_a_deadline_shorter_than_the_predicted_wait_is_refused_and_a_far_one_waits() -> None:
    p = policy()
    assert isinstance(p.try_admit("one"), Permit)  # the bucket is empty for ~1 s
    t0 = time.monotonic()
    r = await p.decide("one", deadline=0.3)
    assert refused_by_deadline(r), r
    assert time.monotonic() - t0 < 0.3
    waited = await p.admit("one", deadline=dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=10))
    assert 0.5 < waited.waited < 2.5, waited
    waited.complete()


async def test_a_deadline_already_past_is_refused_even_with_capacity_left() -> None:
    p = policy()
    assert refused_by_deadline(p.try_admit("fast", deadline=past()))
    assert refused_by_deadline(p.try_admit("fast", deadline=0))
    with pytest.raises(AdmissionRejected) as e:
        async with p.guard("fast", deadline=past()):
            pytest.fail("the guarded block ran")
    assert (e.value.reason, e.value.quota) == ("max_wait_exceeded", "deadline")
    assert isinstance(p.try_admit("fast"), Permit), "refusals consumed nothing"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"priority": "urgent"}, "priority: 'urgent': the priority must be"),
        ({"priority": 1}, "priority: 1: the priority must be"),
        ({"deadline": dt.datetime(2030, 1, 1)}, "deadline: a datetime must be timezone-aware"),
        ({"deadline": 2 * 86_400.0}, "at most 86400 s ahead is accepted"),
        ({"deadline": dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=2)}, "at most 86400 s ahead"),
        ({"deadline": -1.0}, "deadline: -1.0: must be a finite number of seconds from now"),
        ({"deadline": float("nan")}, "deadline: nan: must be a finite number"),
        ({"deadline": "soon"}, "deadline: str: must be an aware datetime or seconds from now"),
        ({"deadline": True}, "deadline: bool"),
    ],
)
async def test_an_invalid_priority_or_deadline_is_a_value_error_naming_it(kwargs: dict[str, Any], message: str) -> None:
    p = policy()
    field = f"^{next(iter(kwargs))}: "
    with pytest.raises(ValueError, match=field) as e:
        p.try_admit("fast", **kwargs)
    assert message in str(e.value)
    with pytest.raises(ValueError, match=field):
        await p.decide("one", **kwargs)
    with pytest.raises(ValueError, match=field):
        p.guard("fast", **kwargs)
    with pytest.raises(ValueError, match=field):
        with call_options(**kwargs):
            pass
    assert p.state("one") is not None and p.state("one")["admitted"] == 0  # type: ignore[index]


def test_a_decorator_with_an_invalid_priority_is_a_value_error() -> None:
    p = policy()
    with pytest.raises(ValueError, match="^priority: 'high'"):
        p.tool("fast", priority="high")  # type: ignore[arg-type]


def test_the_engine_itself_checks_what_it_is_given() -> None:
    engine = policy()._engine
    with pytest.raises(ValueError, match="^priority: \"later\": the priority must be"):
        engine.try_admit("fast", priority="later")
    with pytest.raises(ValueError, match="at most 86400 s ahead is accepted"):
        engine.admit("fast", deadline=86_401.0)
    with pytest.raises(ValueError, match="^deadline: -1 s from now: must be a finite number"):
        engine.try_admit("fast", deadline=-1.0)


async def test_call_options_reach_a_decorated_tool_and_the_decorator_gives_the_default_priority() -> None:
    decisions: list[Decision] = []
    p = policy(decisions)
    ran: list[str] = []

    @p.tool("fast", priority="batch")
    async def fast(x: str) -> str:
        ran.append(x)
        return x

    await fast("plain")
    with call_options(priority="interactive"):
        await fast("interactive")
    with call_options(deadline=past()):
        with pytest.raises(AdmissionRejected) as e:
            await fast("late")
    assert e.value.quota == "deadline"
    assert ran == ["plain", "interactive"]
    assert [d.priority for d in decisions] == ["batch", "interactive", "batch"]


async def test_a_call_s_own_priority_wins_and_of_nested_deadlines_the_earliest_holds() -> None:
    decisions: list[Decision] = []
    p = policy(decisions)
    with call_options(priority="batch", deadline=60.0) as outer:
        assert outer.priority == "batch" and outer.deadline is not None
        with call_options(deadline=past()) as inner:
            assert inner.priority == "batch"
            assert refused_by_deadline(p.try_admit("fast", deadline=30.0))
        with call_options(deadline=3600.0) as wider:
            assert wider.deadline == outer.deadline, "an inner block cannot extend the outer deadline"
            r = await p.decide("fast", priority="interactive")
            assert isinstance(r, Permit)
            r.complete()
    assert isinstance(p.try_admit("fast"), Permit), "the options ended with their block"
    assert [d.priority for d in decisions] == ["batch", "interactive", None]


async def test_call_options_follow_the_code_into_the_tasks_it_starts() -> None:
    p = policy()

    async def one_call() -> Permit | Rejection:
        return await p.decide("fast")

    with call_options(deadline=past()):
        task = asyncio.ensure_future(one_call())
    assert refused_by_deadline(await task)


async def test_on_a_manual_clock_the_deadline_counts_on_that_clock() -> None:
    from toolgate.testing import ManualClock

    clock = ManualClock()
    p = ToolRateLimitPolicy.from_dict(TOOLS, clock=clock)
    assert isinstance(p.try_admit("one"), Permit)  # the next token comes at 1 s on the manual clock
    assert refused_by_deadline(await p.decide("one", deadline=0.9))
    waiting = asyncio.ensure_future(p.decide("one", deadline=60.0))
    await asyncio.sleep(0.05)
    assert not waiting.done(), "a far deadline waits for the manual clock"
    clock.advance(1.0)
    r = await asyncio.wait_for(waiting, 5)
    assert isinstance(r, Permit) and r.waited == pytest.approx(1.0)
