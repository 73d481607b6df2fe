"""``decide``/``admit`` of a call decided at once return an awaitable already decided
(no coroutine to run); it behaves as the coroutine it replaces: asyncio takes it,
errors come from the ``await``, and the hook and the log see every decision."""

from __future__ import annotations

import asyncio
import collections.abc
import logging

import pytest

from toolgate import AdmissionRejected, Permit, RateLimit, Rejection, ToolRateLimitPolicy
from toolgate.testing import ManualClock


def policy(**kw: object) -> ToolRateLimitPolicy:
    return ToolRateLimitPolicy(limits={"t": RateLimit(2)}, clock=ManualClock(), **kw)  # type: ignore[arg-type]


async def test_a_decided_call_is_a_coroutine_as_asyncio_sees_it() -> None:
    p = policy()
    c = p.decide("t")
    assert asyncio.iscoroutine(c) and isinstance(c, collections.abc.Coroutine)
    assert isinstance(await c, Permit)
    with pytest.raises(RuntimeError, match="already awaited"):
        await c
    assert isinstance(await asyncio.create_task(p.decide("t")), Permit)
    assert isinstance(await asyncio.ensure_future(p.decide("t")), Rejection)
    decided = await asyncio.gather(p.decide("t"), p.decide("u"))
    assert isinstance(decided[0], Rejection) and isinstance(decided[1], Permit)


async def test_admit_raises_from_the_await() -> None:
    p = policy()
    first, second, third = p.admit("t"), p.admit("t"), p.admit("t")  # decided here, raised below
    assert isinstance(await first, Permit) and isinstance(await second, Permit)
    with pytest.raises(AdmissionRejected) as e:
        await third
    assert e.value.reason == "rate_limited"
    results = await asyncio.gather(p.admit("t"), p.admit("u"), return_exceptions=True)
    assert isinstance(results[0], AdmissionRejected) and isinstance(results[1], Permit)


async def test_invalid_options_raise_from_the_await() -> None:
    p = policy()
    for c in (p.decide("t", priority="urgent"), p.admit("t", deadline=-1.0)):  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            await c


async def test_closing_an_undecided_await_drops_the_answer() -> None:
    p = policy()
    c = p.decide("t")
    c.close()
    with pytest.raises(RuntimeError):
        await c
    task = asyncio.ensure_future(p.decide("t"))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_the_hook_and_the_log_see_async_decisions(caplog: pytest.LogCaptureFixture) -> None:
    p = policy()
    await p.decide("t")  # quiet: neither hook nor log
    seen: list[object] = []
    p.on_decision = seen.append  # a hook set later is honoured at once
    await p.decide("t")
    await p.decide("t")
    assert [(d.tool, d.admitted) for d in seen] == [("t", True), ("t", False)]  # type: ignore[attr-defined]
    p.on_decision = None
    with caplog.at_level(logging.INFO, logger="toolgate"):
        await p.decide("t")
        await p.decide("u")  # admitted: DEBUG, not logged at INFO
    assert "t rejected: rate_limited" in caplog.text and "u admitted" not in caplog.text
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="toolgate"):
        await p.decide("u")
        with pytest.raises(AdmissionRejected):
            await p.admit("t")
    assert "u admitted" in caplog.text and "t rejected" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="toolgate"):
        logging.disable(logging.INFO)
        try:
            await p.decide("t")
            p.try_admit("t")
        finally:
            logging.disable(logging.NOTSET)
    assert "rejected" not in caplog.text


