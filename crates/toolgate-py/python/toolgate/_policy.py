"""``ToolRateLimitPolicy``: the Python face of the engine.

Every decision is made by the Rust engine; waiting for a permit, holding it while
the call runs and finishing it are :mod:`toolgate._permits`, and the Python values a
policy is built from are :mod:`toolgate._config`. The policy is at once an engine,
a decorator, an async context manager and Agent Framework function middleware.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from ._config import RateLimit, ToolRateLimit, config_json, limits_config, read_toml
from ._errors import AdmissionRejected
from ._permits import Guard, hold, rejection_result, wait
from ._toolgate import Engine, FastPath, ManualClock, Permit, Rejection, Waiting, ready, ready_raise
from ._urgency import NO_OPTIONS, Deadline, Priority, check_priority, current, current_options, options, options_of

if TYPE_CHECKING:
    from agent_framework import FunctionInvocationContext
    from typing_extensions import ParamSpec

    P = ParamSpec("P")
else:
    FunctionInvocationContext = Any

T = TypeVar("T")
log = logging.getLogger("toolgate")
_DEBUG, _INFO = logging.DEBUG, logging.INFO
_cache = getattr(log, "_cache", None)
#: The logger's own cache of ``isEnabledFor`` by level (``logging`` clears it whenever
#: a level, a handler's logger or ``logging.disable`` changes). A decision reads it,
#: a dict lookup, instead of calling ``isEnabledFor``: ``False`` means nothing would
#: be logged at that level; anything else (``True``, not cached yet, or a Python
#: whose loggers keep no such cache) goes to the exact check of ``_report``.
_enabled: dict[int, bool] = _cache if isinstance(_cache, dict) else {}

__all__ = ["Decision", "ToolRateLimitPolicy"]


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
    #: The call's priority class, when it said one.
    priority: str | None = None


class ToolRateLimitPolicy:
    """Per-tool admission policy, decided by toolgate's Rust engine.

    ``limits`` maps tool names to a :class:`RateLimit`, a :class:`ToolRateLimit` or
    to a tool table of the config format (``{"rate": "2/s", "concurrency": 4, ...}``). ``on_limit`` and
    ``max_wait`` apply to the tools of ``limits``. ``store=None`` keeps the quotas in
    this process; ``store="redis://host:port"`` keeps them in Redis, so that every
    process (and gateway) on the same Redis obeys one quota. With a store, quotas are
    checked on Redis (one round trip per call, 50 ms timeout, failing closed); a
    ``[store]`` table in ``from_toml``/``from_dict`` sets the other store options.

    The policy is, at once:

    * Microsoft Agent Framework function middleware (``Agent(middleware=[policy])``);
    * a decorator (``@policy``, ``@policy.limit("tool")`` or ``@policy.tool("tool",
      max_calls_per_minute=30)``, which declares the limit too) and an async context
      manager (``async with policy.guard("tool")``) for any async callable;
    * an engine: ``await policy.admit(tool)``, ``await policy.decide(tool)``,
      ``policy.try_admit(tool)``.

    Every way of admitting takes a call's ``priority`` and ``deadline`` (see
    :meth:`decide` and :func:`toolgate.call_options`).

    Decisions go to the ``toolgate`` logger (admitted and waited at DEBUG, rejected
    at INFO) and to ``on_decision`` when given; arguments are never logged.
    """

    def __init__(
        self,
        limits: Mapping[str, RateLimit | ToolRateLimit | Mapping[str, Any]] | None = None,
        on_limit: Literal["reject", "wait"] = "reject",
        max_wait: float = 1.0,
        store: str | None = None,
        *,
        unknown_tools: Literal["allow", "deny"] = "allow",
        clock: ManualClock | None = None,
        on_decision: Callable[[Decision], None] | None = None,
        tenant_of: Callable[[Any], str | None] | None = None,
    ) -> None:
        config = limits_config(limits, on_limit, max_wait, store, unknown_tools)
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
        self._fast = FastPath(
            self, engine, ToolRateLimitPolicy, current_options, NO_OPTIONS, log, _enabled, _INFO, on_decision is not None
        )
        self.on_decision = on_decision
        self.tenant_of = tenant_of
        # The common call (no priority, deadline or call_options, nothing to report)
        # is decided by the Rust fast path without a Python frame; it hands every
        # other call to the methods below. A subclass's own method stays its own.
        for name in ("decide", "admit", "try_admit"):
            if getattr(type(self), name) is getattr(ToolRateLimitPolicy, name):
                self.__dict__[name] = getattr(self._fast, name)
        _register_middleware(type(self))

    @property
    def on_decision(self) -> Callable[[Decision], None] | None:
        """Called with every :class:`Decision` (never with the call's arguments)."""
        return self._on_decision

    @on_decision.setter
    def on_decision(self, hook: Callable[[Decision], None] | None) -> None:
        self._on_decision = hook
        self._fast.set_hooked(hook is not None)

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
        text = read_toml(path_or_text)
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
        text = config_json(config)
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

    def try_admit(
        self,
        tool: str,
        *,
        tenant: str | None = None,
        tokens: int = 0,
        priority: Priority | None = None,
        deadline: Deadline | None = None,
    ) -> Permit | Rejection:
        """Admits now or rejects now, never waits. Returns the value, raises nothing
        for a rejection (``ValueError`` for an invalid ``priority`` or ``deadline``,
        see :func:`toolgate.call_options`)."""
        if priority is None and deadline is None and current_options() is NO_OPTIONS:
            # The common call: no options to build, none to pass across.
            o = NO_OPTIONS
            r = self._engine.try_admit(tool, tenant, tokens)
        else:
            o = options(priority, deadline)
            r = self._engine.try_admit(tool, tenant, tokens, o.priority, o.seconds_left())
        if self._on_decision is not None or _enabled.get(_DEBUG if type(r) is Permit else _INFO) is not False:
            self._report(tool, r, tenant, o.priority)
        return r

    def decide(
        self,
        tool: str,
        *,
        tenant: str | None = None,
        tokens: int = 0,
        max_wait: float | None = None,
        priority: Priority | None = None,
        deadline: Deadline | None = None,
    ) -> Coroutine[Any, Any, Permit | Rejection]:
        """Admits the call, waiting in FIFO order when the tool's ``on_limit`` is
        ``"wait"`` (or ``max_wait`` is given). Returns a ``Permit`` or a
        ``Rejection``; raises nothing for a rejection.

        ``priority`` (``"interactive"``, ``"default"``, ``"batch"``) is the call's
        class; ``deadline`` (an aware ``datetime`` or seconds from now) is when it
        must have finished: its wait is bounded by ``min(max_wait, deadline − now −
        the tool's p90 latency)``, and a call that cannot start in time is refused
        at once (``max_wait_exceeded``, quota ``deadline``). Both default to the
        enclosing :func:`toolgate.call_options`; invalid ones raise ``ValueError``.

        The engine decides when ``decide`` is called: a call decided at once
        returns an awaitable already decided (no coroutine to run; it is a
        coroutine as ``asyncio`` sees it, so ``create_task`` and ``gather`` take it),
        and only a call that waits returns a coroutine that waits. Errors (an
        invalid ``priority``, ...) are raised by the ``await``, as before.

        Cancel safety: cancelling the awaiting task while it waits leaves the
        accounting exactly as if the call had never come.
        """
        try:
            r = self._answer(tool, tenant, tokens, max_wait, priority, deadline, False)
            return ready(r) if type(r) is Permit or type(r) is Rejection else r
        except Exception as e:
            return ready_raise(e)

    def admit(
        self,
        tool: str,
        *,
        tenant: str | None = None,
        tokens: int = 0,
        max_wait: float | None = None,
        priority: Priority | None = None,
        deadline: Deadline | None = None,
    ) -> Coroutine[Any, Any, Permit]:
        """As :meth:`decide`, but raises :class:`AdmissionRejected` when rejected."""
        try:
            r = self._answer(tool, tenant, tokens, max_wait, priority, deadline, True)
            if type(r) is Permit:
                return ready(r)
            return self._rejected(r) if type(r) is Rejection else r
        except Exception as e:
            return ready_raise(e)

    def _answer(
        self,
        tool: str,
        tenant: str | None,
        tokens: int,
        max_wait: float | None,
        priority: Priority | None,
        deadline: Deadline | None,
        admit: bool,
    ) -> Any:
        """The engine's answer to a call of :meth:`decide` (or :meth:`admit`, when
        ``admit``), reported: a ``Permit`` or a ``Rejection``, or for a call that
        waits the coroutine that waits (and reports, and raises when ``admit``)."""
        if priority is None and deadline is None and current_options() is NO_OPTIONS:
            o = NO_OPTIONS
            r = self._engine.admit(tool, tenant, tokens, max_wait)
        else:
            o = options(priority, deadline)
            r = self._engine.admit(tool, tenant, tokens, max_wait, o.priority, o.seconds_left())
        if type(r) is Waiting:
            return self._waiting(r, tool, tenant, o.priority, admit)
        if self._on_decision is not None or _enabled.get(_DEBUG if type(r) is Permit else _INFO) is not False:
            self._report(tool, r, tenant, o.priority)
        return r

    def _waiting(
        self, waiting: Waiting, tool: str, tenant: str | None, priority: str | None, admit: bool
    ) -> Coroutine[Any, Any, Any]:
        """The coroutine of a call the engine could not decide at once: it waits,
        reports, and (``admit``) raises :class:`AdmissionRejected` for a rejection."""
        waited = self._waited(waiting, tool, tenant, priority)
        return _WaitingCall(self._admitted(waited) if admit else waited, waiting)

    async def _waited(
        self, waiting: Waiting, tool: str, tenant: str | None, priority: str | None
    ) -> Permit | Rejection:
        """Waits for a call the engine could not decide at once, then reports it."""
        decided = await wait(waiting)
        if self._on_decision is not None or log.isEnabledFor(_DEBUG if isinstance(decided, Permit) else _INFO):
            self._report(tool, decided, tenant, priority)
        return decided

    @staticmethod
    def _rejected(r: Rejection) -> Coroutine[Any, Any, Permit]:
        """An awaitable already decided that raises :class:`AdmissionRejected`."""
        return ready_raise(AdmissionRejected.from_rejection(r))

    @staticmethod
    async def _admitted(waited: Coroutine[Any, Any, Permit | Rejection]) -> Permit:
        r = await waited
        if isinstance(r, Rejection):
            raise AdmissionRejected.from_rejection(r)
        return r

    def guard(
        self,
        tool: str,
        *,
        tenant: str | None = None,
        tokens: int = 0,
        max_wait: float | None = None,
        priority: Priority | None = None,
        deadline: Deadline | None = None,
    ) -> Guard:
        """An async context manager admitting one call to ``tool`` (``priority`` and
        ``deadline`` as in :meth:`decide`; a deadline in seconds counts from here)."""
        o = options(priority, deadline)
        return Guard(
            lambda: self.admit(
                tool, tenant=tenant, tokens=tokens, max_wait=max_wait, priority=o.priority, deadline=o.seconds_left()
            )
        )

    def limit(
        self,
        tool: str | None = None,
        *,
        tenant: str | None = None,
        tokens: int = 0,
        priority: Priority | None = None,
    ) -> Callable[[Callable[P, Awaitable[T]]], Callable[P, Awaitable[T]]]:
        """A decorator admitting each call of an async callable as ``tool``
        (default: the function's ``__name__``); a rejected call raises
        :class:`AdmissionRejected` and the function does not run. ``priority`` is
        the class of its calls unless an enclosing :func:`toolgate.call_options`
        says another; a call's deadline comes from there too."""
        check_priority(priority)

        def decorate(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
            name = tool or getattr(fn, "__name__", None)
            if not name:
                raise ValueError("tool: cannot name the tool of this callable; pass tool=")

            @functools.wraps(fn)
            async def admitted(*args: P.args, **kwargs: P.kwargs) -> T:
                if not self.governs(name):
                    return await fn(*args, **kwargs)
                permit = await self.admit(name, tenant=tenant, tokens=tokens, priority=current().priority or priority)
                return await hold(permit, lambda: fn(*args, **kwargs))

            return admitted

        return decorate

    def tool(
        self,
        name: str,
        *,
        max_calls_per_minute: int | None = None,
        rate_limit: ToolRateLimit | None = None,
        tenant: str | None = None,
        tokens: int = 0,
        priority: Priority | None = None,
    ) -> Callable[[Callable[P, Awaitable[T]]], Callable[P, Awaitable[T]]]:
        """A decorator admitting each call of an async callable as the tool ``name``
        under this policy's limit for it; a rejected call raises
        :class:`AdmissionRejected` and the function does not run. ``priority`` and
        the calls' deadlines: as for :meth:`limit`.

        ``max_calls_per_minute=N`` (``ToolRateLimit(rpm=N)``) or
        ``rate_limit=ToolRateLimit(...)`` also puts that limit into the policy when
        the decorator is first applied (the other tools keep their state; several
        callables decorated by one ``policy.tool(...)`` share it). Giving both, or
        declaring a limit for a tool that already has one, raises ``ValueError``; a
        callable that is not ``async def`` raises ``TypeError``."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"name: {name!r}: must be a non-empty string")
        if max_calls_per_minute is not None and rate_limit is not None:
            raise ValueError(f"{name!r}: give max_calls_per_minute or rate_limit, not both")
        if max_calls_per_minute is not None:
            rate_limit = ToolRateLimit(rpm=max_calls_per_minute)
        if rate_limit is not None and not isinstance(rate_limit, ToolRateLimit):
            raise TypeError(f"rate_limit: {rate_limit!r}: must be a ToolRateLimit")
        table = json.dumps(rate_limit.to_config()) if rate_limit is not None else None
        limit = self.limit(name, tenant=tenant, tokens=tokens, priority=priority)

        def decorate(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
            nonlocal table
            if not inspect.iscoroutinefunction(fn):
                raise TypeError(f"{name!r}: policy.tool decorates async callables (async def)")
            if table is not None:
                self._engine.declare(name, table)
                self._tools = frozenset(self._engine.tools())
                table = None
            return limit(fn)

        return decorate

    def __call__(self, context: FunctionInvocationContext, call_next: Any = None) -> Any:
        """``@policy`` decorates an async callable; ``policy(context, call_next)`` is
        the Agent Framework function middleware."""
        if call_next is None:
            if not callable(context):
                raise TypeError("a ToolRateLimitPolicy decorates async callables")
            return self.limit()(context)
        return self.process(context, call_next)

    async def process(self, context: FunctionInvocationContext, call_next: Callable[[], Awaitable[None]]) -> None:
        """Agent Framework ``FunctionMiddleware.process``: see :mod:`toolgate.middleware`."""
        name: str = context.function.name
        if not self.governs(name):
            await call_next()
            return
        tenant = self.tenant_of(context) if self.tenant_of is not None else None
        try:
            # An earlier middleware's metadata, then the run's function_invocation_kwargs.
            metadata, kwargs = getattr(context, "metadata", None), getattr(context, "kwargs", None)
            if (metadata is None or (type(metadata) is dict and not metadata)) and (
                kwargs is None or (type(kwargs) is dict and not kwargs)
            ):
                # The common call: no metadata or keyword arguments, so no options of
                # its own (the fast path reads the enclosing call_options).
                decision = await self.decide(name, tenant=tenant)
            else:
                o = options_of(metadata, kwargs)
                decision = await self.decide(name, tenant=tenant, priority=o.priority, deadline=o.seconds_left())
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
        await hold(decision, call_next)

    def state(self, tool: str, *, tenant: str | None = None) -> dict[str, Any] | None:
        """The live state of ``tool``: ``in_flight``, ``waiting``, ``admitted``,
        ``rejected`` and each quota's ``available`` capacity."""
        return self._engine.tool_state(tool, tenant)

    # --- observability ---

    def _report(self, tool: str, r: Permit | Rejection, tenant: str | None, priority: str | None) -> None:
        # Fills the logger's cache at INFO, which the fast path reads, also when only
        # admissions (logged at DEBUG) come here.
        log.isEnabledFor(_INFO)
        hook = self._on_decision
        if isinstance(r, Permit):
            waited = r.waited
            d = Decision(tool, True, waited=waited, tenant=tenant, priority=priority)
            if waited:
                log.debug("toolgate: %s admitted after waiting %.3fs", tool, waited)
            else:
                log.debug("toolgate: %s admitted", tool)
        else:
            rej = r
            d = Decision(
                tool,
                False,
                reason=rej.reason,
                quota=rej.quota,
                retry_after=rej.retry_after,
                tenant=tenant,
                priority=priority,
            )
            log.info(
                "toolgate: %s rejected: %s by %s (retry_after=%s)", tool, rej.reason, rej.quota, rej.retry_after
            )
        if hook is not None:
            hook(d)

    def __repr__(self) -> str:
        return f"ToolRateLimitPolicy(tools={sorted(self._tools)!r})"


class _WaitingCall(Coroutine[Any, Any, T]):
    """The coroutine of a waiting call (``coro``), which closes its ``waiting`` when
    it is thrown into (a task cancelled) or closed before it started: the call has
    been in the queue since ``decide`` was called, and must leave it at once, as if it
    had never come, rather than when the coroutine is collected. Once started, the
    coroutine (:func:`toolgate._permits.wait`) closes it itself."""

    __slots__ = ("_coro", "_started", "_waiting")

    def __init__(self, coro: Coroutine[Any, Any, T], waiting: Waiting) -> None:
        self._coro = coro
        self._waiting = waiting
        self._started = False

    def __await__(self) -> Generator[Any, None, T]:
        self._started = True
        return self._coro.__await__()

    def send(self, value: Any) -> Any:
        self._started = True
        return self._coro.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        if not self._started:
            self._waiting.close()
        if val is None and tb is None:
            return self._coro.throw(typ)
        return self._coro.throw(typ, val, tb)

    def close(self) -> None:
        if not self._started:
            self._waiting.close()
        self._coro.close()


def _register_middleware(cls: type) -> None:
    """Makes ``isinstance(policy, agent_framework.FunctionMiddleware)`` true when the
    framework is loaded (it is an ABC). Without it the framework still recognises the
    policy as function middleware through ``__call__``'s annotated signature."""
    af = sys.modules.get("agent_framework")
    base = getattr(af, "FunctionMiddleware", None) if af is not None else None
    if base is not None and not issubclass(cls, base):
        base.register(cls)
