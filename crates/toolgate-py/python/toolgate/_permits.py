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
import email.utils
import functools
import math
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TypeVar

from ._errors import AdmissionRejected
from ._toolgate import Permit, Rejection, Waiting

T = TypeVar("T")

__all__ = ["Guard", "finish", "hold", "rejection_result", "upstream_retry_after", "wait"]

#: The longest upstream pause taken from an exception, in seconds; the engine cuts
#: it further to the tool's ``max_pause`` (5 minutes unless configured).
_LONGEST_PAUSE = 86_400.0


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
    none, released without an outcome when the call was cancelled, ``error`` else —
    with the upstream's ``Retry-After`` when ``error`` carries one (see
    :func:`upstream_retry_after`), which pauses the tool."""
    if error is None:
        permit.complete("success")
    elif isinstance(error, asyncio.CancelledError):
        permit.release()
    else:
        permit.complete("error", retry_after=upstream_retry_after(error))


def upstream_retry_after(error: BaseException) -> float | None:
    """The pause, in seconds, an upstream asked for in the exception a tool raised:

    * a numeric ``retry_after`` attribute (seconds) on the exception; or
    * a ``429`` or ``503`` status (``status_code``, ``status`` or ``code``, on the
      exception or on its ``response``) with a ``Retry-After`` header
      (delta-seconds or an HTTP-date, in ``headers`` of either) — the shape of
      ``httpx.HTTPStatusError``, ``requests.HTTPError``, ``aiohttp``'s
      ``ClientResponseError`` and the OpenAI SDK's ``RateLimitError``.

    ``None`` when there is none (or it cannot be read). ``AdmissionRejected`` of a
    nested call is not an upstream's answer and gives ``None``."""
    if isinstance(error, AdmissionRejected):
        return None
    explicit = getattr(error, "retry_after", None)
    if isinstance(explicit, (int, float)) and not isinstance(explicit, bool):
        return _bounded(float(explicit))
    response = getattr(error, "response", None)
    if _status(error) not in (429, 503) and _status(response) not in (429, 503):
        return None
    for holder in (error, response):
        value = _header(getattr(holder, "headers", None), "retry-after")
        if value is not None:
            return _parse_retry_after(value)
    return None


def _status(obj: object) -> int | None:
    for name in ("status_code", "status", "code"):
        value = getattr(obj, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _header(headers: object, name: str) -> str | None:
    get = getattr(headers, "get", None)
    if get is None:
        return None
    try:
        value = get(name)
        if value is None:
            value = get(name.title())
    except Exception:  # a headers object of an unknown kind: no header
        return None
    return value if isinstance(value, str) else None


def _parse_retry_after(value: str) -> float | None:
    v = value.strip()
    if v.isdigit():
        return _bounded(float(v))
    try:
        at = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError, IndexError):
        return None
    return _bounded(at.timestamp() - time.time())


def _bounded(seconds: float) -> float | None:
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), _LONGEST_PAUSE)


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
