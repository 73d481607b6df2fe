"""``toolgate.Client``: a blocking client of a running gateway (``toolgate serve``).

Its asyncio twin is :mod:`toolgate._async_client`; both build their requests and read
the answers with :mod:`toolgate._gateway`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any

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

__all__ = ["Client", "Lease", "Reservation"]

log = logging.getLogger("toolgate")


class Client:
    """A blocking client of a running gateway.

    ``token`` is sent as ``Authorization: Bearer …``: with tokens configured, the
    gateway takes the tenant from it. ``tenant`` is the default tenant of every call
    (a call's own ``tenant=`` wins). ``timeout`` bounds every request in seconds
    (default 35: a default gateway answers within its 30 s ``request_timeout``); an
    admission or invocation given ``max_wait`` may take that much longer.

    ``admit``, ``reserve`` and ``invoke`` take a call's ``priority``
    (``"interactive"``, ``"default"``, ``"batch"``) and ``deadline`` (an aware
    ``datetime`` or seconds from now, sent as Unix milliseconds), defaulting to the
    enclosing :func:`toolgate.call_options`; the gateway bounds the call's wait by
    it and refuses at once one that cannot finish in time (``max_wait_exceeded``).

    Rejections raise :class:`~toolgate.AdmissionRejected` (the same fields as
    in-process); every other error raises :class:`~toolgate.ClientError` with the
    gateway's ``error.code`` and ``error.message``.
    """

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8787",
        *,
        token: str | None = None,
        tenant: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._s = Settings.of(base_url, token, tenant, timeout)
        self._http = httpx.Client(base_url=self._s.base_url, headers=self._s.headers, transport=transport)

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
    ) -> Lease:
        """Admits one call to ``tool`` now (waiting as the tool's policy says, or up
        to ``max_wait`` seconds). Returns its :class:`Lease`, a context manager that
        completes it with the outcome and latency::

            with client.admit("lookup_customer") as lease:
                ...
        """
        req = admit_request(self._s, tool, tenant, tokens, max_wait, idempotency_key, options(priority, deadline))
        lease, waited = admitted(self._send(req))
        return Lease(self, lease, tool, waited)

    def reserve(
        self,
        calls: Mapping[str, int] | Iterable[str | tuple[str, int]],
        *,
        ttl: float | None = None,
        tenant: str | None = None,
        priority: Priority | None = None,
        deadline: Deadline | None = None,
    ) -> Reservation:
        """Reserves every call of a plan at once, or none (``{"tool": count}`` or an
        iterable of names or ``(name, count)``); never waits. ``ttl`` (seconds) is
        how long the leases live. The :class:`Reservation` is a context manager that
        gives back, on exit, the leases not completed."""
        req = reserve_request(self._s, calls, ttl, tenant, options(priority, deadline))
        rid, pairs, expires_in = reserved(self._send(req))
        return Reservation(self, rid, [Lease(self, lease, tool, 0.0) for tool, lease in pairs], expires_in)

    def invoke(
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
        """Lets the gateway run ``tool`` against its configured upstream (admission,
        circuit breaker, retries, schema checks)."""
        urgency = options(priority, deadline)
        return invocation(self._send(invoke_request(self._s, tool, arguments, idempotency_key, tenant, max_wait, urgency)))

    def tools(self, *, tenant: str | None = None) -> list[dict[str, Any]]:
        """The live state of every tool with a policy."""
        data = self._send(tools_request(self._s, tenant))
        return list(data.get("tools", [])) if isinstance(data, dict) else []

    def tool(self, name: str, *, tenant: str | None = None) -> dict[str, Any]:
        """The live state of one tool (``ClientError`` ``unknown_tool`` if none)."""
        data = self._send(tool_request(self._s, name, tenant))
        return dict(data)

    def close(self) -> None:
        """Closes the client's connections."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _send(self, r: Request) -> Any:
        try:
            response = self._http.request(
                r.method, r.path, json=r.body, params=r.params or None, timeout=self._s.timeout + r.extra_time
            )
        except httpx.HTTPError as e:
            raise transport_error(e) from e
        return answer(response)

    def __repr__(self) -> str:
        return f"Client({self._s.base_url!r})"


class Lease:
    """An admitted call on the gateway. Complete it when the call ends, or use it as
    a context manager: on exit it is completed as ``success``, or as ``error`` when
    the block raised (with the upstream's ``Retry-After`` when the exception carries
    one, which pauses the tool), with the latency since admission."""

    def __init__(self, client: Client, lease: str, tool: str, waited: float) -> None:
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

    def complete(
        self,
        outcome: str = "success",
        *,
        tokens: int | None = None,
        latency: float | None = None,
        error: BaseException | None = None,
    ) -> None:
        """Ends the call: ``outcome`` is ``success``, ``error``, ``timeout`` or
        ``invalid``; ``tokens`` the actual token count; ``latency`` defaults to the
        seconds since admission. A second completion does nothing."""
        if self._done:
            return
        took = time.monotonic() - self._admitted_at if latency is None else latency
        req = complete_request(self.id, outcome, took, tokens, error)
        self._done = True
        self._client._send(req)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if e is None:
            self.complete("success")
            return
        try:
            self.complete("error", error=e)
        except Exception as failed:  # the block's own exception is the one to see
            log.warning("toolgate: lease %s of %s not completed: %s", self.id, self.tool, failed)

    def __repr__(self) -> str:
        return f"Lease(id={self.id!r}, tool={self.tool!r}, waited={self.waited!r}, done={self._done})"


class Reservation:
    """Leases reserved together (``Client.reserve``), in plan order. Complete each
    as its step ends; :meth:`release` (or leaving the ``with`` block) gives back the
    ones not completed."""

    def __init__(self, client: Client, reservation: str, leases: list[Lease], expires_in: float | None) -> None:
        self.id = reservation
        self.leases = leases
        self.expires_in = expires_in
        self._client = client

    def release(self) -> int:
        """Gives back the leases not completed; returns how many the gateway freed."""
        if all(lease.done for lease in self.leases):
            return 0
        try:
            data = self._client._send(release_request(self.id))
        except ClientError as e:
            if e.code != "unknown_reservation":  # 404: none open any more (expired)
                raise
            data = None
        for lease in self.leases:
            lease._done = True
        released = data.get("released", 0) if isinstance(data, dict) else 0
        return int(released)

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"Reservation(id={self.id!r}, leases={len(self.leases)})"
