"""toolgate: admission control and flow control for AI-agent tool calls.

Every admission decision is made by toolgate's Rust engine before the tool runs.

    from toolgate import RateLimit, ToolRateLimitPolicy, AdmissionRejected

    policy = ToolRateLimitPolicy(
        limits={"lookup_customer": RateLimit(requests=2, per_seconds=1.0, burst=2)},
        on_limit="reject",
    )

The policy is Microsoft Agent Framework function middleware, a decorator and an
async context manager. See ``toolgate.middleware``, ``toolgate.openai_agents``,
``toolgate.langchain`` and ``toolgate.testing``. ``Client`` and ``AsyncClient`` talk
to a running gateway (``toolgate serve``). ``call_options(priority=..., deadline=...)``
gives a priority class and a deadline to every call made inside it, on every surface.
"""

from ._async_client import AsyncClient, AsyncLease, AsyncReservation
from ._client import Client, Lease, Reservation
from ._config import MAX_WAIT_SECONDS, RateLimit, ToolRateLimit
from ._errors import AdmissionRejected, ClientError
from ._gateway import Invocation
from ._permits import rejection_result
from ._policy import Decision, ToolRateLimitPolicy
from ._toolgate import MAX_DEADLINE_SECONDS, Permit, Rejection, __version__
from ._urgency import CallOptions, call_options

__all__ = [
    "AdmissionRejected",
    "AsyncClient",
    "AsyncLease",
    "AsyncReservation",
    "CallOptions",
    "Client",
    "ClientError",
    "Decision",
    "Invocation",
    "Lease",
    "MAX_DEADLINE_SECONDS",
    "MAX_WAIT_SECONDS",
    "Permit",
    "RateLimit",
    "Rejection",
    "Reservation",
    "ToolRateLimit",
    "ToolRateLimitPolicy",
    "__version__",
    "call_options",
    "rejection_result",
]
