"""The native engine of toolgate (Rust, PyO3). Use the API of ``toolgate`` instead."""

from collections.abc import Callable, Coroutine
from typing import Any, TypeVar, final

_T = TypeVar("_T")

__all__ = ["__version__", "MAX_WAIT_SECONDS", "MAX_DEADLINE_SECONDS", "Engine", "Permit", "Rejection", "Waiting", "ManualClock", "FastPath", "call_options_used", "ready", "ready_raise"]

__version__: str
MAX_WAIT_SECONDS: float
"""The longest wait the engine allows a call (``max_wait``), in seconds: one hour."""
MAX_DEADLINE_SECONDS: float
"""How far ahead a call's ``deadline`` may lie, in seconds: one day (as on the gateway)."""

@final
class ManualClock:
    """A clock that moves only when told to, for deterministic tests
    (``toolgate.testing.ManualClock``)."""

    def __new__(cls) -> ManualClock: ...
    def now(self) -> float:
        """Seconds since the clock's origin."""
    def advance(self, seconds: float) -> None:
        """Moves time forward and wakes exactly the waiters that became due.
        Raises ``ValueError`` for a negative or non-finite value."""
    @property
    def sleepers(self) -> int:
        """The number of timers still waiting for their deadline."""

@final
class Rejection:
    """A call that was not admitted (a value; ``AdmissionRejected`` is the exception)."""

    def __new__(cls, tool: str, quota: str, reason: str, retry_after: float | None = None) -> Rejection: ...
    @property
    def tool(self) -> str: ...
    @property
    def quota(self) -> str:
        """The quota that said no, e.g. ``tools.lookup_customer.rate``."""
    @property
    def reason(self) -> str:
        """``rate_limited``, ``tokens_limited``, ``concurrency_limited``,
        ``max_wait_exceeded``, ``queue_full``, ``cost_exceeds_capacity``,
        ``circuit_open`` or ``unknown_tool``."""
    @property
    def retry_after(self) -> float | None:
        """Seconds until the call would be admitted; ``None`` when unknown or never."""
    @property
    def store_unavailable(self) -> bool:
        """Whether a shared store (Redis) could not decide — it did not answer and the
        policy fails closed — rather than a limit of the tool saying no."""
    def to_dict(self) -> dict[str, Any]: ...
    def to_json(self) -> str:
        """The text a model receives instead of the tool's result: JSON with
        ``"rejected_by": "toolgate"``, tool, reason, quota, retry_after, message."""

@final
class Permit:
    """Proof that a call was admitted. Complete it when the call ends; releasing or
    garbage-collecting it frees what it holds too."""

    @property
    def waited(self) -> float:
        """Seconds the call waited for admission."""
    @property
    def tool(self) -> str | None:
        """The tool's name (``None`` for a tool without a policy, or once done)."""
    @property
    def done(self) -> bool: ...
    def complete(
        self,
        outcome: str = "success",
        *,
        tokens: int | None = None,
        latency: float | None = None,
        retry_after: float | None = None,
    ) -> None:
        """Ends the call: ``outcome`` is ``success``, ``error``, ``timeout`` or
        ``invalid``; ``tokens`` is the actual token count to reconcile against the
        estimate; ``latency`` defaults to the time since admission; ``retry_after``
        (seconds, the upstream's ``Retry-After``) pauses the tool for that long, at
        most its ``max_pause``."""
    def release(self) -> None:
        """Releases the permit without an outcome (like a cancelled call)."""

@final
class Waiting:
    """A call waiting for admission, driven by ``toolgate._permits.wait``."""

    def poll(self, notify: Callable[[], object]) -> Permit | Rejection | float | None:
        """Polls once: the decision, or the delay (seconds) after which to poll again
        (``None``: only when ``notify`` is called, from another thread)."""
    def close(self) -> None:
        """Gives up waiting; the accounting is as if the call had never come."""

@final
class Engine:
    """An admission engine with a fixed policy."""

    @staticmethod
    def from_toml(text: str, *, clock: ManualClock | None = None) -> Engine:
        """Raises ``ValueError`` naming each invalid field (or an unusable store)."""
    @staticmethod
    def from_json(text: str, *, clock: ManualClock | None = None) -> Engine: ...
    def try_admit(
        self,
        tool: str,
        tenant: str | None = None,
        tokens: int = 0,
        priority: str | None = None,
        deadline: float | None = None,
    ) -> Permit | Rejection:
        """``priority``: ``"interactive"``, ``"default"`` or ``"batch"``; ``deadline``:
        seconds left until the call must have finished (0: already past, refused at
        once), at most ``MAX_DEADLINE_SECONDS``. ``ValueError`` names either when
        invalid."""
    def admit(
        self,
        tool: str,
        tenant: str | None = None,
        tokens: int = 0,
        max_wait: float | None = None,
        priority: str | None = None,
        deadline: float | None = None,
    ) -> Permit | Rejection | Waiting:
        """As ``try_admit``, honouring wait mode (or ``max_wait``)."""
    def tools(self) -> list[str]: ...
    def declare(self, tool: str, table: str) -> None:
        """Adds ``tool`` with ``table`` (a JSON tool table) to the policy in force;
        ``ValueError`` when the tool already has one or the table is invalid."""
    @property
    def deny_unknown(self) -> bool: ...
    def now(self) -> float: ...
    def tool_state(self, tool: str, tenant: str | None = None) -> dict[str, Any] | None: ...

@final
class FastPath:
    """A policy's ``decide``, ``admit`` and ``try_admit`` for the common call (no
    priority, deadline or ``call_options``, nothing to report), decided without a
    Python frame; every other call goes to the methods of ``cls``."""

    def __new__(
        cls,
        policy: Any,
        engine: Engine,
        class_: Any,
        options: Callable[[], Any],
        no_options: Any,
        logger: Any,
        enabled: dict[int, bool],
        info: int,
        hooked: bool,
    ) -> FastPath: ...
    def set_hooked(self, hooked: bool) -> None: ...
    def decide(
        self,
        tool: str,
        *,
        tenant: str | None = None,
        tokens: int | None = None,
        max_wait: float | None = None,
        priority: str | None = None,
        deadline: Any = None,
    ) -> Coroutine[Any, Any, Permit | Rejection]: ...
    def admit(
        self,
        tool: str,
        *,
        tenant: str | None = None,
        tokens: int | None = None,
        max_wait: float | None = None,
        priority: str | None = None,
        deadline: Any = None,
    ) -> Coroutine[Any, Any, Permit]: ...
    def try_admit(
        self,
        tool: str,
        *,
        tenant: str | None = None,
        tokens: int | None = None,
        priority: str | None = None,
        deadline: Any = None,
    ) -> Permit | Rejection: ...

def call_options_used() -> None:
    """Tells the fast path that a ``call_options`` block was entered in this process
    (until then it does not read the context variable)."""

def ready(value: _T) -> Coroutine[Any, Any, _T]:
    """An awaitable already decided: its ``await`` gives ``value`` without running a
    coroutine (``am_send``; on CPython 3.12+, which ignore that slot for ``await``, a
    minimal coroutine). A coroutine as ``asyncio`` sees it (``send``, ``throw``,
    ``close``); a second ``await`` raises ``RuntimeError``."""

def ready_raise(error: BaseException) -> Coroutine[Any, Any, Any]:
    """As ``ready``, but its ``await`` raises ``error``."""
