"""A real Microsoft Agent Framework agent, offline, with the policy as function middleware."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Awaitable, Sequence
from typing import Any

import pytest

af = pytest.importorskip("agent_framework")

from agent_framework import (  # noqa: E402
    Agent,
    BaseChatClient,
    ChatResponse,
    Content,
    FunctionInvocationLayer,
    FunctionMiddleware,
    Message,
    tool,
)
from conftest import proposal_policy  # noqa: E402

from toolgate import Decision, RateLimit, ToolRateLimitPolicy  # noqa: E402
from toolgate.testing import ManualClock  # noqa: E402


class ScriptedChatClient(FunctionInvocationLayer[Any], BaseChatClient[Any]):
    """An offline chat client: answers each request with the next scripted message and
    records every request it receives."""

    def __init__(self, script: list[list[Content]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.script = script
        self.requests: list[list[Message]] = []

    def _inner_get_response(
        self, *, messages: Sequence[Message], stream: bool, options: Any, **kwargs: Any
    ) -> Awaitable[ChatResponse]:
        assert not stream
        self.requests.append(list(messages))

        async def respond() -> ChatResponse:
            contents = self.script.pop(0) if self.script else [Content.from_text("done")]
            return ChatResponse(messages=[Message(role="assistant", contents=contents)], response_id="r")

        return respond()


def function_calls() -> list[Content]:
    calls = [("lookup_customer", {"customer_id": i}) for i in range(5)]
    calls += [("get_payment_status", {"payment_id": f"p{i}"}) for i in range(2)]
    calls += [("search_documents", {"query": f"q{i}"}) for i in range(3)]
    return [
        Content.from_function_call(call_id=f"call_{i}", name=name, arguments=json.dumps(args))
        for i, (name, args) in enumerate(calls)
    ]


class Tools:
    """The three tools; each body records that it ran and how many ran at once."""

    def __init__(self) -> None:
        self.ran: Counter[str] = Counter()
        self.running = 0
        self.max_running = 0
        self.all_started = asyncio.Event()

    async def body(self, name: str, result: str) -> str:
        self.ran[name] += 1
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        if self.running == 6:
            self.all_started.set()
        try:
            # Every admitted body waits here until all six are running: they only
            # finish if the framework really runs them concurrently.
            await asyncio.wait_for(self.all_started.wait(), 5)
        finally:
            self.running -= 1
        return result

    def as_tools(self) -> list[Any]:
        @tool(name="lookup_customer", description="Look up a customer")
        async def lookup_customer(customer_id: int) -> str:
            return await self.body("lookup_customer", f"customer {customer_id}")

        @tool(name="get_payment_status", description="Payment status")
        async def get_payment_status(payment_id: str) -> str:
            return await self.body("get_payment_status", f"{payment_id}: paid")

        @tool(name="search_documents", description="Search documents")
        async def search_documents(query: str) -> str:
            return await self.body("search_documents", f"results for {query}")

        return [lookup_customer, get_payment_status, search_documents]


def results_of(messages: list[Message]) -> list[Content]:
    return [c for m in messages for c in m.contents if c.type == "function_result"]


def test_the_policy_is_function_middleware() -> None:
    assert isinstance(proposal_policy(), FunctionMiddleware)


async def test_an_agent_runs_two_plus_one_plus_three_tool_bodies_and_the_model_sees_four_rejections() -> None:
    decisions: list[Decision] = []
    policy = proposal_policy(ManualClock(), on_decision=decisions.append)
    tools = Tools()
    client = ScriptedChatClient([function_calls(), [Content.from_text("Here is what I found.")]])
    agent = Agent(client=client, name="support", tools=tools.as_tools(), middleware=[policy])

    response = await agent.run("Check customers 0-4, payments p0-p1 and search q0-q2")

    assert response.text == "Here is what I found."
    assert tools.ran == {"lookup_customer": 2, "get_payment_status": 1, "search_documents": 3}
    assert tools.max_running == 6  # the admitted calls ran concurrently
    assert len(client.requests) == 2
    results = results_of(client.requests[1])
    assert len(results) == 10
    rejections = []
    for r in results:
        text = str(r.result)
        if "rejected_by" in text:
            rejections.append(json.loads(text[text.index("{") : text.rindex("}") + 1]))
    assert sorted((j["tool"], j["reason"]) for j in rejections) == [
        ("get_payment_status", "rate_limited"),
        ("lookup_customer", "rate_limited"),
        ("lookup_customer", "rate_limited"),
        ("lookup_customer", "rate_limited"),
    ]
    assert all(j["rejected_by"] == "toolgate" and j["retry_after"] > 0 for j in rejections)
    assert Counter(d.admitted for d in decisions) == {True: 6, False: 4}


async def test_unconfigured_tools_behave_as_without_the_middleware() -> None:
    policy = ToolRateLimitPolicy(limits={"other": RateLimit(1)}, clock=ManualClock())
    tools = Tools()
    tools.all_started.set()
    calls = function_calls()
    client = ScriptedChatClient([calls, [Content.from_text("ok")]])
    agent = Agent(client=client, tools=tools.as_tools(), middleware=[policy])
    await agent.run("go")
    assert sum(tools.ran.values()) == 10
    assert not any("rejected_by" in str(r.result) for r in results_of(client.requests[1]))


def start_waiting_lookups() -> tuple[ManualClock, ToolRateLimitPolicy, Tools, asyncio.Task[Any]]:
    """An agent whose one response asks for 5 lookups, on a 2/s burst-2 wait-mode
    policy with a manual clock: two run at once, three wait."""
    clock = ManualClock()
    policy = ToolRateLimitPolicy(
        limits={"lookup_customer": RateLimit(2, 1.0, burst=2)}, on_limit="wait", max_wait=5.0, clock=clock
    )
    tools = Tools()
    tools.all_started.set()
    calls = [c for c in function_calls() if c.name == "lookup_customer"]
    client = ScriptedChatClient([calls, [Content.from_text("ok")]])
    agent = Agent(client=client, tools=tools.as_tools(), middleware=[policy])
    return clock, policy, tools, asyncio.create_task(agent.run("go"))


async def test_wait_mode_waits_on_the_loop_and_runs_every_call() -> None:
    clock, policy, tools, run = start_waiting_lookups()
    for _ in range(50):
        await asyncio.sleep(0.002)
        if tools.ran["lookup_customer"] == 2:
            break
    assert tools.ran["lookup_customer"] == 2
    clock.advance(1.5)
    await asyncio.wait_for(run, 5)
    assert tools.ran["lookup_customer"] == 5


async def test_cancelling_the_run_mid_wait_leaves_the_accounting_intact() -> None:
    clock, policy, tools, run = start_waiting_lookups()
    for _ in range(100):
        await asyncio.sleep(0.002)
        state = policy.state("lookup_customer")
        if state and state["waiting"] == 3:
            break
    assert state is not None and state["waiting"] == 3
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    state = policy.state("lookup_customer")
    assert state is not None and (state["waiting"], state["in_flight"]) == (0, 0)
    assert tools.ran["lookup_customer"] == 2
    # As if the three waiters had never come: one call fits after 0.5 s, two after 1 s.
    clock.advance(0.5)
    assert type(policy.try_admit("lookup_customer")).__name__ == "Permit"
    assert type(policy.try_admit("lookup_customer")).__name__ == "Rejection"


async def test_admission_that_cannot_be_decided_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    from agent_framework import MiddlewareFailure

    policy = proposal_policy(ManualClock())

    async def unreachable(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("store unreachable")

    monkeypatch.setattr(policy, "decide", unreachable)
    tools = Tools()
    client = ScriptedChatClient([function_calls()[:1], [Content.from_text("ok")]])
    agent = Agent(client=client, tools=tools.as_tools(), middleware=[policy])
    with pytest.raises(MiddlewareFailure):
        await agent.run("go")
    assert sum(tools.ran.values()) == 0


def test_a_policy_made_before_the_framework_is_imported_is_still_function_middleware() -> None:
    import subprocess
    import sys
    from pathlib import Path

    code = """
import asyncio, sys
from conftest import proposal_policy
from toolgate.testing import ManualClock
policy = proposal_policy(ManualClock())
assert "agent_framework" not in sys.modules
from agent_framework import Agent, Content, FunctionMiddleware
from agent_framework._middleware import categorize_middleware
from test_agent_framework import ScriptedChatClient, Tools, function_calls
assert not isinstance(policy, FunctionMiddleware)  # not registered: the callable path
assert categorize_middleware([policy])["function"] == [policy]
tools = Tools()
client = ScriptedChatClient([function_calls(), [Content.from_text("ok")]])
asyncio.run(Agent(client=client, tools=tools.as_tools(), middleware=[policy]).run("go"))
assert tools.ran == {"lookup_customer": 2, "get_payment_status": 1, "search_documents": 3}, tools.ran
"""
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent, timeout=120)
