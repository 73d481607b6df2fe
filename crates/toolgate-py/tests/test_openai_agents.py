"""The OpenAI Agents SDK adapters, offline, with a scripted model and the real Runner."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, FunctionTool, ModelResponse, RunConfig, Runner, Usage, function_tool  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText  # noqa: E402

from toolgate import RateLimit, ToolRateLimitPolicy  # noqa: E402
from toolgate.openai_agents import admission_guardrail, limit_tools  # noqa: E402
from toolgate.testing import ManualClock  # noqa: E402


class ScriptedModel(Model):
    """Answers with five lookup_customer calls, then a final message; records inputs."""

    def __init__(self) -> None:
        self.inputs: list[Any] = []

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
        self.inputs.append(input)
        if len(self.inputs) == 1:
            output: list[Any] = [
                ResponseFunctionToolCall(
                    type="function_call", id=f"fc_{i}", call_id=f"call_{i}", name="lookup_customer",
                    arguments=json.dumps({"customer_id": i}),
                )
                for i in range(5)
            ]
        else:
            output = [
                ResponseOutputMessage(
                    type="message", id="msg", role="assistant", status="completed",
                    content=[ResponseOutputText(type="output_text", text="done", annotations=[])],
                )
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def lookup_tool(ran: Counter[str]) -> FunctionTool:
    @function_tool
    async def lookup_customer(customer_id: int) -> str:
        """Look up a customer."""
        ran["lookup_customer"] += 1
        await asyncio.sleep(0)
        return f"customer {customer_id}"

    return lookup_customer


def tool_outputs(model: ScriptedModel) -> list[str]:
    items = model.inputs[1]
    return [str(i["output"]) for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]


def rejections(outputs: list[str]) -> list[dict[str, Any]]:
    return [json.loads(o) for o in outputs if "rejected_by" in o]


def limited(shape: str, policy: ToolRateLimitPolicy, tool: Any) -> list[Any]:
    """``tool`` under ``policy``, by an input guardrail or by the wrapper."""
    if shape == "guardrail":
        tool.tool_input_guardrails = [admission_guardrail(policy)]
        return [tool]
    return limit_tools(policy, [tool])


@pytest.mark.parametrize("shape", ["guardrail", "wrapper"])
async def test_rejected_calls_never_run_and_the_model_sees_why(shape: str) -> None:
    policy = ToolRateLimitPolicy(limits={"lookup_customer": RateLimit(2, 1.0, burst=2)}, clock=ManualClock())
    ran: Counter[str] = Counter()
    tools = limited(shape, policy, lookup_tool(ran))
    model = ScriptedModel()
    agent = Agent(name="support", model=model, tools=tools)
    result = await Runner.run(agent, "look up 0-4", run_config=RunConfig(tracing_disabled=True))
    assert result.final_output == "done"
    assert ran["lookup_customer"] == 2
    outputs = tool_outputs(model)
    assert len(outputs) == 5
    rej = rejections(outputs)
    assert [(r["tool"], r["reason"]) for r in rej] == [("lookup_customer", "rate_limited")] * 3


async def test_the_wrapper_waits_in_wait_mode() -> None:
    clock = ManualClock()
    policy = ToolRateLimitPolicy(
        limits={"lookup_customer": RateLimit(2, 1.0, burst=2)}, on_limit="wait", max_wait=5.0, clock=clock
    )
    ran: Counter[str] = Counter()
    model = ScriptedModel()
    agent = Agent(name="support", model=model, tools=limit_tools(policy, [lookup_tool(ran)]))
    run = asyncio.create_task(Runner.run(agent, "go", run_config=RunConfig(tracing_disabled=True)))
    for _ in range(100):
        await asyncio.sleep(0.002)
        state = policy.state("lookup_customer")
        if state and state["waiting"] == 3:
            break
    assert ran["lookup_customer"] == 2
    clock.advance(1.5)
    result = await asyncio.wait_for(run, 5)
    assert result.final_output == "done" and ran["lookup_customer"] == 5
    assert rejections(tool_outputs(model)) == []


@pytest.mark.parametrize("shape", ["guardrail", "wrapper"])
async def test_priority_and_deadline_come_from_the_run_context_or_call_options(shape: str) -> None:
    import datetime as dt

    from toolgate import Decision, call_options

    decisions: list[Decision] = []
    policy = ToolRateLimitPolicy(limits={"lookup_customer": RateLimit(100)}, on_decision=decisions.append)
    ran: Counter[str] = Counter()
    tools = limited(shape, policy, lookup_tool(ran))
    config = RunConfig(tracing_disabled=True)
    past = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=1)
    model = ScriptedModel()
    await Runner.run(Agent(name="a", model=model, tools=tools), "go", context={"deadline": past}, run_config=config)
    assert ran["lookup_customer"] == 0, "no call can finish in time"
    assert {(r["reason"], r["quota"]) for r in rejections(tool_outputs(model))} == {("max_wait_exceeded", "deadline")}
    model = ScriptedModel()
    with call_options(priority="interactive"):
        await Runner.run(Agent(name="a", model=model, tools=tools), "go", context={"deadline": 30.0}, run_config=config)
    assert ran["lookup_customer"] == 5
    assert [d.priority for d in decisions[-5:]] == ["interactive"] * 5
