"""Admission decisions per second, toolgate next to aiolimiter, limits and
pyrate-limiter, in one run; and the Agent Framework middleware's overhead per tool
call next to a no-op middleware.

Scenario: one hot tool at its limit (100 requests/s, burst 100) hammered by calls,
so most decisions are rejections -- the fan-out-over-quota case toolgate is for.
Each limiter is used in fail-fast form (decide, never sleep):

* toolgate: ``await policy.decide(tool)`` / ``policy.try_admit(tool)``
* aiolimiter (leaky bucket, only blocking acquire): ``has_capacity()`` then
  ``await acquire()``
* limits (in-memory moving window): ``await MovingWindowRateLimiter.hit(item, key)``
  (``limits.aio``) / the sync ``limits`` strategy
* pyrate-limiter: ``await try_acquire_async(key, blocking=False)`` /
  ``try_acquire(key, blocking=False)``

Run with ``scripts/bench-python`` (builds the release extension first).
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiolimiter
import limits
import limits.aio.storage
import limits.aio.strategies
import pyrate_limiter

from toolgate import RateLimit, ToolRateLimitPolicy

SINGLE_OPS = 50_000
TASKS = 100
OPS_PER_TASK = 500
REPEATS = 5


def toolgate_async() -> Callable[[], Awaitable[Any]]:
    p = ToolRateLimitPolicy(limits={"t": RateLimit(100, 1.0, burst=100)})
    return lambda: p.decide("t")


def toolgate_sync() -> Callable[[], Any]:
    p = ToolRateLimitPolicy(limits={"t": RateLimit(100, 1.0, burst=100)})
    return lambda: p.try_admit("t")


def aiolimiter_async() -> Callable[[], Awaitable[Any]]:
    lim = aiolimiter.AsyncLimiter(100, 1.0)

    async def decide() -> bool:
        if lim.has_capacity():
            await lim.acquire()
            return True
        return False

    return decide


def limits_async() -> Callable[[], Awaitable[Any]]:
    lim = limits.aio.strategies.MovingWindowRateLimiter(limits.aio.storage.MemoryStorage())
    item = limits.parse("100/second")
    return lambda: lim.hit(item, "t")


def limits_sync() -> Callable[[], Any]:
    lim = limits.strategies.MovingWindowRateLimiter(limits.storage.MemoryStorage())
    item = limits.parse("100/second")
    return lambda: lim.hit(item, "t")


def pyrate_async() -> Callable[[], Awaitable[Any]]:
    lim = pyrate_limiter.Limiter(pyrate_limiter.Rate(100, pyrate_limiter.Duration.SECOND))
    return lambda: lim.try_acquire_async("t", blocking=False)


def pyrate_sync() -> Callable[[], Any]:
    lim = pyrate_limiter.Limiter(pyrate_limiter.Rate(100, pyrate_limiter.Duration.SECOND))
    return lambda: lim.try_acquire("t", blocking=False)


ASYNC = {
    "toolgate": toolgate_async,
    "aiolimiter": aiolimiter_async,
    "limits (moving window)": limits_async,
    "pyrate-limiter": pyrate_async,
}
SYNC = {"toolgate": toolgate_sync, "limits (moving window)": limits_sync, "pyrate-limiter": pyrate_sync}


async def single_task(make: Callable[[], Callable[[], Awaitable[Any]]]) -> float:
    decide = make()
    start = time.perf_counter()
    for _ in range(SINGLE_OPS):
        await decide()
    return SINGLE_OPS / (time.perf_counter() - start)


async def concurrent_tasks(make: Callable[[], Callable[[], Awaitable[Any]]]) -> float:
    decide = make()

    async def task() -> None:
        for _ in range(OPS_PER_TASK):
            await decide()
            await asyncio.sleep(0)  # let the other tasks interleave

    start = time.perf_counter()
    await asyncio.gather(*(task() for _ in range(TASKS)))
    return TASKS * OPS_PER_TASK / (time.perf_counter() - start)


def sync_loop(make: Callable[[], Callable[[], Any]]) -> float:
    decide = make()
    start = time.perf_counter()
    for _ in range(SINGLE_OPS):
        decide()
    return SINGLE_OPS / (time.perf_counter() - start)


async def middleware_overhead() -> dict[str, float]:
    """Nanoseconds per tool call through a real Agent Framework function middleware
    pipeline with a trivial tool: no middleware, a no-op middleware, toolgate
    (admitted calls, and rejected calls)."""
    from agent_framework import FunctionInvocationContext, FunctionMiddleware, tool
    from agent_framework._middleware import FunctionMiddlewarePipeline

    class Noop(FunctionMiddleware):
        async def process(self, context: Any, call_next: Any) -> None:
            await call_next()

    @tool(name="t")
    async def t() -> str:
        return "ok"

    async def final(ctx: Any) -> Any:
        return "ok"

    n = 20_000
    out: dict[str, float] = {}
    cases = {
        "no middleware": FunctionMiddlewarePipeline(),
        "no-op middleware": FunctionMiddlewarePipeline(Noop()),
        "toolgate, admitted": FunctionMiddlewarePipeline(
            ToolRateLimitPolicy(limits={"t": RateLimit(10**9, 1.0)})
        ),
        "toolgate, rejected": FunctionMiddlewarePipeline(ToolRateLimitPolicy(limits={"t": RateLimit(1, 3600.0)})),
    }
    for name, pipe in cases.items():
        samples = []
        for _ in range(REPEATS):
            start = time.perf_counter()
            for _ in range(n):
                ctx = FunctionInvocationContext(function=t, arguments={})
                await pipe.execute(ctx, final)
            samples.append((time.perf_counter() - start) / n * 1e9)
        out[name] = min(samples)
    return out


def row(name: str, v: float, base: float) -> str:
    return f"| {name} | {v:,.0f} | {v / base:.2f}× |"


async def main() -> None:
    gc.disable()
    print(f"python {sys.version.split()[0]}; best of {REPEATS} interleaved rounds")
    results: dict[str, dict[str, float]] = {"single": {}, "concurrent": {}, "sync": {}}
    # Rounds interleave the limiters, so background load hits them alike; best round wins.
    for _ in range(REPEATS):
        for name, make in ASYNC.items():
            for key, fn in (("single", single_task), ("concurrent", concurrent_tasks)):
                results[key][name] = max(results[key].get(name, 0.0), await fn(make))
        for name, make_sync in SYNC.items():
            results["sync"][name] = max(results["sync"].get(name, 0.0), sync_loop(make_sync))
    titles = {
        "single": f"async, one task ({SINGLE_OPS:,} decisions)",
        "concurrent": f"async, {TASKS} concurrent tasks ({TASKS * OPS_PER_TASK:,} decisions)",
        "sync": f"sync API, one thread ({SINGLE_OPS:,} decisions)",
    }
    for key, title in titles.items():
        res = results[key]
        peers = {k: v for k, v in res.items() if k != "toolgate"}
        fastest = max(peers.values())
        print(f"\n{title}: toolgate / fastest peer = {res['toolgate'] / fastest:.2f}×")
        print("| limiter | decisions/s | × fastest peer |\n|---|---:|---:|")
        for name, v in res.items():
            print(row(name, v, fastest))
    over = await middleware_overhead()
    base = over["no-op middleware"]
    print("\nAgent Framework function middleware pipeline, ns per tool call:")
    print("| pipeline | ns/call | vs no-op middleware |\n|---|---:|---:|")
    for name, v in over.items():
        print(f"| {name} | {v:,.0f} | {v - base:+,.0f} ns |")
    print(f"(median of single-task figures: {statistics.median(results['single'].values()):,.0f}/s)")


if __name__ == "__main__":
    asyncio.run(main())
