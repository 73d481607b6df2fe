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

Each limiter's call is bound with ``functools.partial`` (aiolimiter's two calls are
one coroutine function), so no limiter pays for a Python frame of the harness.
Figures are the median of interleaved rounds, with the rounds' spread (min–max).
A missing peer package is an error, never a skipped row.

Run with ``scripts/bench-python`` (builds the release extension first).
"""

from __future__ import annotations

import asyncio
import functools
import gc
import importlib
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

PEERS = ("aiolimiter", "limits", "limits.aio.storage", "limits.aio.strategies", "pyrate_limiter", "agent_framework")
_missing = []
for _name in PEERS:
    try:
        importlib.import_module(_name)
    except ImportError as _e:
        _missing.append(f"{_name} ({_e})")
if _missing:
    sys.exit("bench.py: peer packages missing, install crates/toolgate-py/requirements-test.txt: " + ", ".join(_missing))

import aiolimiter  # noqa: E402
import limits  # noqa: E402
import limits.aio.storage  # noqa: E402
import limits.aio.strategies  # noqa: E402
import pyrate_limiter  # noqa: E402

from toolgate import RateLimit, ToolRateLimitPolicy  # noqa: E402

SINGLE_OPS = 50_000
TASKS = 100
OPS_PER_TASK = 500
REPEATS = 9


def toolgate_async() -> Callable[[], Awaitable[Any]]:
    p = ToolRateLimitPolicy(limits={"t": RateLimit(100, 1.0, burst=100)})
    return functools.partial(p.decide, "t")


def toolgate_sync() -> Callable[[], Any]:
    p = ToolRateLimitPolicy(limits={"t": RateLimit(100, 1.0, burst=100)})
    return functools.partial(p.try_admit, "t")


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
    return functools.partial(lim.hit, item, "t")


def limits_sync() -> Callable[[], Any]:
    lim = limits.strategies.MovingWindowRateLimiter(limits.storage.MemoryStorage())
    item = limits.parse("100/second")
    return functools.partial(lim.hit, item, "t")


def pyrate_async() -> Callable[[], Awaitable[Any]]:
    lim = pyrate_limiter.Limiter(pyrate_limiter.Rate(100, pyrate_limiter.Duration.SECOND))
    return functools.partial(lim.try_acquire_async, "t", blocking=False)


def pyrate_sync() -> Callable[[], Any]:
    lim = pyrate_limiter.Limiter(pyrate_limiter.Rate(100, pyrate_limiter.Duration.SECOND))
    return functools.partial(lim.try_acquire, "t", blocking=False)


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


async def middleware_overhead() -> dict[str, list[float]]:
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
    cases = {
        "no middleware": FunctionMiddlewarePipeline(),
        "no-op middleware": FunctionMiddlewarePipeline(Noop()),
        "toolgate, admitted": FunctionMiddlewarePipeline(
            ToolRateLimitPolicy(limits={"t": RateLimit(10**9, 1.0)})
        ),
        "toolgate, rejected": FunctionMiddlewarePipeline(ToolRateLimitPolicy(limits={"t": RateLimit(1, 3600.0)})),
    }
    out: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(REPEATS):  # interleaved rounds, as for the limiters
        for name, pipe in cases.items():
            start = time.perf_counter()
            for _ in range(n):
                ctx = FunctionInvocationContext(function=t, arguments={})
                await pipe.execute(ctx, final)
            out[name].append((time.perf_counter() - start) / n * 1e9)
    return out


async def parts() -> dict[str, list[float]]:
    """What one async decision costs, in parts, in ns: the loop alone, awaiting an
    empty coroutine, the engine's decision called from Python (no await, no policy),
    toolgate's ``await policy.decide(tool)`` and aiolimiter's decision."""
    p = ToolRateLimitPolicy(limits={"t": RateLimit(100, 1.0, burst=100)})
    engine_try_admit = functools.partial(p._engine.try_admit, "t")
    decide = functools.partial(p.decide, "t")
    aio = aiolimiter_async()
    n = 100_000

    async def empty() -> None:
        return None

    async def loop_only() -> None:
        for _ in range(n):
            pass

    async def await_empty() -> None:
        for _ in range(n):
            await empty()

    async def engine_only() -> None:
        for _ in range(n):
            engine_try_admit()

    async def await_decide() -> None:
        for _ in range(n):
            await decide()

    async def await_aiolimiter() -> None:
        for _ in range(n):
            await aio()

    cases = {
        "the loop alone": loop_only,
        "await an empty coroutine": await_empty,
        "the engine's decision from Python (Engine.try_admit, no await)": engine_only,
        "toolgate: await policy.decide(tool)": await_decide,
        "aiolimiter: has_capacity() then acquire(), awaited": await_aiolimiter,
    }
    out: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(REPEATS):
        for name, case in cases.items():
            start = time.perf_counter()
            await case()
            out[name].append((time.perf_counter() - start) / n * 1e9)
    return out


def spread(samples: list[float]) -> str:
    return f"{min(samples):,.0f}–{max(samples):,.0f}"


async def main() -> None:
    gc.disable()
    print(f"python {sys.version.split()[0]}; median of {REPEATS} interleaved rounds (min–max of the rounds)")
    results: dict[str, dict[str, list[float]]] = {"single": {}, "concurrent": {}, "sync": {}}
    # Rounds interleave the limiters, so background load hits them alike.
    for _ in range(REPEATS):
        for name, make in ASYNC.items():
            for key, fn in (("single", single_task), ("concurrent", concurrent_tasks)):
                results[key].setdefault(name, []).append(await fn(make))
        for name, make_sync in SYNC.items():
            results["sync"].setdefault(name, []).append(sync_loop(make_sync))
    titles = {
        "single": f"async, one task ({SINGLE_OPS:,} decisions)",
        "concurrent": f"async, {TASKS} concurrent tasks ({TASKS * OPS_PER_TASK:,} decisions)",
        "sync": f"sync API, one thread ({SINGLE_OPS:,} decisions)",
    }
    for key, title in titles.items():
        res = {name: statistics.median(v) for name, v in results[key].items()}
        peers = {k: v for k, v in res.items() if k != "toolgate"}
        fastest_name = max(peers, key=lambda k: peers[k])
        fastest = peers[fastest_name]
        # The ratio's spread: toolgate's rounds over the fastest peer's, round by round.
        ratios = [t / f for t, f in zip(results[key]["toolgate"], results[key][fastest_name])]
        print(
            f"\n{title}: toolgate / fastest peer = {res['toolgate'] / fastest:.2f}× "
            f"(per round {min(ratios):.2f}–{max(ratios):.2f}×)"
        )
        print("| limiter | decisions/s (median) | rounds min–max | ns/decision | × fastest peer |")
        print("|---|---:|---:|---:|---:|")
        for name, v in res.items():
            print(f"| {name} | {v:,.0f} | {spread(results[key][name])} | {1e9 / v:,.0f} | {v / fastest:.2f}× |")
    print("\nOne async decision in parts, ns per iteration of a loop (median of rounds):")
    print("| what | ns | rounds min–max |\n|---|---:|---:|")
    for name, ns in (await parts()).items():
        print(f"| {name} | {statistics.median(ns):,.0f} | {spread(ns)} |")
    over = await middleware_overhead()
    base = statistics.median(over["no-op middleware"])
    print("\nAgent Framework function middleware pipeline, ns per tool call (median of rounds):")
    print("| pipeline | ns/call | rounds min–max | vs no-op middleware |\n|---|---:|---:|---:|")
    for name, ns in over.items():
        m = statistics.median(ns)
        print(f"| {name} | {m:,.0f} | {spread(ns)} | {m - base:+,.0f} ns |")


if __name__ == "__main__":
    asyncio.run(main())
