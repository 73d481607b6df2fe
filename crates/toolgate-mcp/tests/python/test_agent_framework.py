"""Microsoft Agent Framework's MCPStreamableHTTPTool pointed at toolgate, in front of a
Streamable HTTP upstream (MCPServer from the `mcp` package): a scripted chat client asks
for five parallel calls of a 2-per-second tool; two run, and the three rejections reach
the model as tool results it can read."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Iterator, Sequence
from typing import Any

import pytest
from agent_framework import (
    Agent,
    BaseChatClient,
    ChatResponse,
    Content,
    FunctionInvocationLayer,
    MCPStreamableHTTPTool,
    Message,
)

from conftest import Gateway, start_crm, start_gateway, tokens_table


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


@pytest.fixture
def crm() -> Iterator[str]:
    """The upstream, on an ephemeral port."""
    yield from start_crm()


@pytest.fixture
def gw(crm: str) -> Iterator[Gateway]:
    yield from start_gateway(
        tokens_table()
        + f"""
[mcp.servers.crm]
url = "{crm}"

[tools."mcp:crm/lookup_customer"]
rate = "2/s"
burst = 2
"""
    )


async def test_five_parallel_calls_of_a_two_per_second_tool(gw: Gateway) -> None:
    calls = [
        Content.from_function_call(
            call_id=f"call_{i}", name="crm__lookup_customer", arguments=json.dumps({"customer_id": i})
        )
        for i in range(5)
    ]
    client = ScriptedChatClient([calls, [Content.from_text("Here is what I found.")]])
    # An MCP `isError` result is an exception to the framework, whose text reaches the
    # model only with detailed errors on (otherwise: "Error: Function failed.").
    client.function_invocation_configuration["include_detailed_errors"] = True
    mcp = MCPStreamableHTTPTool(name="toolgate", url=gw.mcp, static_headers=gw.headers(), load_prompts=False)
    async with mcp:
        agent = Agent(client=client, name="support", tools=[mcp])
        response = await agent.run("Look up customers 0 to 4")

    assert response.text == "Here is what I found."
    # The model's second turn carries one result per call: two from the upstream,
    # three rejections it can plan with.
    results = [c for m in client.requests[1] for c in m.contents if c.type == "function_result"]
    assert len(results) == 5, results
    texts = [str(c.result if c.result is not None else c.exception) for c in results]
    ran = [t for t in texts if "Ada Lovelace" in t]
    # The framework shows the model a result's structuredContent first: the
    # rejection's {tool, quota, reason, retry_after_ms}.
    rejected = [t for t in texts if '"reason": "rate_limited"' in t]
    assert len(ran) == 2 and len(rejected) == 3, texts
    for t in rejected:
        assert '"tool": "crm__lookup_customer"' in t and '"retry_after_ms": ' in t, t
        assert 'mcp:crm/lookup_customer' in t, t
    # The upstream ran exactly the two admitted calls.
    assert gw.upstream_calls("mcp:crm/lookup_customer") == 2
    state = gw.tool("mcp:crm/lookup_customer")
    assert (state["admitted"], state["rejected"]) == (2, 3)
