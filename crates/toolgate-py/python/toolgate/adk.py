"""Google ADK (``google-adk``): ``RateLimitPlugin(policy)``, a ``BasePlugin`` that puts
every tool call of a runner under a :class:`~toolgate.ToolRateLimitPolicy`.

Pass it to the runner (``InMemoryRunner(agent, plugins=[RateLimitPlugin(policy)])``
or ``Runner(..., plugins=[...])``). For each tool call the runner makes:

* ``before_tool_callback`` asks the engine for admission, waiting on the event loop
  when the tool's policy says so (``on_limit="wait"``, ``ToolRateLimit(behavior=
  "wait")``). A rejected call is answered with the rejection as the tool's result —
  ``{"rejected_by": "toolgate", "tool", "reason", "quota", "retry_after",
  "message"}`` — so the tool body never runs and the model reads why;
* ``after_tool_callback`` completes the permit with ``success`` and the latency;
* ``on_tool_error_callback`` completes it with ``error`` (which feeds the circuit
  breaker, and pauses the tool when the exception carries the upstream's
  ``Retry-After``) and lets the error propagate; a cancelled call releases it;
* tools without a policy are left alone (unless ``unknown_tools = "deny"``).

When admission itself cannot be decided (a shared store that does not answer), the
plugin raises ``RuntimeError``: it fails closed rather than run the tool or tell the
model a rate limit it does not have.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext

from ._permits import finish
from ._policy import ToolRateLimitPolicy
from ._toolgate import Permit

__all__ = ["RateLimitPlugin"]


class RateLimitPlugin(BasePlugin):  # type: ignore[misc]
    """Admission control for a Google ADK runner's tool calls (see the module).

    ``tenant_of(tool_context)`` picks the tenant of a call for quotas partitioned
    per tenant (for instance ``lambda ctx: ctx.user_id``).
    """

    def __init__(
        self,
        policy: ToolRateLimitPolicy,
        *,
        name: str = "toolgate",
        tenant_of: Callable[[ToolContext], str | None] | None = None,
    ) -> None:
        super().__init__(name=name)
        self.policy = policy
        self.tenant_of = tenant_of
        # Admitted calls by their context, which is kept alive with the permit so
        # that its id cannot be reused before the call ends.
        self._held: dict[int, tuple[ToolContext, Permit]] = {}

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        name = tool.name
        if not self.policy.governs(name):
            return None
        tenant = self.tenant_of(tool_context) if self.tenant_of is not None else None
        decision = await self.policy.decide(name, tenant=tenant)
        if isinstance(decision, Permit):
            self._held[id(tool_context)] = (tool_context, decision)
            return None
        if decision.store_unavailable:
            raise RuntimeError(f"toolgate could not decide admission for {name!r}: the quota store did not answer")
        result: dict[str, Any] = json.loads(decision.to_json())
        return result

    async def after_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext, result: dict[str, Any]
    ) -> dict[str, Any] | None:
        held = self._held.pop(id(tool_context), None)
        if held is not None:
            finish(held[1], None)
        return None

    async def on_tool_error_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext, error: BaseException
    ) -> dict[str, Any] | None:
        held = self._held.pop(id(tool_context), None)
        if held is not None:
            finish(held[1], error)  # error, or released when cancelled
        return None
