"""Tool calls over the event mesh (NATS JetStream, ``docs/mesh.md``), on ``nats-py``
(``pip install "toolgate[mesh]"``).

``submit`` publishes one call envelope on ``toolgate.calls.<tool>`` (with
``Nats-Msg-Id: <call_id>``, so that a repeated publish is stored once) and returns its
``call_id``; ``call`` does the same and awaits the call's one result on
``toolgate.results.<call_id>``. The gateways consuming the stream (``toolgate serve
--mesh``) run it through admission, the breaker and retries.

    import nats
    from toolgate import mesh

    nc = await nats.connect("nats://127.0.0.1:4222")
    result = await mesh.call(nc, "lookup_customer", {"id": 42}, idempotency_key="order-42")
    if result.ok:
        print(result.result)
"""

from __future__ import annotations

import datetime as dt
import json
import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.js.api import DeliverPolicy

from ._errors import ClientError
from ._urgency import options

__all__ = ["MeshResult", "call", "call_subject", "encode", "result_subject", "submit"]

#: The largest token count an envelope may declare (2^53 − 1).
MAX_TOKENS = 2**53 - 1
#: The longest a ``call`` waits for its result, in seconds (a day).
MAX_TIMEOUT = 86_400.0
_PLAIN = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


@dataclass(frozen=True)
class MeshResult:
    """The one result of a call: ``outcome`` is ``success`` or a failure word
    (``error``, ``timeout``, ``invalid``, ``rejected``, ``deadline_exceeded``,
    ``invalid_arguments``) with ``error`` ``{"code", "message"}``; ``result`` is the
    upstream's answer, ``status`` its HTTP status; ``raw`` is the whole message."""

    call_id: str
    tool: str
    outcome: str
    result: Any = None
    status: int | None = None
    error: dict[str, Any] | None = None
    attempts: list[dict[str, Any]] | None = None
    raw: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        """Whether the call succeeded."""
        return self.outcome == "success"


def encode(name: str) -> str:
    """A tool name or call id as a subject token: kept when made only of
    ``[A-Za-z0-9_-]``, else every other byte as ``%XX`` (upper-case hex)."""
    raw = name.encode()
    if all(b in _PLAIN for b in raw):
        return name
    return "".join(chr(b) if b in _PLAIN else f"%{b:02X}" for b in raw)


def call_subject(tool: str) -> str:
    """``toolgate.calls.<tool>``, the tool encoded as the mesh does."""
    return f"toolgate.calls.{encode(_id('tool', tool, 256))}"


def result_subject(call_id: str) -> str:
    """``toolgate.results.<call_id>``, the id encoded as the mesh does."""
    return f"toolgate.results.{encode(_id('call_id', call_id, 128))}"


async def submit(
    nc: NATS,
    tool: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    call_id: str | None = None,
    tenant: str | None = None,
    idempotency_key: str | None = None,
    deadline: float | dt.datetime | None = None,
    tokens: int | None = None,
    reply_to: str | None = None,
) -> str:
    """Publishes one call on the connected ``nc`` and returns its ``call_id`` (a
    random one unless given). ``deadline`` is an aware ``datetime`` or seconds from
    now, at most a day ahead (default: the enclosing :func:`toolgate.call_options`'
    deadline; of the two the earliest); ``tokens`` the call's declared token cost.
    The envelope carries no priority (contract §7). Raises ``ValueError`` for a value
    the mesh would refuse, and :class:`~toolgate.ClientError` when JetStream does not
    store the call (``no_stream`` when no gateway created the calls stream yet)."""
    cid = call_id if call_id is not None else uuid.uuid4().hex
    envelope = _envelope(cid, tool, arguments, tenant, idempotency_key, deadline, tokens, reply_to)
    try:
        await nc.jetstream().publish(call_subject(tool), json.dumps(envelope).encode(), headers={"Nats-Msg-Id": cid})
    except (nats.js.errors.NoStreamResponseError, nats.errors.NoRespondersError) as e:
        raise ClientError("no_stream", f"no stream stores {call_subject(tool)!r}: is a gateway running with --mesh?") from e
    except nats.errors.Error as e:
        raise ClientError("mesh_error", f"publishing the call failed: {e!r}") from e
    return cid


