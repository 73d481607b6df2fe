"""``ToolRateLimitPolicy``: the Python face of the engine.

Every decision is made by the Rust engine. A call that must wait is a Rust future
polled from the caller's event loop by :func:`_wait`, with an asyncio timer for the
next refill and a thread-safe wake-up when the queue moves: no thread is blocked
and the loop never is. Cancelling the awaiting task drops the Rust future at once,
so a cancelled waiter leaves the accounting exactly as if it had never come.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from ._errors import AdmissionRejected
from ._toolgate import Engine, ManualClock, Permit, Rejection, Waiting

if TYPE_CHECKING:
    from typing_extensions import ParamSpec

    P = ParamSpec("P")

T = TypeVar("T")
log = logging.getLogger("toolgate")

__all__ = ["Decision", "RateLimit", "ToolRateLimitPolicy", "rejection_result"]

def _field_error(field: str, value: object, rule: str) -> ValueError:
    return ValueError(f"{field}: {value!r}: {rule}")


def _seconds(field: str, value: object, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _field_error(field, value, "must be a finite number of seconds")
    if value < 0 or (positive and value == 0):
        raise _field_error(field, value, "must be greater than 0" if positive else "must be at least 0")
    return float(value)


def _count(field: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _field_error(field, value, "must be a whole number")
    if value < 1:
        raise _field_error(field, value, "must be at least 1")
    return value


def _nanos(seconds: float) -> str:
    return f"{max(1, round(seconds * 1e9))}ns"


@dataclass(frozen=True)
class RateLimit:
    """``requests`` per ``per_seconds``, with bursts of up to ``burst`` (default
    ``requests``): a token bucket that starts full and refills continuously.

    Raises ``ValueError`` naming the field for invalid values.
    """

    requests: int
    per_seconds: float = 1.0
    burst: int | None = None

    def __post_init__(self) -> None:
        _count("requests", self.requests)
        _seconds("per_seconds", self.per_seconds, positive=True)
        if self.burst is not None:
            _count("burst", self.burst)

    def to_config(self) -> dict[str, Any]:
        """The equivalent tool quota in the config format (contract §3)."""
        cfg: dict[str, Any] = {"rate": f"{self.requests}/{_nanos(self.per_seconds)}"}
        if self.burst is not None:
            cfg["burst"] = self.burst
        return cfg


@dataclass(frozen=True)
class Decision:
    """One admission decision, as given to the ``on_decision`` hook and logged.

    Never carries the call's arguments.
    """

    tool: str
    admitted: bool
    waited: float = 0.0
    reason: str | None = None
    quota: str | None = None
    retry_after: float | None = None
    tenant: str | None = None


def rejection_result(rejection: Rejection | AdmissionRejected) -> str:
    """The text a model receives instead of a rejected tool's result: JSON naming the
    tool, the reason, the quota and ``retry_after``, marked ``"rejected_by":
    "toolgate"`` so that it cannot be mistaken for the tool's own output."""
    if not isinstance(rejection, Rejection):
        rejection = Rejection(rejection.tool, rejection.quota, rejection.reason, rejection.retry_after)
    return rejection.to_json()


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


async def _wait(waiting: Waiting) -> Permit | Rejection:
    """Drives a waiting call on the running loop until it is decided."""
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


class _Guard:
    """``async with policy.guard("tool"):`` — admits on entry (raising
    ``AdmissionRejected``), completes the permit on exit."""

    __slots__ = ("_args", "_permit", "_policy")

    def __init__(self, policy: ToolRateLimitPolicy, args: tuple[str, str | None, int, float | None]) -> None:
        self._policy = policy
        self._args = args
        self._permit: Permit | None = None

    async def __aenter__(self) -> Permit:
        tool, tenant, tokens, max_wait = self._args
        self._permit = await self._policy.admit(tool, tenant=tenant, tokens=tokens, max_wait=max_wait)
        return self._permit

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._permit is not None:
            _finish(self._permit, e)


def _finish(permit: Permit, error: BaseException | None) -> None:
    if error is None:
        permit.complete("success")
    elif isinstance(error, asyncio.CancelledError):
        permit.release()
    else:
        permit.complete("error")


