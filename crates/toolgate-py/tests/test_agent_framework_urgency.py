"""A real Agent Framework agent (offline) passing a call's priority and deadline to the
policy as function middleware (issue 17): from the run's ``function_invocation_kwargs``
(the function invocation context's ``kwargs``), from an earlier middleware's
``context.metadata``, or from an enclosing ``toolgate.call_options``."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

pytest.importorskip("agent_framework")

from agent_framework import Agent, Content, FunctionInvocationContext, FunctionMiddleware, MiddlewareFailure, tool  # noqa: E402
from test_agent_framework import ScriptedChatClient, results_of  # noqa: E402

from toolgate import Decision, ToolRateLimitPolicy, call_options  # noqa: E402


def past() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=1)


class Run:
    """One agent run whose model asks for one ``lookup`` call, under a policy that
    records its decisions."""

    def __init__(self, *middleware: Any) -> None:
        self.decisions: list[Decision] = []
        self.policy = ToolRateLimitPolicy.from_dict(
            {"tools": {"lookup": {"rate": "100/s", "on_limit": "wait", "max_wait": "5s"}}},
            on_decision=self.decisions.append,
        )
        self.ran = 0

        @tool(name="lookup", description="Look up")
        async def lookup(q: str) -> str:
            self.ran += 1
            return f"found {q}"

        call = Content.from_function_call(call_id="c1", name="lookup", arguments=json.dumps({"q": "x"}))
        self.client = ScriptedChatClient([[call], [Content.from_text("ok")]])
        self.agent = Agent(client=self.client, tools=[lookup], middleware=[*middleware, self.policy])

    async def __call__(self, **kwargs: Any) -> str:
        await self.agent.run("go", **kwargs)
        return str(results_of(self.client.requests[1])[0].result)


class SetsMetadata(FunctionMiddleware):
    """An earlier middleware that marks every call interactive."""

    async def process(self, context: FunctionInvocationContext, call_next: Callable[[], Awaitable[None]]) -> None:
        context.metadata["priority"] = "interactive"
        await call_next()


async def test_the_middleware_reads_priority_and_deadline_from_the_invocation_kwargs() -> None:
    run = Run()
    result = await run(function_invocation_kwargs={"priority": "batch", "deadline": 30.0})
    assert run.ran == 1 and "found x" in result
    assert [(d.admitted, d.priority) for d in run.decisions] == [(True, "batch")]

    late = Run()
    result = await late(function_invocation_kwargs={"deadline": past()})
    assert late.ran == 0, "a call that cannot finish in time never runs"
    rejection = json.loads(result[result.index("{") : result.rindex("}") + 1])
    assert (rejection["rejected_by"], rejection["reason"], rejection["quota"]) == (
        "toolgate",
        "max_wait_exceeded",
        "deadline",
    )


async def test_an_earlier_middleware_s_metadata_wins_over_the_kwargs() -> None:
    run = Run(SetsMetadata())
    await run(function_invocation_kwargs={"priority": "batch"})
    assert [d.priority for d in run.decisions] == ["interactive"]


async def test_call_options_around_the_run_reach_the_middleware() -> None:
    run = Run()
    with call_options(priority="batch", deadline=past()):
        await run()
    assert run.ran == 0
    assert [(d.reason, d.quota, d.priority) for d in run.decisions] == [("max_wait_exceeded", "deadline", "batch")]


async def test_an_invalid_priority_in_the_context_fails_the_run_naming_it() -> None:
    run = Run()
    with pytest.raises(MiddlewareFailure, match="priority: 'urgent'"):
        await run(function_invocation_kwargs={"priority": "urgent"})
    assert run.ran == 0
