"""Adapters for the OpenAI Agents SDK (``openai-agents``).

Two shapes, both leaving the model a readable rejection (JSON with
``"rejected_by": "toolgate"``, the tool, reason, quota and ``retry_after``) instead of
the tool's output, so a rejected tool never runs:

* :func:`admission_guardrail` — a tool *input guardrail*. It decides with
  ``try_admit`` (fail fast, never waits) and rejects with
  ``ToolGuardrailFunctionOutput.reject_content``. A guardrail cannot hold a permit
  while the tool runs, so concurrency limits and token reconciliation need the
  wrapper below.
* :func:`limit_tool` / :func:`limit_tools` — wrap a ``FunctionTool``'s
  ``on_invoke_tool``: admission (waiting on the event loop in wait mode), the tool
  body, then completion of the permit. Use this for ``on_limit="wait"``.

Both read a call's ``priority`` and ``deadline`` from the run's context
(``Runner.run(agent, input, context=...)``: keys of a mapping or attributes of an
object), else from an enclosing :func:`toolgate.call_options`.

Example::

    from agents import Agent, function_tool
    from toolgate.openai_agents import limit_tools

    agent = Agent(name="support", tools=limit_tools(policy, [lookup_customer, search_documents]))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from agents import FunctionTool, ToolGuardrailFunctionOutput, ToolInputGuardrailData, tool_input_guardrail
from agents.tool_guardrails import ToolInputGuardrail

from ._permits import hold, rejection_result
from ._policy import ToolRateLimitPolicy
from ._toolgate import Permit
from ._urgency import options_of

__all__ = ["admission_guardrail", "limit_tool", "limit_tools"]


def admission_guardrail(policy: ToolRateLimitPolicy) -> ToolInputGuardrail[Any]:
    """A tool input guardrail admitting each call through ``policy`` (fail fast)."""

    @tool_input_guardrail(name="toolgate_admission")
    def toolgate_admission(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        name = data.context.tool_name
        if not policy.governs(name):
            return ToolGuardrailFunctionOutput.allow()
        tenant = policy.tenant_of(data.context) if policy.tenant_of is not None else None
        o = options_of(getattr(data.context, "context", None))
        r = policy.try_admit(name, tenant=tenant, priority=o.priority, deadline=o.seconds_left())
        if isinstance(r, Permit):
            r.complete()
            return ToolGuardrailFunctionOutput.allow({"admitted": True})
        return ToolGuardrailFunctionOutput.reject_content(rejection_result(r), output_info=r.to_dict())

    return toolgate_admission


def limit_tool(policy: ToolRateLimitPolicy, tool: FunctionTool) -> FunctionTool:
    """``tool`` with admission around its ``on_invoke_tool`` (honours wait mode and
    holds the permit while the tool runs)."""
    invoke = tool.on_invoke_tool
    name = tool.name

    async def on_invoke_tool(ctx: Any, arguments: str) -> Any:
        if not policy.governs(name):
            return await invoke(ctx, arguments)
        tenant = policy.tenant_of(ctx) if policy.tenant_of is not None else None
        o = options_of(getattr(ctx, "context", None))
        r = await policy.decide(name, tenant=tenant, priority=o.priority, deadline=o.seconds_left())
        if not isinstance(r, Permit):
            return rejection_result(r)
        return await hold(r, lambda: invoke(ctx, arguments))

    return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)


def limit_tools(policy: ToolRateLimitPolicy, tools: Iterable[Any]) -> list[Any]:
    """Every ``FunctionTool`` of ``tools`` wrapped by :func:`limit_tool`; other tools
    unchanged."""
    return [limit_tool(policy, t) if isinstance(t, FunctionTool) else t for t in tools]
