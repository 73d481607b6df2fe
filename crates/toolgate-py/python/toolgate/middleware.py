"""Microsoft Agent Framework function middleware (``agent-framework-core``).

A :class:`~toolgate.ToolRateLimitPolicy` *is* the middleware: pass it in
``Agent(..., middleware=[policy])``. For each tool call the framework makes, it

* leaves tools without a policy exactly as they would be without it (it just calls
  ``call_next()``), unless ``unknown_tools = "deny"``;
* asks the Rust engine for admission (waiting on the event loop in wait mode);
* on rejection sets ``context.result`` to :func:`toolgate.rejection_result` — JSON
  with ``"rejected_by": "toolgate"``, the tool, reason, quota and ``retry_after`` —
  and returns *without* calling ``call_next()``: the tool never runs, the model sees
  why, and the framework does not count it as a tool error;
* when admitted, calls ``call_next()`` once (no retries) and completes the permit
  with the outcome and latency; a cancelled call releases its permit, and a call
  cancelled while waiting leaves the accounting as if it had never come;
* fails closed with ``agent_framework.MiddlewareFailure`` when admission itself
  cannot be decided (for instance a shared store that cannot be reached).

Concurrent tool calls stay concurrent: nothing here serialises them; only the
engine's short critical sections are shared.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ._policy import _finish, rejection_result
from ._toolgate import Permit

if TYPE_CHECKING:
    from ._policy import ToolRateLimitPolicy

__all__ = ["process"]


async def process(policy: ToolRateLimitPolicy, context: Any, call_next: Callable[[], Awaitable[None]]) -> None:
    """The body of ``ToolRateLimitPolicy.process``."""
    name: str = context.function.name
    if not policy.governs(name):
        await call_next()
        return
    tenant = policy.tenant_of(context) if policy.tenant_of is not None else None
    try:
        decision = await policy.decide(name, tenant=tenant)
    except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
        raise
    except Exception as e:
        from agent_framework import MiddlewareFailure

        raise MiddlewareFailure(f"toolgate could not decide admission for {name!r}: {e}") from e
    if not isinstance(decision, Permit):
        if decision.store_unavailable:
            # The shared store (Redis) could not decide and the policy fails closed:
            # that is not the tool's rate limit, so the framework is told.
            from agent_framework import MiddlewareFailure

            raise MiddlewareFailure(f"toolgate could not decide admission for {name!r}: the quota store did not answer")
        context.result = rejection_result(decision)
        return
    try:
        await call_next()
    except BaseException as e:
        _finish(decision, e)
        raise
    decision.complete("success")
