"""``toolgate.AsyncClient``: the asyncio client of a running gateway, the twin of
:mod:`toolgate._client` (the same requests and answers, :mod:`toolgate._gateway`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Generator, Iterable, Mapping
from types import TracebackType
from typing import Any, Protocol, TypeVar

import httpx

from ._errors import ClientError
from ._urgency import Deadline, Priority
from ._gateway import (
    DEFAULT_TIMEOUT,
    Invocation,
    Request,
    Settings,
    admit_request,
    admitted,
    answer,
    complete_request,
    invocation,
    invoke_request,
    options,
    release_request,
    reserve_request,
    reserved,
    tool_request,
    tools_request,
    transport_error,
)

__all__ = ["AsyncClient", "AsyncLease", "AsyncReservation", "Pending"]

log = logging.getLogger("toolgate")


class _Exits(Protocol):
    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None: ...


H = TypeVar("H", bound=_Exits)


class Pending(Coroutine[Any, Any, H]):
    """What ``AsyncClient.admit`` and ``reserve`` return: a coroutine (await it, or
    hand it to ``asyncio.create_task``) for the lease or reservation, or an async
    context manager (``async with``) that also ends it on exit."""

    __slots__ = ("_make", "_coro", "_held")

    def __init__(self, make: Callable[[], Coroutine[Any, Any, H]]) -> None:
        self._make = make
        self._coro: Coroutine[Any, Any, H] | None = None
        self._held: H | None = None

    def _started(self) -> Coroutine[Any, Any, H]:
        # Made on first use, so that a Pending used only by `async with` leaves no
        # coroutine that was never awaited.
        if self._coro is None:
            self._coro = self._make()
        return self._coro

    def send(self, value: Any) -> Any:
        return self._started().send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:  # type: ignore[override]
        return self._started().throw(typ, val, tb)

    def close(self) -> None:
        if self._coro is not None:
            self._coro.close()

    def __await__(self) -> Generator[Any, None, H]:
        return self._started().__await__()

    async def __aenter__(self) -> H:
        self._held = await self._make()
        return self._held

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._held is not None:
            await self._held.__aexit__(et, e, tb)


class AsyncClient:
    """An asyncio client of a running gateway: :class:`toolgate.Client`'s API with
    awaitable methods, on ``httpx.AsyncClient``.

    ::

        async with AsyncClient("http://127.0.0.1:8787", token=TOKEN) as gate:
            async with gate.admit("lookup_customer") as lease:
                ...
    """

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8787",
        *,
        token: str | None = None,
        tenant: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._s = Settings.of(base_url, token, tenant, timeout)
        self._http = httpx.AsyncClient(base_url=self._s.base_url, headers=self._s.headers, transport=transport)

    def admit(
        self,
        tool: str,
        *,
        tenant: str | None = None,
        tokens: int | None = None,
        max_wait: float | None = None,
        idempotency_key: str | None = None,
        priority: Priority | None = None,
        deadline: Deadline | None = None,
    ) -> Pending[AsyncLease]:
        """As ``Client.admit``: ``lease = await gate.admit(...)``, or ``async with
        gate.admit(...) as lease:`` which completes it with the outcome and latency.
        Cancelling the awaiting task while the gateway makes the call wait gives its
        place in the queue up."""
        req = admit_request(self._s, tool, tenant, tokens, max_wait, idempotency_key, options(priority, deadline))

        async def make() -> AsyncLease:
            lease, waited = admitted(await self._send(req))
            return AsyncLease(self, lease, tool, waited)

        return Pending(make)

    def reserve(
        self,
        calls: Mapping[str, int] | Iterable[str | tuple[str, int]],
        *,
        ttl: float | None = None,
        tenant: str | None = None,
        priority: Priority | None = None,
        deadline: Deadline | None = None,
    ) -> Pending[AsyncReservation]:
        """As ``Client.reserve``; ``async with`` gives back the leases not completed."""
        req = reserve_request(self._s, calls, ttl, tenant, options(priority, deadline))

        async def make() -> AsyncReservation:
            rid, pairs, expires_in = reserved(await self._send(req))
            leases = [AsyncLease(self, lease, tool, 0.0) for tool, lease in pairs]
            return AsyncReservation(self, rid, leases, expires_in)

        return Pending(make)

    async def invoke(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        tenant: str | None = None,
        max_wait: float | None = None,
        priority: Priority | None = None,
        deadline: Deadline | None = None,
    ) -> Invocation:
        """As ``Client.invoke``."""
        urgency = options(priority, deadline)
        req = invoke_request(self._s, tool, arguments, idempotency_key, tenant, max_wait, urgency)
        return invocation(await self._send(req))

    async def tools(self, *, tenant: str | None = None) -> list[dict[str, Any]]:
        """The live state of every tool with a policy."""
        data = await self._send(tools_request(self._s, tenant))
        return list(data.get("tools", [])) if isinstance(data, dict) else []

    async def tool(self, name: str, *, tenant: str | None = None) -> dict[str, Any]:
        """The live state of one tool."""
        return dict(await self._send(tool_request(self._s, name, tenant)))

    async def aclose(self) -> None:
        """Closes the client's connections."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _send(self, r: Request) -> Any:
        try:
            response = await self._http.request(
                r.method, r.path, json=r.body, params=r.params or None, timeout=self._s.timeout + r.extra_time
            )
        except httpx.HTTPError as e:
            raise transport_error(e) from e
        return answer(response)

    def __repr__(self) -> str:
        return f"AsyncClient({self._s.base_url!r})"


