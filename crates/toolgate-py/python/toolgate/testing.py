"""Helpers for deterministic tests: a clock that moves only when told to.

Example::

    from toolgate import RateLimit, ToolRateLimitPolicy
    from toolgate.testing import ManualClock

    clock = ManualClock()
    policy = ToolRateLimitPolicy(limits={"t": RateLimit(2, 1.0)}, clock=clock)
    ...
    clock.advance(0.5)   # refills, and wakes exactly the waiters that became due
"""

from ._toolgate import ManualClock

__all__ = ["ManualClock"]
