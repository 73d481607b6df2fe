"""A call's urgency: its ``priority`` class and its ``deadline``, on every surface.

``priority`` is ``"interactive"``, ``"default"`` or ``"batch"``. ``deadline`` is when
the call must have *finished*: a timezone-aware ``datetime``, or a number of seconds
from now (as ``toolgate.mesh`` reads it); at most a day ahead, as on the gateway. A
deadline is fixed when it is given (seconds from *then*) and kept as a wall-clock
time, so one deadline means the same in-process, over HTTP and on the mesh.

:func:`call_options` gives both to every call made inside a ``with`` block (a
context variable, so it follows the code into the tasks it starts): the way to set
them for calls whose signature cannot carry them, such as a decorated tool or a
framework's tool call. A value given to a call itself wins over the block's
priority; of several deadlines the earliest holds.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import math
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, Union, cast

from ._toolgate import MAX_DEADLINE_SECONDS, call_options_used

__all__ = ["CallOptions", "Deadline", "Priority", "call_options", "current", "options", "options_of"]

Priority = Literal["interactive", "default", "batch"]
#: An aware ``datetime``, or seconds from now.
Deadline = Union[dt.datetime, float, int]
PRIORITIES: tuple[str, ...] = ("interactive", "default", "batch")


@dataclass(frozen=True)
class CallOptions:
    """A call's ``priority`` (``None``: not said) and ``deadline`` as Unix seconds on
    the wall clock (``None``: none)."""

    priority: Priority | None = None
    deadline: float | None = None

    def seconds_left(self) -> float | None:
        """Seconds until the deadline now (``0.0`` once it has passed)."""
        if self.deadline is None:
            return None
        return max(self.deadline - time.time(), 0.0)

    def unix_ms(self) -> int | None:
        """The deadline as Unix milliseconds (the HTTP API's and the mesh's form)."""
        return None if self.deadline is None else math.ceil(self.deadline * 1000)

    def over(self, outer: CallOptions) -> CallOptions:
        """These options inside ``outer``: this priority when said, the earliest
        deadline of the two."""
        deadlines = [d for d in (self.deadline, outer.deadline) if d is not None]
        return CallOptions(self.priority or outer.priority, min(deadlines) if deadlines else None)


NO_OPTIONS = CallOptions()
"""The options of a call that names none, outside any :func:`call_options` block."""
_current: contextvars.ContextVar[CallOptions] = contextvars.ContextVar("toolgate_call_options", default=NO_OPTIONS)
current_options = _current.get
"""The options of the enclosing :func:`call_options` blocks: the context variable's
own ``get``, which the admission path calls without a Python frame of its own."""


def check_priority(value: object) -> Priority | None:
    """``value`` as a priority name; ``ValueError`` naming the field otherwise."""
    if value is None:
        return None
    if not isinstance(value, str) or value not in PRIORITIES:
        shown = value[:32] if isinstance(value, str) else value
        raise ValueError(f'priority: {shown!r}: the priority must be "interactive", "default" or "batch"')
    return cast(Priority, value)


def deadline_at(value: object) -> float | None:
    """``value`` (an aware ``datetime`` or seconds from now) as Unix seconds;
    ``ValueError`` naming the field for anything else or more than a day ahead.
    A deadline already past is accepted: the call is then refused at once."""
    if value is None:
        return None
    now = time.time()
    if isinstance(value, dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"deadline: a datetime must be timezone-aware, not {value.isoformat()}")
        at = value.timestamp()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"deadline: {value!r}: must be a finite number of seconds from now, at least 0")
        at = now + float(value)
    else:
        raise ValueError(f"deadline: {type(value).__name__}: must be an aware datetime or seconds from now")
    if at - now > MAX_DEADLINE_SECONDS:
        raise ValueError(f"deadline: {at - now:.0f} s ahead; at most {MAX_DEADLINE_SECONDS:.0f} s ahead is accepted")
    return at


def options(priority: object = None, deadline: object = None) -> CallOptions:
    """The options of one call: its own ``priority`` and ``deadline`` (checked) inside
    the ones of the enclosing :func:`call_options` blocks."""
    if priority is None and deadline is None:
        # The common call names neither: no options to build or merge.
        return _current.get()
    own = CallOptions(check_priority(priority), deadline_at(deadline))
    return own.over(_current.get())


def current() -> CallOptions:
    """The options of the enclosing :func:`call_options` blocks."""
    return _current.get()


def options_of(*sources: object) -> CallOptions:
    """The ``priority`` and ``deadline`` of the first of ``sources`` that carries each
    (a framework's per-call metadata and keyword arguments, or the context object a
    run was given), as a key of a mapping or an attribute of another object, inside
    the enclosing :func:`call_options` blocks."""
    priority: object = None
    deadline: object = None
    for source in sources:
        if source is None:
            continue
        if type(source) is dict or isinstance(source, Mapping):
            if not source:
                continue  # the common case: an empty dict of metadata or kwargs
            p, d = source.get("priority"), source.get("deadline")
        else:
            p, d = getattr(source, "priority", None), getattr(source, "deadline", None)
        if priority is None:
            priority = p
        if deadline is None:
            deadline = d
    if priority is None and deadline is None:
        return _current.get()
    return options(priority, deadline)


@contextmanager
def call_options(*, priority: Priority | None = None, deadline: Deadline | None = None) -> Iterator[CallOptions]:
    """Gives ``priority`` and ``deadline`` to every call admitted inside the block
    (in-process, through a client or on the mesh), unless a call says its own
    priority; a deadline nested inside another is bounded by it (the earliest
    holds). ``deadline`` in seconds counts from entering the block. Raises
    ``ValueError`` for a priority other than the three names, a naive datetime or a
    deadline more than a day ahead::

        with toolgate.call_options(priority="interactive", deadline=2.0):
            await lookup_customer(42)   # a @policy.tool callable
    """
    opts = options(priority, deadline)
    call_options_used()  # from now on, the fast path reads the context variable
    token = _current.set(opts)
    try:
        yield opts
    finally:
        _current.reset(token)
