from __future__ import annotations

import pytest

from toolgate import RateLimit, ToolRateLimitPolicy
from toolgate.testing import ManualClock


def proposal_policy(clock: ManualClock | None = None, **kw: object) -> ToolRateLimitPolicy:
    """The configuration of the original Agent Framework proposal."""
    return ToolRateLimitPolicy(
        limits={
            "lookup_customer": RateLimit(requests=2, per_seconds=1.0, burst=2),
            "get_payment_status": RateLimit(requests=1, per_seconds=1.0, burst=1),
            "search_documents": RateLimit(requests=10, per_seconds=1.0, burst=10),
        },
        clock=clock,
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()
