"""Policies given as Python values, turned into the config format (contract §3).

``ToolRateLimitPolicy(limits=..., on_limit=..., ...)``, ``from_dict`` and ``from_toml``
all end as one config text that the Rust engine parses and checks. What is checked
here is only what the Python signature adds (``RateLimit``, ``on_limit``,
``max_wait``, ``store``, ``unknown_tools``, ``ToolRateLimit``); each error is a
``ValueError`` (a ``TypeError`` for a value of the wrong type) naming the field, the
value and the rule.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Any, Literal

from ._toolgate import MAX_WAIT_SECONDS

__all__ = ["MAX_RPM", "MAX_WAIT_SECONDS", "RateLimit", "ToolRateLimit", "config_json", "limits_config", "read_toml"]

#: The most calls a ``ToolRateLimit`` window may hold: its log keeps one entry per
#: admission still in the window, so the count bounds its memory (16 MB at most).
MAX_RPM = 1_000_000
#: The longest ``per`` of a ``ToolRateLimit``, in seconds (a day).
MAX_PER_SECONDS = 86_400.0


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
class ToolRateLimit:
    """At most ``rpm`` calls in any interval of ``per`` seconds (default 60): an
    exact sliding window per tool.

    ``behavior="wait"`` (default) queues a call that does not fit, in FIFO order,
    when its wait, predicted up front, is at most ``max_wait_seconds`` (``None``:
    the longest wait the engine allows, ``MAX_WAIT_SECONDS``, one hour); a call that
    would wait longer is rejected at once with ``max_wait_exceeded``. ``"error"``
    rejects it at once with ``rate_limited`` (a ``max_wait_seconds`` given with it is
    checked and has nothing to bound).

    Raises ``TypeError`` for a missing ``rpm`` or a value of the wrong type, and
    ``ValueError`` naming the field for a value out of range.
    """

    rpm: int | None = None
    _: KW_ONLY
    per: float = 60.0
    behavior: Literal["wait", "error"] = "wait"
    max_wait_seconds: float | None = None

    def __post_init__(self) -> None:
        if self.rpm is None:
            raise TypeError("ToolRateLimit: rpm is required (the calls allowed per window)")
        if isinstance(self.rpm, bool) or not isinstance(self.rpm, int):
            raise TypeError(f"rpm: {self.rpm!r}: must be a whole number")
        if not 1 <= self.rpm <= MAX_RPM:
            raise _field_error("rpm", self.rpm, f"must be between 1 and {MAX_RPM}")
        _seconds("per", self.per, positive=True)
        if self.per > MAX_PER_SECONDS:
            raise _field_error("per", self.per, f"must be at most {MAX_PER_SECONDS:g} seconds")
        if self.behavior not in ("wait", "error"):
            raise _field_error("behavior", self.behavior, 'must be "wait" or "error"')
        if self.max_wait_seconds is not None:
            # Checked under "error" too (a bad value is a mistake either way), but only
            # "wait" has a wait to bound: "error" never waits.
            _seconds("max_wait_seconds", self.max_wait_seconds)
            if self.max_wait_seconds > MAX_WAIT_SECONDS:
                raise _field_error(
                    "max_wait_seconds", self.max_wait_seconds, f"must be at most {MAX_WAIT_SECONDS:g} (waits are bounded)"
                )

    def to_config(self) -> dict[str, Any]:
        """The equivalent tool table in the config format (contract §3)."""
        cfg: dict[str, Any] = {"rate": f"{self.rpm}/{_nanos(self.per)}", "window": "sliding"}
        if self.behavior == "error":
            cfg["on_limit"] = "reject"
            cfg["max_wait"] = "0s"
        else:
            wait = MAX_WAIT_SECONDS if self.max_wait_seconds is None else self.max_wait_seconds
            cfg["on_limit"] = "wait"
            cfg["max_wait"] = _nanos(wait) if wait else "0s"
        return cfg


def limits_config(
    limits: Mapping[str, RateLimit | ToolRateLimit | Mapping[str, Any]] | None,
    on_limit: str,
    max_wait: float,
    store: str | None,
    unknown_tools: str,
) -> dict[str, Any]:
    """The config of ``ToolRateLimitPolicy(limits, on_limit, max_wait, store,
    unknown_tools=...)``: ``on_limit`` and ``max_wait`` (seconds, at least 0) become
    the default of every tool of ``limits`` that does not set its own."""
    if on_limit not in ("reject", "wait"):
        raise _field_error("on_limit", on_limit, 'must be "reject" or "wait"')
    if unknown_tools not in ("allow", "deny"):
        raise _field_error("unknown_tools", unknown_tools, 'must be "allow" or "deny"')
    wait = _seconds("max_wait", max_wait)
    store_url = _check_store(store)
    if limits is None:
        limits = {}
    if not isinstance(limits, Mapping):
        raise _field_error("limits", limits, "must be a mapping of tool names to RateLimit or ToolRateLimit")
    tools: dict[str, Any] = {}
    for name, limit in limits.items():
        if not isinstance(name, str) or not name:
            raise _field_error("limits", name, "tool names must be non-empty strings")
        if isinstance(limit, (RateLimit, ToolRateLimit)):
            tool = limit.to_config()
        elif isinstance(limit, Mapping):
            tool = dict(limit)
        else:
            raise _field_error(f"limits[{name!r}]", limit, "must be a RateLimit, a ToolRateLimit or a tool config dict")
        tool.setdefault("on_limit", on_limit)
        tool.setdefault("max_wait", _nanos(wait) if wait else "0s")
        tools[name] = tool
    config: dict[str, Any] = {"unknown_tools": unknown_tools, "tools": tools}
    if store_url is not None:
        config["store"] = {"url": store_url}
    return config


def config_json(config: Mapping[str, Any]) -> str:
    """``config`` (a dict with the structure of the TOML config) as JSON text for the
    engine; a ``ValueError`` when it holds values TOML cannot hold."""
    try:
        return json.dumps(config)
    except (TypeError, ValueError) as e:
        raise ValueError(f"config: not representable as TOML/JSON values: {e}") from None


def read_toml(path_or_text: str | os.PathLike[str]) -> str:
    """The TOML text of ``path_or_text``: a path is read, a string that looks like
    TOML (it has a newline, ``=`` or ``[``) is the text itself."""
    if isinstance(path_or_text, os.PathLike):
        return Path(path_or_text).read_text(encoding="utf-8")
    if not isinstance(path_or_text, str):
        raise _field_error("path_or_text", path_or_text, "must be a path or TOML text")
    looks_like_toml = "\n" in path_or_text or "=" in path_or_text or "[" in path_or_text
    if not looks_like_toml:
        return Path(path_or_text).read_text(encoding="utf-8")
    return path_or_text


def _check_store(store: str | None) -> str | None:
    if store is None or store == "memory":
        return None
    if isinstance(store, str) and store.startswith(("redis://", "rediss://")):
        return store
    raise _field_error("store", store, 'must be None, "memory" or a "redis://…" URL')


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
