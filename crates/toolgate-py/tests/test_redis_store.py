"""Shared quotas on a real ``redis-server`` (started here on a free port):
``store="redis://…"`` makes every process obey one quota."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from toolgate import Permit, RateLimit, Rejection, ToolRateLimitPolicy


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_WORKER = textwrap.dedent(
    """
    import asyncio, sys
    from toolgate import Permit, RateLimit, ToolRateLimitPolicy

    async def main() -> None:
        policy = ToolRateLimitPolicy(
            limits={"lookup_customer": RateLimit(requests=5, per_seconds=60.0, burst=5)},
            store=sys.argv[1],
        )
        sys.stdout.write("ready\\n"); sys.stdout.flush()
        sys.stdin.readline()  # both processes start together
        decisions = await asyncio.gather(*(policy.decide("lookup_customer") for _ in range(20)))
        print(sum(isinstance(d, Permit) for d in decisions))

    asyncio.run(main())
    """
)


def test_a_quota_is_shared_across_two_processes_on_redis(redis_url: str, tmp_path: object) -> None:
    url = f"{redis_url}/0"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    counts = []
    for p in procs:
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 0
        counts.append(int(out.strip()))
    # 2 processes x 20 concurrent calls on one 5/min quota: 5 in all.
    assert sum(counts) == 5, counts


def test_sync_and_async_admission_on_redis_give_the_contract_rejection(redis_url: str) -> None:
    policy = ToolRateLimitPolicy(
        limits={"get_payment_status": RateLimit(requests=1, per_seconds=10.0, burst=1)},
        store=redis_url,
    )
    other = ToolRateLimitPolicy(
        limits={"get_payment_status": RateLimit(requests=1, per_seconds=10.0, burst=1)},
        store=redis_url,
    )
    first = policy.try_admit("get_payment_status")
    assert isinstance(first, Permit)
    first.complete("success")
    # Another policy object (think: another process) sees the quota spent.
    no = asyncio.run(other.decide("get_payment_status"))
    assert isinstance(no, Rejection)
    assert (no.tool, no.quota, no.reason) == ("get_payment_status", "tools.get_payment_status.rate", "rate_limited")
    assert no.retry_after is not None and 0 < no.retry_after <= 10.0
    # Tools without a policy are untouched.
    assert isinstance(policy.try_admit("get_weather"), Permit)


def test_an_unreachable_redis_fails_closed_within_the_timeout() -> None:
    policy = ToolRateLimitPolicy(limits={"t": RateLimit(5)}, store=f"redis://127.0.0.1:{_free_port()}")
    start = time.monotonic()
    no = asyncio.run(policy.decide("t"))
    assert time.monotonic() - start < 3.0
    assert isinstance(no, Rejection)
    assert (no.quota, no.reason) == ("store", "circuit_open")
    assert no.store_unavailable


def test_the_middleware_fails_closed_with_middleware_failure_when_redis_is_unreachable() -> None:
    from types import SimpleNamespace

    from agent_framework import MiddlewareFailure

    policy = ToolRateLimitPolicy(limits={"t": RateLimit(5)}, store=f"redis://127.0.0.1:{_free_port()}")
    ran = []

    async def call_next() -> None:
        ran.append(True)

    context = SimpleNamespace(function=SimpleNamespace(name="t"), result=None)
    with pytest.raises(MiddlewareFailure, match="quota store"):
        asyncio.run(policy.process(context, call_next))  # type: ignore[arg-type]
    assert ran == [] and context.result is None


def test_a_waiter_cancelled_on_redis_gives_its_reserved_time_back(redis_url: str) -> None:
    policy = ToolRateLimitPolicy(
        limits={"t": RateLimit(requests=1, per_seconds=1.0, burst=1)},
        on_limit="wait",
        max_wait=3.0,
        store=f"{redis_url}/0",
    )

    async def scenario() -> tuple[bool, object]:
        first = await policy.decide("t")
        assert isinstance(first, Permit)
        first.complete("success")
        # The next token is a second away: this waiter reserves it, then is cancelled.
        waiter = asyncio.ensure_future(policy.decide("t"))
        await asyncio.sleep(0.2)
        cancelled = waiter.cancel()
        try:
            await waiter
        except asyncio.CancelledError:
            pass
        # Past the reserved time the token is free, as if the waiter never came.
        await asyncio.sleep(1.0)
        return cancelled, policy.try_admit("t")

    cancelled, after = asyncio.run(scenario())
    assert cancelled
    assert isinstance(after, Permit), after


_FORKED_STORE = textwrap.dedent(
    """
    import asyncio, os, sys
    from toolgate import Permit, RateLimit, ToolRateLimitPolicy

    policy = ToolRateLimitPolicy(
        limits={"lookup_customer": RateLimit(requests=5, per_seconds=60.0, burst=5)},
        store=sys.argv[1],
    )
    assert isinstance(asyncio.run(policy.decide("lookup_customer")), Permit)
    pid = os.fork()
    if pid == 0:
        try:
            asyncio.run(policy.decide("lookup_customer"))
        except RuntimeError as e:
            os._exit(0 if "before fork()" in str(e) else 3)
        except BaseException:
            os._exit(4)
        os._exit(5)
    _, status = os.waitpid(pid, 0)
    # The parent's connection still works.
    ok = isinstance(asyncio.run(policy.decide("lookup_customer")), Permit)
    print("child", os.waitstatus_to_exitcode(status), "parent", ok)
    """
)


def test_a_store_policy_used_in_a_child_after_fork_says_so(redis_url: str) -> None:
    # The connection belongs to the parent (its thread and its socket): the child
    # gets a clear error instead of a hang or a socket shared with its parent.
    out = subprocess.run(
        [sys.executable, "-c", _FORKED_STORE, f"{redis_url}/1"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["child", "0", "parent", "True"], (out.stdout, out.stderr)


def test_state_on_redis_reads_what_the_shared_quota_has_left(redis_url: str) -> None:
    # A tool and a database of its own: no other test has touched this quota.
    limits = {"check_inventory": RateLimit(requests=3, per_seconds=60.0, burst=3)}
    policy = ToolRateLimitPolicy(limits=limits, store=f"{redis_url}/2")
    other = ToolRateLimitPolicy(limits=limits, store=f"{redis_url}/2")
    before = other.state("check_inventory")
    assert before is not None
    quotas = [(q["quota"], q["kind"], q["capacity"], q["available"]) for q in before["quotas"]]
    assert quotas == [("tools.check_inventory.rate", "rate", 3, 3)], before
    assert isinstance(policy.try_admit("check_inventory"), Permit)
    # The other policy (as another process would) sees the admission: the figure is
    # Redis', and reading it twice charges nothing.
    for _ in range(2):
        after = other.state("check_inventory")
        assert after is not None and after["quotas"][0]["available"] == 2, after