class ToolRateLimitPolicy:
    """Per-tool admission policy, decided by toolgate's Rust engine.

    ``limits`` maps tool names to a :class:`RateLimit` or to a tool table of the
    config format (``{"rate": "2/s", "concurrency": 4, ...}``). ``on_limit`` and
    ``max_wait`` apply to the tools of ``limits``. ``store=None`` keeps the quotas in
    this process; ``store="redis://host:port"`` keeps them in Redis, so that every
    process (and gateway) on the same Redis obeys one quota. With a store, quotas are
    checked on Redis (one round trip per call, 50 ms timeout, failing closed); a
    ``[store]`` table in ``from_toml``/``from_dict`` sets the other store options.

    The policy is, at once:

    * Microsoft Agent Framework function middleware (``Agent(middleware=[policy])``);
    * a decorator (``@policy`` or ``@policy.limit("tool")``) and an async context
      manager (``async with policy.guard("tool")``) for any async callable;
    * an engine: ``await policy.admit(tool)``, ``await policy.decide(tool)``,
      ``policy.try_admit(tool)``.

    Decisions go to the ``toolgate`` logger (admitted and waited at DEBUG, rejected
    at INFO) and to ``on_decision`` when given; arguments are never logged.
    """

    def __init__(
        self,
        limits: Mapping[str, RateLimit | Mapping[str, Any]] | None = None,
        on_limit: Literal["reject", "wait"] = "reject",
        max_wait: float = 1.0,
        store: str | None = None,
        *,
        unknown_tools: Literal["allow", "deny"] = "allow",
        clock: ManualClock | None = None,
        on_decision: Callable[[Decision], None] | None = None,
        tenant_of: Callable[[Any], str | None] | None = None,
    ) -> None:
        config = _limits_config(limits, on_limit, max_wait, store, unknown_tools)
        self._init(Engine.from_json(json.dumps(config), clock=clock), clock, on_decision, tenant_of)

    def _init(
        self,
        engine: Engine,
        clock: ManualClock | None,
        on_decision: Callable[[Decision], None] | None,
        tenant_of: Callable[[Any], str | None] | None,
    ) -> None:
        self._engine = engine
        self._tools = frozenset(engine.tools())
        self._deny_unknown = engine.deny_unknown
        self.clock = clock
        self.on_decision = on_decision
        self.tenant_of = tenant_of
        _register_middleware(type(self))

    # --- construction from the config format ---

    @classmethod
    def from_toml(
        cls,
        path_or_text: str | os.PathLike[str],
        *,
        clock: ManualClock | None = None,
        on_decision: Callable[[Decision], None] | None = None,
        tenant_of: Callable[[Any], str | None] | None = None,
    ) -> ToolRateLimitPolicy:
        """A policy from a TOML file or TOML text with the full config (pools,
        tokens, concurrency, partitions, waiting, shadow mode)."""
        text = _read_if_path(path_or_text)
        return cls._from_engine(Engine.from_toml(text, clock=clock), clock, on_decision, tenant_of)

    @classmethod
    def from_dict(
        cls,
        config: Mapping[str, Any],
        *,
        clock: ManualClock | None = None,
        on_decision: Callable[[Decision], None] | None = None,
        tenant_of: Callable[[Any], str | None] | None = None,
    ) -> ToolRateLimitPolicy:
        """A policy from a dict with the structure of the TOML config."""
        try:
            text = json.dumps(config)
        except (TypeError, ValueError) as e:
            raise ValueError(f"config: not representable as TOML/JSON values: {e}") from None
        return cls._from_engine(Engine.from_json(text, clock=clock), clock, on_decision, tenant_of)

    @classmethod
    def _from_engine(
        cls,
        engine: Engine,
        clock: ManualClock | None,
        on_decision: Callable[[Decision], None] | None,
        tenant_of: Callable[[Any], str | None] | None,
    ) -> ToolRateLimitPolicy:
        self = cls.__new__(cls)
        self._init(engine, clock, on_decision, tenant_of)
        return self

    # --- admission ---

    @property
    def tools(self) -> frozenset[str]:
        """The tools that have a policy."""
        return self._tools

    def governs(self, tool: str) -> bool:
        """Whether calls to ``tool`` go through admission (tools without a policy
        are untouched unless ``unknown_tools = "deny"``)."""
        return tool in self._tools or self._deny_unknown

    def try_admit(self, tool: str, *, tenant: str | None = None, tokens: int = 0) -> Permit | Rejection:
        """Admits now or rejects now, never waits. Returns the value, raises nothing."""
        r = self._engine.try_admit(tool, tenant, tokens)
        if self.on_decision is not None or log.isEnabledFor(logging.DEBUG if isinstance(r, Permit) else logging.INFO):
            self._report(tool, r, tenant)
        return r

    async def decide(
        self, tool: str, *, tenant: str | None = None, tokens: int = 0, max_wait: float | None = None
    ) -> Permit | Rejection:
        """Admits the call, waiting in FIFO order when the tool's ``on_limit`` is
        ``"wait"`` (or ``max_wait`` is given). Returns a ``Permit`` or a
        ``Rejection``; raises nothing for a rejection.

        Cancel safety: cancelling the awaiting task while it waits leaves the
        accounting exactly as if the call had never come.
        """
        r = self._engine.admit(tool, tenant, tokens, max_wait)
        decided = await _wait(r) if isinstance(r, Waiting) else r
        if self.on_decision is not None or log.isEnabledFor(logging.DEBUG if isinstance(decided, Permit) else logging.INFO):
            self._report(tool, decided, tenant)
        return decided

    async def admit(
        self, tool: str, *, tenant: str | None = None, tokens: int = 0, max_wait: float | None = None
    ) -> Permit:
        """As :meth:`decide`, but raises :class:`AdmissionRejected` when rejected."""
        r = await self.decide(tool, tenant=tenant, tokens=tokens, max_wait=max_wait)
        if isinstance(r, Rejection):
            raise AdmissionRejected.from_rejection(r)
        return r

    def guard(
        self, tool: str, *, tenant: str | None = None, tokens: int = 0, max_wait: float | None = None
    ) -> _Guard:
        """An async context manager admitting one call to ``tool``."""
        return _Guard(self, (tool, tenant, tokens, max_wait))

    def limit(
        self, tool: str | None = None, *, tenant: str | None = None, tokens: int = 0
    ) -> Callable[[Callable[P, Awaitable[T]]], Callable[P, Awaitable[T]]]:
        """A decorator admitting each call of an async callable as ``tool``
        (default: the function's ``__name__``); a rejected call raises
        :class:`AdmissionRejected` and the function does not run."""

        def decorate(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
            name = tool or getattr(fn, "__name__", None)
            if not name:
                raise ValueError("tool: cannot name the tool of this callable; pass tool=")

            @functools.wraps(fn)
            async def admitted(*args: P.args, **kwargs: P.kwargs) -> T:
                if name not in self._tools and not self._deny_unknown:
                    return await fn(*args, **kwargs)
                permit = await self.admit(name, tenant=tenant, tokens=tokens)
                try:
                    result = await fn(*args, **kwargs)
                except BaseException as e:
                    _finish(permit, e)
                    raise
                permit.complete("success")
                return result

            return admitted

        return decorate

    def __call__(self, context: FunctionInvocationContext, call_next: Any = None) -> Any:
        """``@policy`` decorates an async callable; ``policy(context, call_next)`` is
        the Agent Framework function middleware."""
        if call_next is None:
            if not callable(context):
                raise TypeError("a ToolRateLimitPolicy decorates async callables")
            return self.limit()(context)
        return self.process(context, call_next)

    def process(self, context: FunctionInvocationContext, call_next: Callable[[], Awaitable[None]]) -> Awaitable[None]:
        """Agent Framework ``FunctionMiddleware.process``: see :mod:`toolgate.middleware`."""
        return _af_process(self, context, call_next)

    def state(self, tool: str, *, tenant: str | None = None) -> dict[str, Any] | None:
        """The live state of ``tool``: ``in_flight``, ``waiting``, ``admitted``,
        ``rejected`` and each quota's ``available`` capacity."""
        return self._engine.tool_state(tool, tenant)

    # --- observability ---

    def _report(self, tool: str, r: Permit | Rejection, tenant: str | None) -> None:
        hook = self.on_decision
        if isinstance(r, Permit):
            waited = r.waited
            d = Decision(tool, True, waited=waited, tenant=tenant)
            if waited:
                log.debug("toolgate: %s admitted after waiting %.3fs", tool, waited)
            else:
                log.debug("toolgate: %s admitted", tool)
        else:
            rej = r
            d = Decision(tool, False, reason=rej.reason, quota=rej.quota, retry_after=rej.retry_after, tenant=tenant)
            log.info(
                "toolgate: %s rejected: %s by %s (retry_after=%s)", tool, rej.reason, rej.quota, rej.retry_after
            )
        if hook is not None:
            hook(d)

    def __repr__(self) -> str:
        return f"ToolRateLimitPolicy(tools={sorted(self._tools)!r})"


if TYPE_CHECKING:
    from agent_framework import FunctionInvocationContext
else:
    FunctionInvocationContext = Any


def _limits_config(
    limits: Mapping[str, RateLimit | Mapping[str, Any]] | None,
    on_limit: str,
    max_wait: float,
    store: str | None,
    unknown_tools: str,
) -> dict[str, Any]:
    if on_limit not in ("reject", "wait"):
        raise _field_error("on_limit", on_limit, 'must be "reject" or "wait"')
    if unknown_tools not in ("allow", "deny"):
        raise _field_error("unknown_tools", unknown_tools, 'must be "allow" or "deny"')
    wait = _seconds("max_wait", max_wait)
    store_url = _check_store(store)
    if limits is None:
        limits = {}
    if not isinstance(limits, Mapping):
        raise _field_error("limits", limits, "must be a mapping of tool names to RateLimit")
    tools: dict[str, Any] = {}
    for name, limit in limits.items():
        if not isinstance(name, str) or not name:
            raise _field_error("limits", name, "tool names must be non-empty strings")
        if isinstance(limit, RateLimit):
            tool = limit.to_config()
        elif isinstance(limit, Mapping):
            tool = dict(limit)
        else:
            raise _field_error(f"limits[{name!r}]", limit, "must be a RateLimit or a tool config dict")
        tool.setdefault("on_limit", on_limit)
        tool.setdefault("max_wait", _nanos(wait) if wait else "0s")
        tools[name] = tool
    config: dict[str, Any] = {"unknown_tools": unknown_tools, "tools": tools}
    if store_url is not None:
        config["store"] = {"url": store_url}
    return config


def _check_store(store: str | None) -> str | None:
    if store is None or store == "memory":
        return None
    if isinstance(store, str) and store.startswith(("redis://", "rediss://")):
        return store
    raise _field_error("store", store, 'must be None, "memory" or a "redis://…" URL')


def _read_if_path(path_or_text: str | os.PathLike[str]) -> str:
    if isinstance(path_or_text, os.PathLike):
        return Path(path_or_text).read_text(encoding="utf-8")
    if not isinstance(path_or_text, str):
        raise _field_error("path_or_text", path_or_text, "must be a path or TOML text")
    looks_like_toml = "\n" in path_or_text or "=" in path_or_text or "[" in path_or_text
    if not looks_like_toml:
        return Path(path_or_text).read_text(encoding="utf-8")
    return path_or_text


def _register_middleware(cls: type) -> None:
    """Makes ``isinstance(policy, agent_framework.FunctionMiddleware)`` true when the
    framework is loaded (it is an ABC). Without it the framework still recognises the
    policy as function middleware through ``__call__``'s annotated signature."""
    af = sys.modules.get("agent_framework")
    base = getattr(af, "FunctionMiddleware", None) if af is not None else None
    if base is not None and not issubclass(cls, base):
        base.register(cls)


from .middleware import process as _af_process  # noqa: E402  (middleware.py imports this module)
