"""Wait mode: FIFO waiting on the event loop, max_wait, cancellation."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable

import pytest

from toolgate import AdmissionRejected, Permit, RateLimit, Rejection, ToolRateLimitPolicy
from toolgate.testing import ManualClock


def waiting_policy(clock: ManualClock | None, max_wait: float = 1.0) -> ToolRateLimitPolicy:
    return ToolRateLimitPolicy(
        limits={"lookup_customer": RateLimit(requests=2, per_seconds=1.0, burst=2)},
        on_limit="wait",
        max_wait=max_wait,
        clock=clock,
    )


async def settle() -> None:
    """Lets woken waiters run (wake-ups arrive through call_soon_threadsafe)."""
    for _ in range(20):
        await asyncio.sleep(0.001)


async def until(done: Callable[[], bool], timeout: float = 5.0) -> None:
    """Lets the loop run until ``done()`` (then a little more, so that anything
    wrongly admitted as well would show)."""
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        await asyncio.sleep(0.001)
    await settle()


async def test_waiters_are_admitted_in_fifo_order_as_the_clock_advances(clock: ManualClock) -> None:
    policy = waiting_policy(clock, max_wait=2.0)
    order: list[int] = []

    async def call(i: int) -> float:
        permit = await policy.admit("lookup_customer")
        order.append(i)
        permit.complete()
        return permit.waited

    tasks = [asyncio.create_task(call(i)) for i in range(6)]
    await settle()
    assert order == [0, 1]
    state = policy.state("lookup_customer")
    assert state is not None and state["waiting"] == 4
    for n in (3, 4, 5, 6):
        clock.advance(0.5)
        await until(lambda: len(order) >= n)
        assert order == list(range(n))
    waited = await asyncio.gather(*tasks)
    assert waited == pytest.approx([0.0, 0.0, 0.5, 1.0, 1.5, 2.0])


async def test_a_call_whose_predicted_wait_exceeds_max_wait_is_rejected_at_once(clock: ManualClock) -> None:
    policy = waiting_policy(clock, max_wait=1.0)
    first = [await policy.admit("lookup_customer") for _ in range(2)]
    waiters = [asyncio.create_task(policy.admit("lookup_customer")) for _ in range(2)]
    await until(lambda: (policy.state("lookup_customer") or {}).get("waiting") == 2)
    # The fifth call would wait 1.5 s > max_wait: rejected now, without sleeping.
    r = await policy.decide("lookup_customer")
    assert isinstance(r, Rejection)
    assert r.reason == "max_wait_exceeded" and r.retry_after == pytest.approx(1.5)
    with pytest.raises(AdmissionRejected) as e:
        await policy.admit("lookup_customer")
    assert e.value.reason == "max_wait_exceeded"
    # A per-call max_wait overrides the policy's.
    assert (await policy.decide("lookup_customer", max_wait=0.1)).reason == "max_wait_exceeded"  # type: ignore[union-attr]
    clock.advance(1.0)
    assert all(isinstance(p, Permit) for p in await asyncio.gather(*waiters))
    del first


async def test_cancelling_a_waiter_leaves_the_accounting_as_if_it_never_came(clock: ManualClock) -> None:
    policy = waiting_policy(clock, max_wait=5.0)
    [await policy.admit("lookup_customer") for _ in range(2)]
    a = asyncio.create_task(policy.admit("lookup_customer"))  # due at 0.5
    b = asyncio.create_task(policy.admit("lookup_customer"))  # due at 1.0
    await until(lambda: (policy.state("lookup_customer") or {}).get("waiting") == 2)
    state = policy.state("lookup_customer")
    assert state is not None and state["waiting"] == 2
    a.cancel()
    with pytest.raises(asyncio.CancelledError):
        await a
    state = policy.state("lookup_customer")
    assert state is not None and state["waiting"] == 1
    # b moves up into a's place: admitted at 0.5, not 1.0.
    clock.advance(0.5)
    await until(b.done)
    assert b.done()
    assert (await b).waited == pytest.approx(0.5)
    # And the bucket is exactly as if a had never come: nothing left at 0.5 s...
    assert isinstance(policy.try_admit("lookup_customer"), Rejection)
    # ...and one more at 1.0 s.
    clock.advance(0.5)
    assert isinstance(policy.try_admit("lookup_customer"), Permit)


async def test_cancelling_every_waiter_restores_the_bucket(clock: ManualClock) -> None:
    policy = waiting_policy(clock, max_wait=5.0)
    [await policy.admit("lookup_customer") for _ in range(2)]
    tasks = [asyncio.create_task(policy.admit("lookup_customer")) for _ in range(5)]
    await settle()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    state = policy.state("lookup_customer")
    assert state is not None and state["waiting"] == 0 and clock.sleepers == 0
    clock.advance(1.0)
    got = [policy.try_admit("lookup_customer") for _ in range(3)]
    assert [type(g) for g in got] == [Permit, Permit, Rejection]


async def test_waiting_on_the_real_clock_does_not_block_the_event_loop() -> None:
    policy = ToolRateLimitPolicy(
        limits={"t": RateLimit(requests=1, per_seconds=0.05, burst=1)}, on_limit="wait", max_wait=1.0
    )
    ticks = 0
    stop = False

    async def ticker() -> None:
        nonlocal ticks
        while not stop:
            ticks += 1
            await asyncio.sleep(0.002)

    t = asyncio.create_task(ticker())
    start = time.monotonic()
    permits = [await policy.admit("t") for _ in range(4)]
    elapsed = time.monotonic() - start
    stop = True
    await t
    assert 0.14 <= elapsed < 0.6
    assert permits[-1].waited == pytest.approx(0.05, abs=0.03)
    assert ticks >= 20  # the loop kept running while the calls waited


def test_waiting_works_on_several_event_loops_in_several_threads() -> None:
    policy = ToolRateLimitPolicy(
        limits={"t": RateLimit(requests=40, per_seconds=1.0, burst=4)}, on_limit="wait", max_wait=2.0
    )
    waited: list[float] = []
    lock = threading.Lock()

    def worker() -> None:
        async def main() -> None:
            for p in await asyncio.gather(*(policy.admit("t") for _ in range(4))):
                with lock:
                    waited.append(p.waited)

        asyncio.run(main())

    start = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    # 16 calls, burst 4, then one every 25 ms: the last waits about 0.3 s.
    assert len(waited) == 16
    assert sorted(waited)[:4] == [0.0] * 4
    assert 0.25 <= max(waited) <= 0.6
    assert time.monotonic() - start < 2.0


async def test_a_concurrency_waiter_is_woken_when_a_slot_frees(clock: ManualClock) -> None:
    policy = ToolRateLimitPolicy.from_dict(
        {"tools": {"slow": {"concurrency": 1, "on_limit": "wait", "max_wait": "10s"}}}, clock=clock
    )
    first = await policy.admit("slow")
    second = asyncio.create_task(policy.admit("slow"))
    await settle()
    assert not second.done()
    first.complete()
    p = await asyncio.wait_for(second, 2.0)
    assert isinstance(p, Permit)


async def test_a_thousand_waiters_are_admitted_exactly_at_the_rate(clock: ManualClock) -> None:
    policy = ToolRateLimitPolicy(
        limits={"t": RateLimit(requests=10, per_seconds=1.0, burst=10)}, on_limit="wait", max_wait=1000.0, clock=clock
    )
    admitted: list[int] = []

    async def call(i: int) -> None:
        await policy.admit("t")
        admitted.append(i)

    tasks = [asyncio.create_task(call(i)) for i in range(1000)]
    await until(lambda: len(admitted) >= 10)
    assert len(admitted) == 10
    for second in range(1, 6):
        clock.advance(1.0)
        await until(lambda: len(admitted) >= 10 + 10 * second)
        assert len(admitted) == 10 + 10 * second
    assert admitted == sorted(admitted)  # FIFO
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    state = policy.state("t")
    assert state is not None and state["waiting"] == 0 and state["admitted"] == 60


async def test_cancelling_a_waiter_on_the_real_clock_frees_its_place() -> None:
    policy = ToolRateLimitPolicy(limits={"t": RateLimit(requests=1, per_seconds=0.2, burst=1)}, on_limit="wait")
    await policy.admit("t")
    first = asyncio.create_task(policy.admit("t"))  # due in 0.2 s
    second = asyncio.create_task(policy.admit("t"))  # due in 0.4 s
    await asyncio.sleep(0.02)
    first.cancel()
    start = time.monotonic()
    permit = await second
    assert time.monotonic() - start < 0.3  # moved up into first's place
    assert permit.waited == pytest.approx(0.2, abs=0.08)


_WAKE_DURING_EXIT = textwrap.dedent(
    """
    import os, sys, time
    from toolgate._toolgate import Engine, Permit, Waiting

    engine = Engine.from_toml('[tools.t]\\nconcurrency = 1\\non_limit = "wait"\\nmax_wait = "60s"\\n')

    class Teardown:
        def __init__(self):
            self.permit = engine.try_admit("t")
            assert isinstance(self.permit, Permit)
            self.waiting = engine.admit("t", max_wait=60.0)
            assert isinstance(self.waiting, Waiting)
            self.waiting.poll(lambda: None)  # pending: its waker is registered

        def __del__(self):
            # Runs in the interpreter's last garbage collection: the freed slot
            # wakes the waiter, and the loop below lets another thread take the GIL.
            os.write(1, b"finalizing=%d\\n" % sys.is_finalizing())
            self.permit.release()
            end = time.monotonic() + 0.3
            while time.monotonic() < end:
                pass

    holder = Teardown()
    holder.cycle = holder  # only the final collection frees it
    del holder
    """
)


def test_a_wake_while_the_interpreter_exits_does_not_call_into_it() -> None:
    # A waker that fires during interpreter shutdown (a permit freed by the final
    # collection, a Redis reply arriving late) used to make the notifier thread
    # attach to a finalizing interpreter: a Rust panic here, and in one CI run an
    # abort ("PyGILState_Release: thread state ... must be current").
    out = subprocess.run([sys.executable, "-c", _WAKE_DURING_EXIT], capture_output=True, text=True, timeout=60)
    assert "finalizing=1" in out.stdout, (out.stdout, out.stderr)
    assert out.returncode == 0, out.stderr
    assert "panicked" not in out.stderr and "Fatal Python error" not in out.stderr, out.stderr


_FORK = textwrap.dedent(
    """
    import asyncio, os
    from toolgate import ToolRateLimitPolicy

    policy = ToolRateLimitPolicy.from_toml(
        '[tools.t]\\nconcurrency = 1\\non_limit = "wait"\\nmax_wait = "30s"\\n'
    )

    async def handoff() -> float:
        # A waiter for a concurrency slot is woken only through the notifier thread.
        first = await policy.admit("t")
        waiter = asyncio.ensure_future(policy.admit("t"))
        await asyncio.sleep(0.05)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        first.release()
        second = await asyncio.wait_for(waiter, 5)
        second.release()
        return loop.time() - t0

    asyncio.run(handoff())  # the parent's notifier thread runs from here on
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(0 if asyncio.run(handoff()) < 2 else 3)
        except BaseException:
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    print("child", os.waitstatus_to_exitcode(status), "parent", round(asyncio.run(handoff()), 3))
    """
)


def test_a_child_process_after_fork_gets_its_own_notifier() -> None:
    # The parent's notifier thread does not exist in a child: before, a concurrency
    # waiter in the child was never woken when the slot freed (here it would time
    # out after 5 s); now the child starts a notifier of its own.
    out = subprocess.run([sys.executable, "-c", _FORK], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    words = out.stdout.split()
    assert words[:2] == ["child", "0"], (out.stdout, out.stderr)
    assert float(words[3]) < 2, out.stdout
