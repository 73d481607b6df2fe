"""What ``Client`` and ``AsyncClient`` share: the requests of the gateway's HTTP API
(contract §5, ``docs/gateway.md``) and the reading of its answers.

Building a request and reading an answer are plain functions here; the two clients
differ only in how they send (``httpx.Client`` or ``httpx.AsyncClient``). Every value
a caller gives is checked before anything is sent, with a ``ValueError`` naming it.
"""

from __future__ import annotations

import math
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from ._errors import AdmissionRejected, ClientError
from ._permits import upstream_retry_after
from ._urgency import CallOptions, options

__all__ = [
    "DEFAULT_TIMEOUT",
    "Invocation",
    "Request",
    "Settings",
    "admit_request",
    "options",
    "admitted",
    "answer",
    "complete_request",
    "invocation",
    "invoke_request",
    "release_request",
    "reserve_request",
    "reserved",
    "tool_request",
    "tools_request",
    "transport_error",
]

#: Seconds a request may take at most, by default: a gateway with the default
#: ``request_timeout`` (30 s) answers every request within it.
DEFAULT_TIMEOUT = 35.0
#: The longest ``timeout`` a client accepts (an hour, the engine's longest wait).
MAX_TIMEOUT = 3600.0
#: The largest token count the gateway accepts (2^53 − 1).
MAX_TOKENS = 2**53 - 1
#: The most calls one reservation holds.
MAX_UNITS = 1000
OUTCOMES = ("success", "error", "timeout", "invalid")


@dataclass(frozen=True)
class Settings:
    """A client's base URL, headers (the bearer token) and default tenant."""

    base_url: str
    headers: dict[str, str]
    tenant: str | None
    timeout: float

    @classmethod
    def of(cls, base_url: str, token: str | None, tenant: str | None, timeout: float) -> Settings:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url: {base_url!r}: must be an http:// or https:// URL")
        headers = {"Accept": "application/json"}
        if token is not None:
            if not isinstance(token, str) or not token or not token.isascii() or not token.isprintable():
                raise ValueError("token: must be a non-empty string of printable ASCII characters")
            headers["Authorization"] = f"Bearer {token}"
        seconds = _seconds("timeout", timeout, MAX_TIMEOUT)
        if seconds == 0:
            raise ValueError("timeout: 0: must be greater than 0")
        return cls(base_url.rstrip("/"), headers, _opt_id("tenant", tenant), seconds)


@dataclass(frozen=True)
class Request:
    """One HTTP request of the API."""

    method: str
    path: str
    body: dict[str, Any] | None = None
    params: dict[str, str] = field(default_factory=dict)
    #: Seconds to allow beyond the client's timeout (a wait the caller asked for).
    extra_time: float = 0.0


@dataclass(frozen=True)
class Invocation:
    """The answer of ``invoke``: the upstream's ``result`` (its JSON), its HTTP
    ``status``, the ``outcome``, seconds ``waited`` for admission, the call's
    ``latency`` in seconds and its ``attempts`` when the gateway retried."""

    result: Any
    status: int | None
    outcome: str
    waited: float
    latency: float | None
    attempts: int | None = None


# --- requests ---


def admit_request(
    s: Settings,
    tool: str,
    tenant: str | None,
    tokens: int | None,
    max_wait: float | None,
    idempotency_key: str | None,
    urgency: CallOptions,
) -> Request:
    body: dict[str, Any] = {"tool": _id("tool", tool)}
    _put_tenant(body, s, tenant)
    if tokens is not None:
        body["cost"] = {"tokens": _count("tokens", tokens, MAX_TOKENS, least=0)}
    extra = _put_wait(body, max_wait)
    _put_urgency(body, urgency)
    if idempotency_key is not None:
        body["idempotency_key"] = _id("idempotency_key", idempotency_key)
    return Request("POST", "/v1/admit", body, extra_time=extra)