async def test_a_call_that_waits_is_a_coroutine_and_reports_after_its_wait() -> None:
    clock = ManualClock()
    seen: list[object] = []
    p = ToolRateLimitPolicy(
        limits={"t": RateLimit(1)}, on_limit="wait", max_wait=5.0, clock=clock, on_decision=seen.append
    )
    assert isinstance(await p.decide("t"), Permit)
    waiting = asyncio.ensure_future(p.decide("t"))
    await asyncio.sleep(0)
    assert p.state("t")["waiting"] == 1  # type: ignore[index]
    clock.advance(1.0)
    permit = await asyncio.wait_for(waiting, 5)
    assert isinstance(permit, Permit) and permit.waited == pytest.approx(1.0)
    assert [d.admitted for d in seen] == [True, True]  # type: ignore[attr-defined]
    # Cancelled before its task started: the waiter leaves as if it had never come.
    task = asyncio.ensure_future(p.decide("t"))
    assert p.state("t")["waiting"] == 1  # type: ignore[index]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert p.state("t")["waiting"] == 0  # type: ignore[index]
    # Never awaited: the waiter leaves when the coroutine is closed and collected.
    c = p.decide("t")
    assert asyncio.iscoroutine(c) and p.state("t")["waiting"] == 1  # type: ignore[index]
    c.close()
    del c
    assert p.state("t")["waiting"] == 0  # type: ignore[index]


async def test_bad_arguments_raise_from_the_await_and_sync_calls_raise_at_once() -> None:
    p = policy()
    bad = (p.decide(42), p.decide("t", tokens=-1), p.admit("t", tenant=7), p.decide("t", max_wait="1s"))  # type: ignore[arg-type]
    for c in bad:
        with pytest.raises((TypeError, OverflowError, ValueError)):
            await c
    with pytest.raises((TypeError, OverflowError)):
        p.try_admit("t", tokens=-1)
    with pytest.raises(TypeError):
        p.decide("t", "acme")  # type: ignore[misc]  # keyword-only, as declared


async def test_a_subclass_keeps_its_own_methods_and_options_take_the_full_path() -> None:
    class Counting(ToolRateLimitPolicy):
        calls = 0

        def decide(self, tool: str, **kw: object):  # type: ignore[no-untyped-def,override]
            Counting.calls += 1
            return super().decide(tool, **kw)  # type: ignore[arg-type]

    p = Counting(limits={"t": RateLimit(2)}, clock=ManualClock())
    assert isinstance(await p.decide("t"), Permit) and Counting.calls == 1
    assert isinstance(p.try_admit("t"), Permit)  # not overridden: the fast path
    from toolgate import call_options

    with call_options(priority="batch"):
        assert isinstance(await p.admit("u"), Permit)


def test_a_policy_is_collected() -> None:
    import gc
    import weakref

    p = policy()
    ref = weakref.ref(p)
    del p
    gc.collect()
    assert ref() is None


async def test_admissions_alone_fill_the_log_cache_and_a_disabled_logger_logs_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger("toolgate")
    p = ToolRateLimitPolicy(limits={"t": RateLimit(100)}, clock=ManualClock())
    log.setLevel(log.level)  # clears the logger's cache, as any level change does
    assert logging.INFO not in log._cache
    await p.decide("t")  # admitted: logged at DEBUG, yet the INFO entry is filled
    assert log._cache.get(logging.INFO) is False
    log.disabled = True
    try:
        with caplog.at_level(logging.DEBUG, logger="toolgate"):
            log.disabled = True  # at_level does not enable it
            await p.decide("t")
            p.try_admit("t")
    finally:
        log.disabled = False
    assert "toolgate" not in caplog.text


def test_the_first_call_options_block_of_a_process_reaches_the_fast_path() -> None:
    """The fast path reads the call_options context variable only once a block was
    entered in the process: a fresh process checks that the first block counts."""
    import subprocess
    import sys

    code = """
import asyncio
from toolgate import RateLimit, Rejection, ToolRateLimitPolicy, call_options

async def main():
    p = ToolRateLimitPolicy(limits={"t": RateLimit(100)})
    assert not isinstance(await p.decide("t"), Rejection)
    with call_options(deadline=0.0):  # already past: refused at once
        r = await p.decide("t")
        s = p.try_admit("t")
    assert isinstance(r, Rejection) and r.quota == "deadline", r
    assert isinstance(s, Rejection) and s.quota == "deadline", s
    print("ok")

asyncio.run(main())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
