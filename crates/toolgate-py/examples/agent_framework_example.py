"""toolgate as Microsoft Agent Framework function middleware -- runs offline.

A scripted chat client stands in for the model: its first answer asks for
5 x lookup_customer, 2 x get_payment_status and 3 x search_documents at once; the
framework runs them concurrently, toolgate admits 2 + 1 + 3 and hands the model
four rejection results (the tools did not run); the second answer reports them.
Replace ScriptedChatClient with a real client (e.g. OpenAIChatClient) in practice.
"""

import asyncio
import json

from agent_framework import Agent, BaseChatClient, ChatResponse, Content, FunctionInvocationLayer, Message, tool

from toolgate import RateLimit, ToolRateLimitPolicy

policy = ToolRateLimitPolicy(
    limits={"lookup_customer": RateLimit(requests=2, per_seconds=1.0, burst=2),
            "get_payment_status": RateLimit(requests=1, per_seconds=1.0, burst=1),
            "search_documents": RateLimit(requests=10, per_seconds=1.0, burst=10)},
    on_limit="reject",
)


@tool
async def lookup_customer(customer_id: int) -> str:
    """Look up a customer record."""
    return f"customer {customer_id}: active"


@tool
async def get_payment_status(payment_id: str) -> str:
    """Get the status of a payment."""
    return f"payment {payment_id}: settled"


@tool
async def search_documents(query: str) -> str:
    """Search the knowledge base."""
    return f"3 documents about {query!r}"


class ScriptedChatClient(FunctionInvocationLayer, BaseChatClient):
    """An offline stand-in for a model."""

    def _inner_get_response(self, *, messages, stream, options, **kwargs):
        async def respond() -> ChatResponse:
            results = [c for m in messages for c in m.contents if c.type == "function_result"]
            if not results:  # first turn: ask for ten tool calls at once
                calls = [("lookup_customer", {"customer_id": i}) for i in range(5)]
                calls += [("get_payment_status", {"payment_id": f"p{i}"}) for i in range(2)]
                calls += [("search_documents", {"query": f"refund policy {i}"}) for i in range(3)]
                contents = [Content.from_function_call(call_id=f"call_{i}", name=name, arguments=json.dumps(args))
                            for i, (name, args) in enumerate(calls)]
            else:  # second turn: report what came back
                rejected = [json.loads(str(r.result)) for r in results if "rejected_by" in str(r.result)]
                lines = [f"{len(results) - len(rejected)} tool calls ran, {len(rejected)} were rejected:"]
                lines += [f"- {r['tool']}: {r['reason']}, retry after {r['retry_after']:.2f}s" for r in rejected]
                contents = [Content.from_text("\n".join(lines))]
            return ChatResponse(messages=[Message(role="assistant", contents=contents)])

        return respond()


async def main() -> None:
    agent = Agent(
        client=ScriptedChatClient(),
        name="support",
        tools=[lookup_customer, get_payment_status, search_documents],
        middleware=[policy],
    )
    response = await agent.run("Check customers 0-4, payments p0 and p1, and find the refund policy.")
    print(response.text)


if __name__ == "__main__":
    asyncio.run(main())