def complete_request(
    lease: str,
    outcome: str,
    latency: float | None,
    tokens: int | None,
    error: BaseException | None = None,
) -> Request:
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome: {outcome!r}: must be one of {', '.join(OUTCOMES)}")
    body: dict[str, Any] = {"outcome": outcome}
    if latency is not None:
        body["latency_ms"] = min(round(_seconds("latency", latency, 86_400.0) * 1000), 86_400_000)
    if tokens is not None:
        body["tokens"] = _count("tokens", tokens, MAX_TOKENS, least=0)
    pause = upstream_retry_after(error) if error is not None else None
    if pause is not None:
        # The gateway reads an upstream's pause as a 429 with its Retry-After.
        body["status"] = 429
        body["headers"] = {"Retry-After": str(math.ceil(pause))}
    return Request("POST", f"/v1/leases/{_segment(lease)}/complete", body)


def reserve_request(
    s: Settings,
    calls: Mapping[str, int] | Iterable[str | tuple[str, int]],
    ttl: float | None,
    tenant: str | None,
    urgency: CallOptions,
) -> Request:
    items = calls.items() if isinstance(calls, Mapping) else calls
    plan: list[dict[str, Any]] = []
    for item in items:
        tool, count = (item, 1) if isinstance(item, str) else item
        plan.append({"tool": _id("calls[].tool", tool), "count": _count("calls[].count", count, MAX_UNITS)})
        _put_urgency(plan[-1], urgency)
    if not plan:
        raise ValueError("calls: must name at least one tool")
    body: dict[str, Any] = {"calls": plan}
    _put_tenant(body, s, tenant)
    if ttl is not None:
        body["ttl_ms"] = max(1, math.ceil(_seconds("ttl", ttl, 86_400.0) * 1000))
    return Request("POST", "/v1/reserve", body)


def release_request(reservation: str) -> Request:
    return Request("DELETE", f"/v1/reservations/{_segment(reservation)}")


def invoke_request(
    s: Settings,
    tool: str,
    arguments: Mapping[str, Any] | None,
    idempotency_key: str | None,
    tenant: str | None,
    max_wait: float | None,
    urgency: CallOptions,
) -> Request:
    if arguments is not None and not isinstance(arguments, Mapping):
        raise ValueError(f"arguments: {type(arguments).__name__}: must be a mapping (a JSON object)")
    body: dict[str, Any] = {"arguments": dict(arguments or {})}
    if idempotency_key is not None:
        body["idempotency_key"] = _id("idempotency_key", idempotency_key)
    _put_tenant(body, s, tenant)
    extra = _put_wait(body, max_wait)
    _put_urgency(body, urgency)
    return Request("POST", f"/v1/tools/{_segment(_id('tool', tool), keep='/:')}/invoke", body, extra_time=extra)


def tools_request(s: Settings, tenant: str | None) -> Request:
    return Request("GET", "/v1/tools", params=_tenant_query(s, tenant))


def tool_request(s: Settings, tool: str, tenant: str | None) -> Request:
    return Request("GET", f"/v1/tools/{_segment(_id('tool', tool), keep='/:')}", params=_tenant_query(s, tenant))


# --- answers ---


def answer(response: httpx.Response) -> Any:
    """The JSON of a successful answer (``None`` for 204); raises
    :class:`AdmissionRejected` for a rejection and :class:`ClientError` for any
    other error."""
    if response.status_code == 204:
        return None
    try:
        data = response.json()
    except ValueError:
        data = None
    if response.is_success:
        if data is None:
            raise ClientError("invalid_response", f"the gateway's answer is not JSON: {response.text[:200]!r}", response.status_code)
        return data
    if response.status_code == 429 and isinstance(data, dict) and data.get("admitted") is False:
        retry = _ms(data.get("retry_after_ms"))
        raise AdmissionRejected(str(data.get("tool", "")), str(data.get("quota", "")), str(data.get("reason", "")), retry)
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        raise ClientError(str(error.get("code", "error")), str(error.get("message", "")), response.status_code)
    raise ClientError("http_error", f"{response.reason_phrase}: {response.text[:200]!r}", response.status_code)


