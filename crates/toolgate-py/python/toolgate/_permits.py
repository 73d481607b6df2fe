"""A permit's life outside the engine, shared by the policy and every adapter: waiting
for it on the event loop, holding it while the call runs, finishing it with the
call's outcome, and the text a model reads instead of a rejected tool's result.

A call that must wait is a Rust future polled from the caller's event loop by
:func:`wait`, with an asyncio timer for the next refill and a thread-safe wake-up when
the queue moves: no thread is blocked and the loop never is. Cancelling the awaiting
task drops the Rust future at once, so a cancelled waiter leaves the accounting
exactly as if it had never come.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TypeVar

from ._errors import AdmissionRejected
from ._toolgate import Permit, Rejection, Waiting

T = TypeVar("T")

__all__ = ["Guard", "finish", "hold", "rejection_result", "wait"]


class Guard:
    """``async with policy.guard("tool"):`` — admits on entry (raising
    ``AdmissionRejected``), completes the permit on exit."""

    __slots__ = ("_admit", "_permit")

    def __init__(self, admit: Callable[[], Awaitable[Permit]]) -> None:
        self._admit = admit
        self._permit: Permit | None = None

    async def __aenter__(self) -> Permit:
        self._permit = await self._admit()
        return self._permit

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._permit is not None:
            finish(self._permit, e)


def rejection_result(rejection: Rejection | AdmissionRejected) -> str:
    """The text a model receives instead of a rejected tool's result: JSON naming the
    tool, the reason, the quota and ``retry_after``, marked ``"rejected_by":
    "toolgate"`` so that it cannot be mistaken for the tool's own output."""
    if not isinstance(rejection, Rejection):
        rejection = Rejection(rejection.tool, rejection.quota, rejection.reason, rejection.retry_after)
    return rejection.to_json()


async def wait(waiting: Waiting) -> Permit | Rejection:
    """Drives a waiting call on the running loop until it is decided.

    Cancel safety: cancelling the awaiting task closes ``waiting``, which leaves the
    accounting exactly as if the call had never come."""
    loop = asyncio.get_running_loop()
    try:
        while True:
            fut: asyncio.Future[None] = loop.create_future()
            step = waiting.poll(functools.partial(loop.call_soon_threadsafe, _wake, fut))
            if step is None:
                await fut
            elif isinstance(step, float):
                timer = loop.call_later(step, _wake, fut)
                try:
                    await fut
                finally:
                    timer.cancel()
            else:
                return step
    finally:
        waiting.close()


async def hold(permit: Permit, call: Callable[[], Awaitable[T]]) -> T:
    """Runs ``call`` once while ``permit`` is held, then finishes the permit with its
    outcome (see :func:`finish`); the call's result or exception passes through."""
    try:
        result = await call()
    except BaseException as e:
        finish(permit, e)
        raise
    permit.complete("success")
    return result


def finish(permit: Permit, error: BaseException | None) -> None:
    """Ends the permit of a call that ended with ``error``: ``success`` when there is
    none, released without an outcome when the call was cancelled, ``error`` else."""
    if error is None:
        permit.complete("success")
    elif isinstance(error, asyncio.CancelledError):
        permit.release()
    else:
        permit.complete("error")


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
