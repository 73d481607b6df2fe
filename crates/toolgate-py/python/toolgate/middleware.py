"""Microsoft Agent Framework function middleware (``agent-framework-core``).

A :class:`~toolgate.ToolRateLimitPolicy` *is* the middleware: pass it in
``Agent(..., middleware=[policy])``. For each tool call the framework makes, it

* leaves tools without a policy exactly as they would be without it (it just calls
  ``call_next()``), unless ``unknown_tools = "deny"``;
* asks the Rust engine for admission (waiting on the event loop in wait mode), with
  the call's ``priority`` and ``deadline`` taken from ``context.metadata`` (set by an
  earlier middleware), else ``context.kwargs`` (``agent.run(...,
  function_invocation_kwargs={"priority": "interactive", "deadline": 5.0})``), else
  an enclosing :func:`toolgate.call_options`; a call that cannot finish by its
  deadline is rejected at once (``max_wait_exceeded`` by the quota ``deadline``) and
  an invalid value fails closed as below;
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

from collections.abc import Awaitable, Callable
from typing import Any

from ._policy import ToolRateLimitPolicy

__all__ = ["process"]


async def process(policy: ToolRateLimitPolicy, context: Any, call_next: Callable[[], Awaitable[None]]) -> None:
    """``policy.process(context, call_next)``: the function middleware described
    above, for a caller that holds the policy and the call apart."""
    await policy.process(context, call_next)