class AsyncLease:
    """An admitted call on the gateway (see ``toolgate.Lease``); ``async with``
    completes it on exit: ``success``, or ``error`` when the block raised or was
    cancelled (with the upstream's ``Retry-After`` when the exception carries one)."""

    def __init__(self, client: AsyncClient, lease: str, tool: str, waited: float) -> None:
        self.id = lease
        self.tool = tool
        self.waited = waited
        self._client = client
        self._admitted_at = time.monotonic()
        self._done = False

    @property
    def done(self) -> bool:
        """Whether the lease was completed (or given back with its reservation)."""
        return self._done

    async def complete(
        self,
        outcome: str = "success",
        *,
        tokens: int | None = None,
        latency: float | None = None,
        error: BaseException | None = None,
    ) -> None:
        """As ``Lease.complete``."""
        if self._done:
            return
        took = time.monotonic() - self._admitted_at if latency is None else latency
        req = complete_request(self.id, outcome, took, tokens, error)
        self._done = True
        await self._client._send(req)

    async def __aenter__(self) -> AsyncLease:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if e is None:
            await self.complete("success")
            return
        try:
            await self.complete("error", error=e)
        except (Exception, asyncio.CancelledError) as failed:  # the block's own exception is the one to see
            log.warning("toolgate: lease %s of %s not completed: %r", self.id, self.tool, failed)

    def __repr__(self) -> str:
        return f"AsyncLease(id={self.id!r}, tool={self.tool!r}, waited={self.waited!r}, done={self._done})"


class AsyncReservation:
    """Leases reserved together (``AsyncClient.reserve``), in plan order."""

    def __init__(self, client: AsyncClient, reservation: str, leases: list[AsyncLease], expires_in: float | None) -> None:
        self.id = reservation
        self.leases = leases
        self.expires_in = expires_in
        self._client = client

    async def release(self) -> int:
        """Gives back the leases not completed; returns how many the gateway freed."""
        if all(lease.done for lease in self.leases):
            return 0
        try:
            data = await self._client._send(release_request(self.id))
        except ClientError as e:
            if e.code != "unknown_reservation":  # 404: none open any more (expired)
                raise
            data = None
        for lease in self.leases:
            lease._done = True
        released = data.get("released", 0) if isinstance(data, dict) else 0
        return int(released)

    async def __aenter__(self) -> AsyncReservation:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.release()

    def __repr__(self) -> str:
        return f"AsyncReservation(id={self.id!r}, leases={len(self.leases)})"
