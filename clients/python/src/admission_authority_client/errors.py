"""Typed errors of the admission-authority client.

Refusals the server asks callers to retry (RESOURCE_EXHAUSTED with google.rpc.ErrorInfo) are
raised as a subclass of :class:`AdmissionRefused` named after the reason, carrying the delay from
google.rpc.RetryInfo. Other failures keep their gRPC status code.

A call that failed with any code but UNAVAILABLE or DEADLINE_EXCEEDED was not applied.
UNAVAILABLE with reason ``STORE_UNAVAILABLE`` was not applied either (the authority never reached
its store); reason ``OUTCOME_UNKNOWN``, DEADLINE_EXCEEDED, and an UNAVAILABLE from the transport
(the connection broke) may have been: :attr:`AdmissionError.may_have_applied`. The clients retry
those calls with the same idempotency key within their deadline.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2

ERROR_DOMAIN = "admission.v1"


_RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


class AdmissionError(Exception):
    """Anything the admission authority refused or failed to answer. ``reason`` is the
    google.rpc.ErrorInfo reason when the authority sent one."""

    def __init__(
        self, message: str, code: grpc.StatusCode | None = None, reason: str = ""
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason = reason

    @property
    def retryable(self) -> bool:
        """The authority or its store could not answer: the same call may work a moment later."""
        return self.code in _RETRYABLE

    @property
    def may_have_applied(self) -> bool:
        """The call may have taken effect although it failed: repeat it only with the same
        idempotency key (run_id, ticket id, or (run_id, step)), never as a new call."""
        return self.retryable and self.reason != "STORE_UNAVAILABLE"


class AdmissionRefused(AdmissionError):
    """A refusal to retry later: ``reason`` is the ErrorInfo reason, ``retry_after`` seconds."""

    reason: str = ""

    def __init__(self, message: str, reason: str, retry_after: float | None) -> None:
        super().__init__(message, grpc.StatusCode.RESOURCE_EXHAUSTED, reason)
        self.retry_after = retry_after


class Busy(AdmissionRefused):
    """No slot is free and the ticket may not queue."""


class QueueFull(AdmissionRefused):
    """The queue is full and the overflow policy cannot make room."""


class MemoryPressure(AdmissionRefused):
    """Reported memory, or the authority's own, is at its hard limit."""


class Draining(AdmissionRefused):
    """The authority is draining and admits no new tickets."""


class KeyBusy(AdmissionRefused):
    """``key_policy="reject_new"``: the key has a live ticket, ``holder`` (its ticket id).
    Submit again once it ended."""

    def __init__(self, message: str, reason: str, retry_after: float | None, holder: str = "") -> None:
        super().__init__(message, reason, retry_after)
        self.holder = holder


class TicketEnded(AdmissionError):
    """The ticket ended before it was admitted (shed, expired or cancelled), or the Submit's
    ``run_id`` names a ticket that has already ended (``run_id`` set): Submit is idempotent per
    run_id, so it answers that earlier ticket, and a new run needs a new run_id."""

    def __init__(self, ticket_id: str, state: str, run_id: str | None = None) -> None:
        if run_id is None:
            message = f"ticket {ticket_id} ended {state} before it was admitted"
        else:
            message = (f"run_id {run_id} already names ticket {ticket_id}, which ended {state}: "
                       "a Submit with the run_id of an earlier run answers that run's ticket; "
                       "give each new run a new run_id")
        super().__init__(message)
        self.ticket_id = ticket_id
        self.state = state
        self.run_id = run_id


class Superseded(TicketEnded):
    """A newer ticket of the run's key (``key_policy="keep_newest"`` or
    ``"serial_keep_newest"``) took this one's place while it waited: the run never started, and
    should not. ``superseded_by`` is the newer ticket's id."""

    def __init__(self, ticket_id: str, superseded_by: str, run_id: str | None = None) -> None:
        super().__init__(ticket_id, "SUPERSEDED", run_id)
        self.args = (f"ticket {ticket_id} was superseded by {superseded_by}, a newer ticket of "
                     "its key, before it was admitted",)
        self.message = self.args[0]
        self.superseded_by = superseded_by


class AuthorityUnavailable(AdmissionError):
    """The authority (or its shared store) could not be reached. With reason
    ``STORE_UNAVAILABLE`` nothing was applied; otherwise the call may have been
    (:attr:`may_have_applied`)."""


class ClientClosed(AdmissionError):
    """A call on a client after its ``close()``: it fails at once, is never retried, and opens
    no new channel. The client's background work (renewals, releases by run) stops on it."""

    def __init__(self, what: str) -> None:
        super().__init__(f"the {what} is closed: make a new one to call the authority again",
                         grpc.StatusCode.CANCELLED, "CLIENT_CLOSED")


_REFUSALS: dict[str, type[AdmissionRefused]] = {
    "BUSY": Busy,
    "QUEUE_FULL": QueueFull,
    "MEMORY_PRESSURE": MemoryPressure,
    "DRAINING": Draining,
    "KEY_BUSY": KeyBusy,
}


#: What the authority's gRPC server (tonic) answers when a call's own deadline passes there
#: first: CANCELLED with this message, where gRPC means DEADLINE_EXCEEDED.
_SERVER_DEADLINE = "Timeout expired"


def translate(err: grpc.RpcError) -> AdmissionError:
    """The typed error for a failed call (sync ``grpc.RpcError`` or ``grpc.aio.AioRpcError``). A
    deadline that ran out on the server is DEADLINE_EXCEEDED, as when it runs out here first:
    the call may have been applied."""
    code: grpc.StatusCode = err.code()
    message: str = err.details() or str(code)
    if code == grpc.StatusCode.CANCELLED and message == _SERVER_DEADLINE:
        return AdmissionError(message, grpc.StatusCode.DEADLINE_EXCEEDED)
    reason, retry_after, metadata = _details(err)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and reason == "KEY_BUSY":
        return KeyBusy(message, reason, retry_after, metadata.get("holder", ""))
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and reason:
        return _REFUSALS.get(reason, AdmissionRefused)(message, reason, retry_after)
    if code == grpc.StatusCode.UNAVAILABLE:
        return AuthorityUnavailable(message, code, reason)
    return AdmissionError(message, code, reason)


def _details(err: grpc.RpcError) -> tuple[str, float | None, dict[str, str]]:
    """ErrorInfo reason and metadata, and RetryInfo delay (seconds), from the status details,
    if present."""
    # (key, value) pairs at run time, whatever the stubs call them.
    trailing: Any = err.trailing_metadata() or ()
    raw = next((v for k, v in trailing if k == "grpc-status-details-bin"), None)
    if not isinstance(raw, bytes):
        return "", None, {}
    status = status_pb2.Status.FromString(raw)
    reason, retry_after, metadata = "", None, {}
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            if info.domain == ERROR_DOMAIN:
                reason = info.reason
                metadata = dict(info.metadata)
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            retry_after = retry.retry_delay.seconds + retry.retry_delay.nanos / 1e9
    return reason, retry_after, metadata
