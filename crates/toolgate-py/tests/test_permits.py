"""How a call's permit ends, the same for the decorator, the context manager and every
adapter: success, ``error`` when the call raised (the circuit breaker counts it), and
released without an outcome when the call was cancelled (the breaker does not)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from types import SimpleNamespace

import pytest

from toolgate import AdmissionRejected, Rejection, ToolRateLimitPolicy
from toolgate.middleware import process
from toolgate.testing import ManualClock

# Two outcomes, both failures, open the circuit for 30 s.
BREAKER = {"tools": {"t": {"circuit": {"window": 2, "min_calls": 2, "failure_rate": 1.0, "open_for": "30s"}}}}


def breaker_policy() -> ToolRateLimitPolicy:
    return ToolRateLimitPolicy.from_dict(BREAKER, clock=ManualClock())


def decorated(policy: ToolRateLimitPolicy, body: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
    @policy.limit("t")
    async def t() -> None:
        await body()

    return t


def guarded(policy: ToolRateLimitPolicy, body: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
    async def t() -> None:
        async with policy.guard("t"):
            await body()

    return t


async def fail() -> None:
    raise KeyError("the tool failed")


async def succeed() -> None:
    pass


async def hang() -> None:
    await asyncio.Event().wait()


SHAPES = [decorated, guarded]


@pytest.mark.parametrize("shape", SHAPES)
async def test_a_call_that_raises_ends_its_permit_as_an_error(shape: Callable[..., Callable[[], Awaitable[None]]]) -> None:
    policy = breaker_policy()
    call = shape(policy, fail)
    for _ in range(2):
        with pytest.raises(KeyError):
            await call()
    with pytest.raises(AdmissionRejected) as no:
        await call()
    assert no.value.reason == "circuit_open"


@pytest.mark.parametrize("shape", SHAPES)
async def test_a_cancelled_call_releases_its_permit_without_an_outcome(
    shape: Callable[..., Callable[[], Awaitable[None]]],
) -> None:
    policy = breaker_policy()
    call = shape(policy, hang)
    for _ in range(2):
        task = asyncio.ensure_future(call())
        while policy.state("t")["in_flight"] == 0:  # type: ignore[index]
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert policy.state("t")["in_flight"] == 0  # type: ignore[index]
    await shape(policy, succeed)()  # two cancellations are no failures: still closed


@pytest.mark.parametrize("shape", SHAPES)
async def test_a_call_that_returns_ends_its_permit_as_a_success(shape: Callable[..., Callable[[], Awaitable[None]]]) -> None:
    policy = breaker_policy()
    for _ in range(3):
        await shape(policy, succeed)()
    assert policy.state("t")["in_flight"] == 0  # type: ignore[index]


async def test_the_middleware_module_runs_the_policy_as_function_middleware() -> None:
    policy = ToolRateLimitPolicy.from_dict({"tools": {"t": {"rate": "1/s"}}}, clock=ManualClock())
    ran = 0

    async def call_next() -> None:
        nonlocal ran
        ran += 1

    contexts = [SimpleNamespace(function=SimpleNamespace(name="t"), result=None) for _ in range(2)]
    for context in contexts:
        await process(policy, context, call_next)
    assert ran == 1
    assert contexts[0].result is None
    assert '"rejected_by":"toolgate"' in contexts[1].result.replace(" ", "")


def test_a_rejections_json_is_the_sorted_map_a_model_reads() -> None:
    """`Rejection.to_json` writes the same text as a sorted JSON map of its fields,
    with and without a retry time, a name that needs escaping included."""
    for tool, retry in (("lookup_customer", 1.25), ('say "hi"\\n', None)):
        r = Rejection(tool, f"tools.{tool}.rate", "rate_limited", retry)
        hint = "" if retry is None else f" Retry after {retry:.3f}s or continue without it."
        expected = {
            "rejected_by": "toolgate",
            "tool": tool,
            "reason": "rate_limited",
            "quota": f"tools.{tool}.rate",
            "retry_after": retry,
            "message": f"The call to {tool} was not run (rate_limited).{hint}",
        }
        assert r.to_json() == json.dumps(expected, sort_keys=True, separators=(",", ":"))
