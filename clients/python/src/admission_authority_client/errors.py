"""Typed errors of the admission-authority client.

Refusals the server asks callers to retry (RESOURCE_EXHAUSTED with google.rpc.ErrorInfo) are
raised as a subclass of :class:`AdmissionRefused` named after the reason, carrying the delay from
google.rpc.RetryInfo. Other failures keep their gRPC status code.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2

ERROR_DOMAIN = "admission.v1"


class AdmissionError(Exception):
    """Anything the admission authority refused or failed to answer."""

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class AdmissionRefused(AdmissionError):
    """A refusal to retry later: ``reason`` is the ErrorInfo reason, ``retry_after`` seconds."""

    reason: str = ""

    def __init__(self, message: str, reason: str, retry_after: float | None) -> None:
        super().__init__(message, grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.reason = reason
        self.retry_after = retry_after


class Busy(AdmissionRefused):
    """No slot is free and the ticket may not queue."""


class QueueFull(AdmissionRefused):
    """The queue is full and the overflow policy cannot make room."""


class MemoryPressure(AdmissionRefused):
    """Reported memory, or the authority's own, is at its hard limit."""


class Draining(AdmissionRefused):
    """The authority is draining and admits no new tickets."""


class TicketEnded(AdmissionError):
    """The ticket ended before it was admitted (shed, expired or cancelled)."""

    def __init__(self, ticket_id: str, state: str) -> None:
        super().__init__(f"ticket {ticket_id} ended {state} before it was admitted")
        self.ticket_id = ticket_id
        self.state = state


class AuthorityUnavailable(AdmissionError):
    """The authority (or its shared store) could not be reached; nothing was admitted."""


_REFUSALS: dict[str, type[AdmissionRefused]] = {
    "BUSY": Busy,
    "QUEUE_FULL": QueueFull,
    "MEMORY_PRESSURE": MemoryPressure,
    "DRAINING": Draining,
}


def translate(err: grpc.RpcError) -> AdmissionError:
    """The typed error for a failed call (sync ``grpc.RpcError`` or ``grpc.aio.AioRpcError``)."""
    code: grpc.StatusCode = err.code()
    message: str = err.details() or str(code)
    reason, retry_after = _details(err)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and reason:
        return _REFUSALS.get(reason, AdmissionRefused)(message, reason, retry_after)
    if code == grpc.StatusCode.UNAVAILABLE:
        return AuthorityUnavailable(message, code)
    return AdmissionError(message, code)


def _details(err: grpc.RpcError) -> tuple[str, float | None]:
    """ErrorInfo reason and RetryInfo delay (seconds) from the status details, if present."""
    # (key, value) pairs at run time, whatever the stubs call them.
    trailing: Any = err.trailing_metadata() or ()
    raw = next((v for k, v in trailing if k == "grpc-status-details-bin"), None)
    if not isinstance(raw, bytes):
        return "", None
    status = status_pb2.Status.FromString(raw)
    reason, retry_after = "", None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            if info.domain == ERROR_DOMAIN:
                reason = info.reason
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            retry_after = retry.retry_delay.seconds + retry.retry_delay.nanos / 1e9
    return reason, retry_after