async def call(
    nc: NATS,
    tool: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    timeout: float = 30.0,
    call_id: str | None = None,
    tenant: str | None = None,
    idempotency_key: str | None = None,
    deadline: float | dt.datetime | None = None,
    tokens: int | None = None,
    reply_to: str | None = None,
) -> MeshResult:
    """Publishes one call (as :func:`submit`) and awaits its result, at most
    ``timeout`` seconds (``ClientError`` ``timeout`` then: the call may still run
    later; its result stays on its subject). Failures of the call are results
    (``MeshResult.ok`` is false), not exceptions."""
    wait = _seconds("timeout", timeout)
    if wait == 0:
        raise ValueError("timeout: 0: must be greater than 0")
    cid = call_id if call_id is not None else uuid.uuid4().hex
    js = nc.jetstream()
    # Results are kept in a stream: subscribing first, from its start, sees a result
    # published at any time (also one of an earlier call with this id).
    try:
        sub = await js.subscribe(result_subject(cid), deliver_policy=DeliverPolicy.ALL)
    except nats.errors.Error as e:
        raise ClientError("mesh_error", f"cannot subscribe to the results: {e!r}") from e
    try:
        await submit(
            nc,
            tool,
            arguments,
            call_id=cid,
            tenant=tenant,
            idempotency_key=idempotency_key,
            deadline=deadline,
            tokens=tokens,
            reply_to=reply_to,
        )
        try:
            msg = await sub.next_msg(timeout=wait)
        except nats.errors.TimeoutError as e:
            raise ClientError("timeout", f"no result for call {cid!r} within {wait:g}s") from e
        return _result(msg.data)
    finally:
        await sub.unsubscribe()


def _envelope(
    call_id: str,
    tool: str,
    arguments: Mapping[str, Any] | None,
    tenant: str | None,
    idempotency_key: str | None,
    deadline: float | dt.datetime | None,
    tokens: int | None,
    reply_to: str | None,
) -> dict[str, Any]:
    if arguments is not None and not isinstance(arguments, Mapping):
        raise ValueError(f"arguments: {type(arguments).__name__}: must be a mapping (a JSON object)")
    env: dict[str, Any] = {"call_id": _id("call_id", call_id, 128), "tool": _id("tool", tool, 256)}
    env["arguments"] = dict(arguments or {})
    for key, value in (("tenant", tenant), ("idempotency_key", idempotency_key), ("reply_to", reply_to)):
        if value is not None:
            env[key] = _id(key, value, 256)
    at = options(None, deadline).deadline
    if at is not None:
        env["deadline"] = _rfc3339(at)
    if tokens is not None:
        if isinstance(tokens, bool) or not isinstance(tokens, int) or not 0 <= tokens <= MAX_TOKENS:
            raise ValueError(f"tokens: {tokens!r}: must be a whole number from 0 to {MAX_TOKENS}")
        env["cost"] = {"tokens": tokens}
    return env


def _rfc3339(unix: float) -> str:
    at = dt.datetime.fromtimestamp(unix, dt.timezone.utc)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _result(data: bytes) -> MeshResult:
    try:
        raw = json.loads(data)
    except ValueError as e:
        raise ClientError("invalid_response", f"a result that is not JSON: {data[:200]!r}") from e
    if not isinstance(raw, dict):
        raise ClientError("invalid_response", f"a result that is not an object: {data[:200]!r}")
    error = raw.get("error")
    attempts = raw.get("attempts")
    status = raw.get("status")
    return MeshResult(
        call_id=str(raw.get("call_id", "")),
        tool=str(raw.get("tool", "")),
        outcome=str(raw.get("outcome", "")),
        result=raw.get("result"),
        status=status if isinstance(status, int) else None,
        error=error if isinstance(error, dict) else None,
        attempts=attempts if isinstance(attempts, list) else None,
        raw=raw,
    )


def _id(name: str, value: object, most: int) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name}: {value!r}: must be a non-empty string")
    if len(value.encode()) > most:
        raise ValueError(f"{name}: {len(value.encode())} bytes: must be at most {most}")
    return value


def _seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name}: {value!r}: must be a finite number of seconds")
    if not 0 <= value <= MAX_TIMEOUT:
        raise ValueError(f"{name}: {value!r}: must be between 0 and {MAX_TIMEOUT:g} seconds")
    return float(value)
