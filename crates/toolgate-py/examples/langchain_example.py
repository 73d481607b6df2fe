"""toolgate with LangChain v1 agents -- runs offline.

`AdmissionMiddleware` is an AgentMiddleware whose awrap_tool_call asks toolgate
before a tool runs; a rejected call returns an error ToolMessage carrying the
rejection (tool, reason, quota, retry_after) and the tool does not run. A scripted
chat model asks for five lookups at once. Use a real chat model in practice.
"""

import asyncio

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool

from toolgate import RateLimit, ToolRateLimitPolicy
from toolgate.langchain import AdmissionMiddleware

policy = ToolRateLimitPolicy(limits={"lookup_customer": RateLimit(requests=2, per_seconds=1.0, burst=2)})


@tool
async def lookup_customer(customer_id: int) -> str:
    """Look up a customer record."""
    return f"customer {customer_id}: active"


class ScriptedModel(GenericFakeChatModel):
    """An offline stand-in for a chat model."""

    def bind_tools(self, tools, **kwargs):
        return self


async def main() -> None:
    calls = [{"name": "lookup_customer", "args": {"customer_id": i}, "id": f"call_{i}"} for i in range(5)]
    model = ScriptedModel(messages=iter([AIMessage(content="", tool_calls=calls), AIMessage(content="done")]))
    agent = create_agent(model, tools=[lookup_customer], middleware=[AdmissionMiddleware(policy)])
    result = await agent.ainvoke({"messages": [{"role": "user", "content": "look up customers 0-4"}]})
    for m in result["messages"]:
        if isinstance(m, ToolMessage):
            print(f"{m.tool_call_id}: {m.status:7} {m.content}")


if __name__ == "__main__":
    asyncio.run(main())