def admitted(data: Any) -> tuple[str, float]:
    """The lease id and the seconds waited of an admit's answer."""
    if not isinstance(data, dict) or not isinstance(data.get("lease"), str):
        raise ClientError("invalid_response", f"an admission without a lease: {data!r}")
    return data["lease"], _ms(data.get("waited_ms")) or 0.0


def reserved(data: Any) -> tuple[str, list[tuple[str, str]], float | None]:
    """The reservation id, its ``(tool, lease)`` pairs in plan order and the seconds
    until they expire, of a reserve's answer."""
    if not isinstance(data, dict) or not isinstance(data.get("reservation"), str):
        raise ClientError("invalid_response", f"a reservation without an id: {data!r}")
    pairs = [(str(c["tool"]), str(lease)) for c in data.get("calls", []) for lease in c.get("leases", [])]
    return data["reservation"], pairs, _ms(data.get("expires_in_ms"))


def invocation(data: Any) -> Invocation:
    if not isinstance(data, dict):
        raise ClientError("invalid_response", f"an invocation answer that is not an object: {data!r}")
    status, attempts = data.get("status"), data.get("attempts")
    return Invocation(
        result=data.get("result"),
        status=status if isinstance(status, int) else None,
        outcome=str(data.get("outcome", "")),
        waited=_ms(data.get("waited_ms")) or 0.0,
        latency=_ms(data.get("latency_ms")),
        attempts=attempts if isinstance(attempts, int) else None,
    )


def transport_error(e: httpx.HTTPError) -> ClientError:
    """The client error of a request that got no answer."""
    if isinstance(e, httpx.TimeoutException):
        return ClientError("timeout", f"the gateway did not answer in time: {e!r}")
    return ClientError("connection_error", f"cannot reach the gateway: {e!r}")


# --- checks ---


def _ms(value: object) -> float | None:
    """Seconds of a ``…_ms`` field of an answer, ``None`` when it is not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value / 1000


def _put_tenant(body: dict[str, Any], s: Settings, tenant: str | None) -> None:
    t = _opt_id("tenant", tenant) if tenant is not None else s.tenant
    if t is not None:
        body["tenant"] = t


def _put_wait(body: dict[str, Any], max_wait: float | None) -> float:
    if max_wait is None:
        return 0.0
    seconds = _seconds("max_wait", max_wait, MAX_TIMEOUT)
    body["max_wait_ms"] = math.ceil(seconds * 1000)
    return seconds


def _put_urgency(body: dict[str, Any], urgency: CallOptions) -> None:
    """The call's ``priority`` and its ``deadline`` as Unix milliseconds."""
    if urgency.priority is not None:
        body["priority"] = urgency.priority
    ms = urgency.unix_ms()
    if ms is not None:
        body["deadline"] = ms


def _tenant_query(s: Settings, tenant: str | None) -> dict[str, str]:
    t = _opt_id("tenant", tenant) if tenant is not None else s.tenant
    return {"tenant": t} if t is not None else {}


def _id(name: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name}: {value!r}: must be a non-empty string")
    if len(value.encode()) > 4096:
        raise ValueError(f"{name}: {len(value.encode())} bytes: must be at most 4096")
    return value


def _opt_id(name: str, value: object) -> str | None:
    return None if value is None else _id(name, value)


def _segment(value: str, keep: str = "") -> str:
    return urllib.parse.quote(_id("id", value), safe=keep)


def _seconds(name: str, value: object, most: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name}: {value!r}: must be a finite number of seconds")
    if not 0 <= value <= most:
        raise ValueError(f"{name}: {value!r}: must be between 0 and {most:g} seconds")
    return float(value)


def _count(name: str, value: object, most: int, least: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}: {value!r}: must be a whole number")
    if not least <= value <= most:
        raise ValueError(f"{name}: {value}: must be between {least} and {most}")
    return value
