"""The LangChain v1 adapter, offline, with a scripted chat model and create_agent."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import pytest

pytest.importorskip("langchain")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402

from toolgate import RateLimit, ToolRateLimitPolicy  # noqa: E402
from toolgate.langchain import AdmissionMiddleware  # noqa: E402
from toolgate.testing import ManualClock  # noqa: E402


class ScriptedModel(GenericFakeChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def script() -> ScriptedModel:
    calls = [{"name": "lookup_customer", "args": {"customer_id": i}, "id": f"call_{i}"} for i in range(5)]
    calls += [{"name": "get_weather", "args": {"city": "Oslo"}, "id": "call_w"}]
    return ScriptedModel(messages=iter([AIMessage(content="", tool_calls=calls), AIMessage(content="done")]))


async def test_rejected_calls_return_an_error_tool_message_and_never_run() -> None:
    ran: Counter[str] = Counter()

    @tool
    async def lookup_customer(customer_id: int) -> str:
        """Look up a customer."""
        ran["lookup_customer"] += 1
        await asyncio.sleep(0)
        return f"customer {customer_id}"

    @tool
    async def get_weather(city: str) -> str:
        """The weather (no policy)."""
        ran["get_weather"] += 1
        return "sunny"

    policy = ToolRateLimitPolicy(limits={"lookup_customer": RateLimit(2, 1.0, burst=2)}, clock=ManualClock())
    agent = create_agent(script(), tools=[lookup_customer, get_weather], middleware=[AdmissionMiddleware(policy)])
    out = await agent.ainvoke({"messages": [{"role": "user", "content": "look up 0-4"}]})
    assert out["messages"][-1].content == "done"
    assert ran == {"lookup_customer": 2, "get_weather": 1}
    tool_messages = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert len(tool_messages) == 6
    rejected = [m for m in tool_messages if m.status == "error"]
    assert len(rejected) == 3
    for m in rejected:
        body = json.loads(str(m.content))
        assert (body["rejected_by"], body["tool"], body["reason"]) == ("toolgate", "lookup_customer", "rate_limited")
        assert m.artifact["retry_after"] == pytest.approx(0.5)


async def test_priority_and_deadline_come_from_the_run_context_or_call_options() -> None:
    import datetime as dt

    from toolgate import Decision, call_options

    ran: Counter[str] = Counter()

    @tool
    async def lookup_customer(customer_id: int) -> str:
        """Look up a customer."""
        ran["lookup_customer"] += 1
        return f"customer {customer_id}"

    @tool
    async def get_weather(city: str) -> str:
        """The weather (no policy)."""
        return "sunny"

    decisions: list[Decision] = []
    policy = ToolRateLimitPolicy(limits={"lookup_customer": RateLimit(100)}, on_decision=decisions.append)

    async def run(context: dict[str, Any] | None) -> list[ToolMessage]:
        agent = create_agent(script(), tools=[lookup_customer, get_weather], middleware=[AdmissionMiddleware(policy)])
        out = await agent.ainvoke({"messages": [{"role": "user", "content": "go"}]}, context=context)
        return [m for m in out["messages"] if isinstance(m, ToolMessage) and m.name == "lookup_customer"]

    past = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=1)
    refused = await run({"deadline": past})
    assert ran["lookup_customer"] == 0 and len(refused) == 5
    assert {(m.artifact["reason"], m.artifact["quota"]) for m in refused} == {("max_wait_exceeded", "deadline")}
    with call_options(priority="batch"):
        await run({"deadline": 30.0})
    assert ran["lookup_customer"] == 5
    assert [d.priority for d in decisions[-5:]] == ["batch"] * 5
