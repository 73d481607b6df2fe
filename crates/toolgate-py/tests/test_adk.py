"""Google ADK: ``toolgate.adk.RateLimitPlugin`` on a real ``Agent`` and
``InMemoryRunner`` (``google-adk``), with a scripted model (a ``BaseLlm`` that returns
function calls; no network)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from google.adk.agents import Agent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.genai import types

from toolgate import RateLimit, ToolRateLimit, ToolRateLimitPolicy
from toolgate.adk import RateLimitPlugin
from toolgate.testing import ManualClock


class ScriptedModel(BaseLlm):
    """First turn: ``count`` parallel calls of ``tool``; second turn: a text that
    says how many came back, keeping every function response it was given."""

    model: str = "scripted"
    tool: str = "get_weather"
    count: int = 5
    responses: list[dict[str, Any]] = []

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        answers = [p.function_response for c in llm_request.contents for p in (c.parts or []) if p.function_response]
        if not answers:
            calls = [
                types.Part(function_call=types.FunctionCall(id=f"call_{i}", name=self.tool, args={"city": f"c{i}"}))
                for i in range(self.count)
            ]
            yield LlmResponse(content=types.Content(role="model", parts=calls))
            return
        self.responses.extend({"id": a.id, **(a.response or {})} for a in answers)
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=f"{len(answers)} answers")]))


ran: list[str] = []


async def get_weather(city: str) -> dict[str, str]:
    """The weather of a city."""
    ran.append(city)
    return {"city": city, "weather": "sunny"}


async def broken_tool(city: str) -> dict[str, str]:
    """Always fails."""
    raise RuntimeError("upstream down")


async def run_agent(policy: ToolRateLimitPolicy, model: ScriptedModel) -> str:
    agent = Agent(name="weather", model=model, instruction="Answer about the weather.", tools=[get_weather, broken_tool])
    runner = InMemoryRunner(agent=agent, app_name="toolgate-test", plugins=[RateLimitPlugin(policy)])
    session = await runner.session_service.create_session(app_name="toolgate-test", user_id="u1")
    message = types.Content(role="user", parts=[types.Part(text="Weather in five cities?")])
    text = ""
    async for event in runner.run_async(user_id="u1", session_id=session.id, new_message=message):
        for part in (event.content.parts or []) if event.content else []:
            text += part.text or ""
    return text


@pytest.fixture(autouse=True)
def _reset() -> None:
    ran.clear()


async def test_five_parallel_calls_of_a_two_per_second_tool_two_run_three_rejections_reach_the_model() -> None:
    policy = ToolRateLimitPolicy(limits={"get_weather": ToolRateLimit(rpm=2, per=1.0, behavior="error")})
    model = ScriptedModel(responses=[])
    text = await asyncio.wait_for(run_agent(policy, model), timeout=30)
    assert text == "5 answers"
    assert len(ran) == 2, "rejected calls never run the tool body"
    rejected = [r for r in model.responses if r.get("rejected_by") == "toolgate"]
    ok = [r for r in model.responses if r.get("weather") == "sunny"]
    assert (len(ok), len(rejected)) == (2, 3), model.responses
    for r in rejected:
        assert (r["tool"], r["reason"], r["quota"]) == ("get_weather", "rate_limited", "tools.get_weather.rate")
        assert 0 < r["retry_after"] <= 1.0 and "not run" in r["message"]
    assert policy.state("get_weather")["in_flight"] == 0  # type: ignore[index]


async def test_the_wait_variant_admits_them_in_order_as_the_window_slides(clock: ManualClock) -> None:
    policy = ToolRateLimitPolicy(limits={"get_weather": ToolRateLimit(rpm=2, per=1.0, behavior="wait")}, clock=clock)
    model = ScriptedModel(responses=[])
    run = asyncio.create_task(run_agent(policy, model))

    async def until(n_ran: int, n_waiting: int) -> None:
        deadline = time.monotonic() + 10
        while (len(ran), (policy.state("get_weather") or {}).get("waiting")) != (n_ran, n_waiting):
            assert time.monotonic() < deadline, (ran, policy.state("get_weather"))
            await asyncio.sleep(0.005)

    await until(2, 3)
    assert ran == ["c0", "c1"]
    clock.advance(1.0)  # the first two leave the window
    await until(4, 1)
    assert ran == ["c0", "c1", "c2", "c3"]
    clock.advance(1.0)
    assert await asyncio.wait_for(run, timeout=30) == "5 answers"
    assert ran == ["c0", "c1", "c2", "c3", "c4"], "FIFO: in the order the model called"
    assert all(r.get("weather") == "sunny" for r in model.responses)


async def test_an_error_completes_the_permit_and_feeds_the_breaker() -> None:
    policy = ToolRateLimitPolicy.from_dict(
        {
            "tools": {
                "broken_tool": {
                    "concurrency": 1,
                    "circuit": {"window": 2, "min_calls": 2, "failure_rate": 0.5, "open_for": "30s"},
                }
            }
        }
    )
    for _ in range(2):
        with pytest.raises(RuntimeError, match="upstream down"):
            await asyncio.wait_for(run_agent(policy, ScriptedModel(tool="broken_tool", count=1, responses=[])), 30)
        state = policy.state("broken_tool")
        assert state is not None and state["in_flight"] == 0, "the failed call's permit was completed"
    # Two errors in a window of two: the circuit is open; the model is told so and
    # the tool body does not run.
    model = ScriptedModel(tool="broken_tool", count=1, responses=[])
    assert await asyncio.wait_for(run_agent(policy, model), 30) == "1 answers"
    assert [(r["reason"], r["quota"]) for r in model.responses] == [("circuit_open", "tools.broken_tool.circuit")]


async def test_tools_without_a_policy_are_left_alone() -> None:
    policy = ToolRateLimitPolicy(limits={"other": RateLimit(1)})
    model = ScriptedModel(responses=[])
    assert await asyncio.wait_for(run_agent(policy, model), timeout=30) == "5 answers"
    assert len(ran) == 5


async def test_call_options_around_the_run_give_its_calls_their_priority_and_deadline() -> None:
    import datetime as dt

    from toolgate import Decision, call_options

    decisions: list[Decision] = []
    policy = ToolRateLimitPolicy(limits={"get_weather": RateLimit(100)}, on_decision=decisions.append)
    model = ScriptedModel(responses=[])
    with call_options(priority="batch", deadline=dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=1)):
        assert await asyncio.wait_for(run_agent(policy, model), timeout=30) == "5 answers"
    assert ran == [], "no call could finish in time"
    assert {(r["reason"], r["quota"]) for r in model.responses} == {("max_wait_exceeded", "deadline")}
    assert {d.priority for d in decisions} == {"batch"}
