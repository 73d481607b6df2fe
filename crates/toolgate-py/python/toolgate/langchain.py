"""Adapter for LangChain v1 agents (``langchain.agents.create_agent``).

:class:`AdmissionMiddleware` is an ``AgentMiddleware`` whose ``awrap_tool_call``
asks the policy before the tool runs. A rejected call returns an error
``ToolMessage`` (``status="error"``) whose content is the rejection JSON
(``"rejected_by": "toolgate"``, tool, reason, quota, ``retry_after``), and the tool
never runs. An admitted call runs once (no retries) and completes its permit. A
call's ``priority`` and ``deadline`` come from the run's context
(``agent.ainvoke(..., context=...)``: keys of a mapping or attributes of an object),
else from an enclosing :func:`toolgate.call_options`.

Example::

    from langchain.agents import create_agent
    from toolgate.langchain import AdmissionMiddleware

    agent = create_agent(model, tools=[lookup_customer], middleware=[AdmissionMiddleware(policy)])
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import ToolMessage

from ._permits import hold, rejection_result
from ._policy import ToolRateLimitPolicy
from ._toolgate import Permit
from ._urgency import options_of

__all__ = ["AdmissionMiddleware"]


class AdmissionMiddleware(AgentMiddleware):
    """Admission control for every tool call of a LangChain agent."""

    def __init__(self, policy: ToolRateLimitPolicy) -> None:
        super().__init__()
        self.policy = policy

    @property
    def name(self) -> str:
        return "toolgate"

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        call = request.tool_call
        name = call["name"]
        policy = self.policy
        if not policy.governs(name):
            return await handler(request)
        tenant = policy.tenant_of(request) if policy.tenant_of is not None else None
        o = options_of(getattr(getattr(request, "runtime", None), "context", None))
        r = await policy.decide(name, tenant=tenant, priority=o.priority, deadline=o.seconds_left())
        if not isinstance(r, Permit):
            return ToolMessage(
                content=rejection_result(r),
                tool_call_id=call["id"],
                name=name,
                status="error",
                artifact=r.to_dict(),
            )
        return await hold(r, lambda: handler(request))
