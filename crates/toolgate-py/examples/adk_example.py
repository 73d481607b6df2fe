"""Google ADK with toolgate, offline: a scripted model asks for five weather lookups at
once; the tool allows two per second, so two run and the model reads three rejections.

Run: python examples/adk_example.py
"""

import asyncio

from google.adk.agents import Agent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.genai import types

from toolgate import ToolRateLimit, ToolRateLimitPolicy
from toolgate.adk import RateLimitPlugin

policy = ToolRateLimitPolicy(limits={"get_weather": ToolRateLimit(rpm=2, per=1.0, behavior="error")})


async def get_weather(city: str) -> dict:
    """The weather of a city."""
    return {"city": city, "weather": "sunny"}


class ScriptedModel(BaseLlm):
    """An offline stand-in for a model."""

    model: str = "scripted"

    async def generate_content_async(self, llm_request, stream=False):
        answers = [p.function_response for c in llm_request.contents for p in c.parts or [] if p.function_response]
        if not answers:  # first turn: five lookups at once
            calls = [types.Part(function_call=types.FunctionCall(id=f"call_{i}", name="get_weather", args={"city": city}))
                     for i, city in enumerate(["Oslo", "Lima", "Pune", "Kyiv", "Nuuk"])]
            yield LlmResponse(content=types.Content(role="model", parts=calls))
        else:  # second turn: report what came back
            rejected = [a.response for a in answers if a.response.get("rejected_by") == "toolgate"]
            lines = [f"{len(answers) - len(rejected)} lookups ran, {len(rejected)} were rejected:"]
            lines += [f"- {r['tool']}: {r['reason']}, retry after {r['retry_after']:.1f}s" for r in rejected]
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text="\n".join(lines))]))


async def main() -> None:
    agent = Agent(name="weather", model=ScriptedModel(), tools=[get_weather])
    runner = InMemoryRunner(agent=agent, app_name="weather", plugins=[RateLimitPlugin(policy)])
    session = await runner.session_service.create_session(app_name="weather", user_id="u1")
    question = types.Content(role="user", parts=[types.Part(text="Weather in five cities?")])
    async for event in runner.run_async(user_id="u1", session_id=session.id, new_message=question):
        if event.content and event.content.parts and event.content.parts[0].text:
            print(event.content.parts[0].text)


if __name__ == "__main__":
    asyncio.run(main())
