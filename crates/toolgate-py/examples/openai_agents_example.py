"""toolgate with the OpenAI Agents SDK -- runs offline.

Two ways in: `limit_tools` wraps each FunctionTool's on_invoke_tool (holds the
permit while the tool runs; waits in FIFO order with on_limit="wait"), and
`admission_guardrail` is a tool input guardrail (fail fast) whose reject_content
carries the rejection. A scripted model asks for five lookups at once.
Replace ScriptedModel with a real model (e.g. "gpt-4.1") in practice.
"""

import asyncio
import json

from agents import Agent, ModelResponse, RunConfig, Runner, Usage, function_tool
from agents.models.interface import Model
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from toolgate import RateLimit, ToolRateLimitPolicy
from toolgate.openai_agents import admission_guardrail, limit_tools

policy = ToolRateLimitPolicy(limits={"lookup_customer": RateLimit(requests=2, per_seconds=1.0, burst=2)})


@function_tool
async def lookup_customer(customer_id: int) -> str:
    """Look up a customer record."""
    return f"customer {customer_id}: active"


class ScriptedModel(Model):
    """An offline stand-in for a model."""

    async def get_response(self, system_instructions, input, *args, **kwargs) -> ModelResponse:
        outputs = [i for i in input if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if not outputs:
            calls = [ResponseFunctionToolCall(type="function_call", call_id=f"call_{i}", name="lookup_customer",
                                              arguments=json.dumps({"customer_id": i})) for i in range(5)]
            return ModelResponse(output=calls, usage=Usage(), response_id=None)
        rejected = [o for o in outputs if "rejected_by" in str(o["output"])]
        text = f"{len(outputs) - len(rejected)} lookups ran, {len(rejected)} were rejected by toolgate"
        message = ResponseOutputMessage(type="message", id="m", role="assistant", status="completed",
                                        content=[ResponseOutputText(type="output_text", text=text, annotations=[])])
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError


async def main() -> None:
    config = RunConfig(tracing_disabled=True)
    # 1. The on_invoke_tool wrapper.
    agent = Agent(name="support", model=ScriptedModel(), tools=limit_tools(policy, [lookup_customer]))
    print("wrapper:  ", (await Runner.run(agent, "look up customers 0-4", run_config=config)).final_output)
    # 2. The tool input guardrail (a fresh quota, for the demonstration).
    fresh = ToolRateLimitPolicy(limits={"lookup_customer": RateLimit(requests=2, per_seconds=1.0, burst=2)})
    lookup_customer.tool_input_guardrails = [admission_guardrail(fresh)]
    agent = Agent(name="support", model=ScriptedModel(), tools=[lookup_customer])
    print("guardrail:", (await Runner.run(agent, "look up customers 0-4", run_config=config)).final_output)


if __name__ == "__main__":
    asyncio.run(main())
