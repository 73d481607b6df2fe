"""The exceptions: a call that was not admitted, and a client whose gateway said no
for another reason."""

from __future__ import annotations

from ._toolgate import Rejection

__all__ = ["AdmissionRejected", "ClientError"]


class AdmissionRejected(Exception):
    """A tool call was not admitted; the tool did not run.

    Raised by the decorator, the async context manager and ``admit()``. It is never
    the exception of a tool: a tool's own failures pass through unchanged.

    Attributes:
        tool: the tool's name.
        quota: the quota that said no, e.g. ``tools.lookup_customer.rate``.
        reason: a stable string such as ``rate_limited`` or ``max_wait_exceeded``.
        retry_after: seconds until the call would be admitted, or ``None`` when
            unknown or never.
    """

    tool: str
    quota: str
    reason: str
    retry_after: float | None

    def __init__(self, tool: str, quota: str, reason: str, retry_after: float | None = None) -> None:
        super().__init__(tool, quota, reason, retry_after)
        self.tool = tool
        self.quota = quota
        self.reason = reason
        self.retry_after = retry_after

    @classmethod
    def from_rejection(cls, rejection: Rejection) -> AdmissionRejected:
        """The exception for a rejection value."""
        return cls(rejection.tool, rejection.quota, rejection.reason, rejection.retry_after)

    def to_dict(self) -> dict[str, object]:
        """``tool``, ``quota``, ``reason`` and ``retry_after`` as a dict."""
        return {"tool": self.tool, "quota": self.quota, "reason": self.reason, "retry_after": self.retry_after}

    def __str__(self) -> str:
        s = f"call to {self.tool!r} rejected: {self.reason}"
        if self.quota:
            s += f" by {self.quota}"
        if self.retry_after is not None:
            s += f"; retry after {self.retry_after:.3f}s"
        return s


class ClientError(Exception):
    """A gateway (or the mesh) answered with an error that is not a rejection, or
    could not be reached.

    Attributes:
        code: the gateway's ``error.code`` (``invalid_request``, ``unauthorized``,
            ``forbidden``, ``unknown_lease``, ``too_many_leases``, ``upstream_error``,
            …), or ``connection_error`` / ``timeout`` / ``invalid_response`` when no
            such answer came.
        message: the gateway's ``error.message``, or what went wrong.
        status: the HTTP status, or ``None`` when there was no answer.
    """

    code: str
    message: str
    status: int | None

    def __init__(self, code: str, message: str, status: int | None = None) -> None:
        super().__init__(code, message, status)
        self.code = code
        self.message = message
        self.status = status

    def __str__(self) -> str:
        where = f"{self.status} " if self.status is not None else ""
        return f"{where}{self.code}: {self.message}"
