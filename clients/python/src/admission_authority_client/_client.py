"""The client wrappers: :class:`AdmissionClient` (blocking) and :class:`AsyncAdmissionClient`
(asyncio), over the generated stubs in :mod:`admission_authority_client.v1`.

Both share the request builders and answer types below; they differ only in how they wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import grpc
import grpc.aio

from .errors import AdmissionError, ClientClosed, Superseded, TicketEnded, translate
from .v1 import admission_pb2 as pb
from .v1 import admission_pb2_grpc as pb_grpc

log = logging.getLogger("admission_authority_client")

T = TypeVar("T")

#: Pause before the first retry of a call the authority could not answer; doubled each time.
_FIRST_BACKOFF = 0.05
#: Longest pause between retries.
_MAX_BACKOFF = 1.0
#: How long a Submit given up on keeps being released by run in the background: the authority
#: may apply it late (a store that stalled runs the calls it had queued once it resumes).
_RELEASE_RUN_FOR = 60.0
#: How long a queued ticket's Wait keeps reopening its stream while the authority cannot be
#: reached (a restart, a deploy, a network blip): an authority on a data dir keeps the ticket
#: and its place, and gives it one lease from its restart for the client to come back.
_RESUME_WAIT_FOR = 60.0


def _give_up(err: AdmissionError, idempotent: bool, left: float, backoff: float) -> bool:
    """Whether a failed call is final: it was refused or bad (not retryable), it may have been
    applied and repeating it would apply it twice, or the deadline leaves no room to retry."""
    return not err.retryable or (err.may_have_applied and not idempotent) or left <= backoff

Mode = Literal["queue", "try"]
#: What a ticket asks of its key's other live tickets (``slot(key=..., key_policy=...)``):
#: ``none`` (the key only labels), ``keep_newest`` (a new ticket ends the key's waiters:
#: :class:`~admission_authority_client.Superseded`), ``serial`` (one admitted per key, the
#: rest in order), ``serial_keep_newest`` (one running, the newest waiting), ``reject_new``
#: (refused :class:`~admission_authority_client.KeyBusy` while the key has a live ticket).
KeyPolicy = Literal["none", "keep_newest", "serial", "serial_keep_newest", "reject_new"]

_KEY_POLICIES = {
    "none": pb.KEY_POLICY_NONE,
    "keep_newest": pb.KEY_POLICY_KEEP_NEWEST,
    "serial": pb.KEY_POLICY_SERIAL,
    "serial_keep_newest": pb.KEY_POLICY_SERIAL_KEEP_NEWEST,
    "reject_new": pb.KEY_POLICY_REJECT_NEW,
}
Coverage = Literal["complete", "partial", "unknown"]

_COVERAGE = {
    "complete": pb.COVERAGE_COMPLETE,
    "partial": pb.COVERAGE_PARTIAL,
    "unknown": pb.COVERAGE_UNKNOWN,
}
_DECISION = {pb.DECISION_ALLOW: "allow", pb.DECISION_DENY: "deny", pb.DECISION_UNKNOWN: "unknown"}


@dataclass
class Slot:
    """An admitted ticket, held for the duration of a ``slot(...)`` block."""

    ticket_id: str
    #: Fencing number: larger for every later admission of the host.
    grant: int
    lease_ttl_ms: int
    #: Set when a background renewal found the ticket no longer admitted (its lease ran out,
    #: e.g. after a long network partition): the run no longer holds a slot.
    lost: bool = False
    #: In the authority's shadow mode: what enforce mode would have done with this Submit
    #: (``QUEUED``, ``BUSY``, ``QUEUE_FULL``, ``MEMORY_PRESSURE``); empty otherwise.
    shadow_reason: str = ""
    #: What the run's provider call came to, reported on release (it moves an adaptive account
    #: cap). Unset: ``"ok"`` when the block returns, :func:`outcome_of` its exception when it
    #: raises.
    outcome: Outcome | None = None
    #: The provider call's latency reported on release; unset: the block's duration.
    latency_ms: int | None = None
    #: Times a background renewal found the ticket unknown to the authority (its store lost
    #: it, or its lease ran out while this replica was cut off) and re-registered it
    #: (Reclaim), so that the run kept counting against the caps.
    reclaims: int = 0
    #: Set when a background renewal heard that a newer ticket of the slot's key was submitted
    #: with ``supersede_running``: its id. The run should stop (the slot stays counted until the
    #: block ends and releases it).
    superseded_by: str = ""


#: What a run's provider call came to: ``ok``; ``rate_limited`` (429); ``overloaded`` (5xx, a
#: timeout); ``failed`` (anything else).
Outcome = Literal["ok", "rate_limited", "overloaded", "failed"]

_OUTCOMES = {
    "ok": pb.OUTCOME_OK,
    "rate_limited": pb.OUTCOME_RATE_LIMITED,
    "overloaded": pb.OUTCOME_OVERLOADED,
    "failed": pb.OUTCOME_FAILED,
}


def _tell(on_queued: Callable[..., None], position: int, eta_ms: int, blocked_by: int) -> None:
    """Call ``on_queued(position, eta_ms)``, or with what holds the ticket as a third argument
    (``"TOTAL"``, ``"SUBJECT"``, ``"ACCOUNT"``, ``"MEMORY"``, ``"TURN"``, ``"STATE_LOSS"``) when
    it takes three."""
    try:
        inspect.signature(on_queued).bind(position, eta_ms, "")
        takes_three = True
    except (TypeError, ValueError):
        takes_three = False
    if takes_three:
        name = pb.Blocker.Name(pb.Blocker.ValueType(blocked_by)).removeprefix("BLOCKER_")
        on_queued(position, eta_ms, "" if name == "UNSPECIFIED" else name)
    else:
        on_queued(position, eta_ms)


def _held(req: pb.SubmitRequest, slot: Slot) -> pb.ReclaimRequest:
    """What a Reclaim of ``slot`` (made by ``req``) says the run holds."""
    return pb.ReclaimRequest(
        ticket_id=slot.ticket_id, host_id=req.host_id, run_id=req.run_id, subject=req.subject,
        account_id=req.account_id, instance_id=req.instance_id, grant=slot.grant,
        priority=req.priority, key=req.key, key_policy=req.key_policy,
    )


def _renew_every(slot: Slot) -> float:
    """Seconds between renewals of ``slot``: a third of its lease."""
    return max(slot.lease_ttl_ms / 3000, 0.005)


def _channel_options(target: str) -> list[tuple[str, Any]]:
    """Every channel's options: reconnect soon after a replica comes back (gRPC's default
    waits a second and more between tries, as long as a short lease's renew interval), and
    with several addresses (``ipv4:a,b``), send each call to a live one in turn, so a call
    retried after a replica died reaches another. Such a target names its first address as
    the calls' authority: gRPC would send the whole list, which is no authority, and the server
    refuses the call (RST_STREAM)."""
    options: list[tuple[str, Any]] = [
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1000),
    ]
    scheme, _, addresses = target.partition(":")
    if scheme in ("ipv4", "ipv6") and "," in addresses:
        options.append(("grpc.lb_policy_name", "round_robin"))
        options.append(("grpc.default_authority", addresses.split(",")[0]))
    return options


def _renew_failed(slot: Slot, err: AdmissionError, tries: int) -> None:
    """Log a renewal that failed and will be retried: once per outage, then every tenth try."""
    if tries == 1 or tries % 10 == 0:
        log.warning("renewing %s failed (try %d, retrying within the lease): %s", slot.ticket_id, tries, err)


def _renew_backoff(backoff: float, every: float) -> float:
    """The wait before the next retry of a failed renewal: doubling from 50 ms, at most a
    quarter of the renew interval, so several retries fit in every interval."""
    return min(backoff * 2, max(every / 4, _FIRST_BACKOFF))


class _Renewer:
    """The background renewal of an :class:`AsyncAdmissionClient` slot. Until its first
    renewal is due it is a timer, not a task: a slot held for less than a third of its lease
    (most model calls) costs no task to start, cancel and wait for."""

    def __init__(self, client: AsyncAdmissionClient, slot: Slot, req: pb.SubmitRequest) -> None:
        self._task: asyncio.Task[None] | None = None
        #: Held while the ticket is re-registered (Reclaim), which is never cancelled half-way:
        #: the slot's Release must come after it, or the authority could take the Reclaim last.
        self.reclaiming = asyncio.Lock()
        self._timer = asyncio.get_running_loop().call_later(_renew_every(slot), self._start, client, slot, req)

    def _start(self, client: AsyncAdmissionClient, slot: Slot, req: pb.SubmitRequest) -> None:
        self._task = asyncio.get_running_loop().create_task(
            client._renew_until(slot, req, due=True, reclaiming=self.reclaiming)
        )

    async def stop(self) -> None:
        """Stop renewing (waiting for a renewal under way to end, and for a Reclaim under way
        to be answered): once it returns, nothing re-registers the slot."""
        self._timer.cancel()
        if self._task is not None:
            async with self.reclaiming:
                self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def _ended(ticket_id: str, state: int, superseded_by: str = "", run_id: str | None = None) -> TicketEnded:
    """The error for a ticket that ended before its run started: :class:`Superseded` when a
    newer ticket of its key took its place."""
    if state == pb.TICKET_STATE_SUPERSEDED:
        return Superseded(ticket_id, superseded_by, run_id)
    return TicketEnded(ticket_id, _state_name(state), run_id)


def _after_renew(slot: Slot, state: int, reclaimed: bool, superseded_by: str = "") -> bool:
    """Record what a background renewal found; True while the slot is still held."""
    if superseded_by and superseded_by != slot.superseded_by:
        slot.superseded_by = superseded_by
        log.warning("ticket %s is superseded by %s, a newer ticket of its key: its run should stop",
                    slot.ticket_id, superseded_by)
    if reclaimed:
        slot.reclaims += 1
        log.warning("ticket %s was unknown to the authority (its state was lost, or its lease "
                    "ran out): re-registered, its run counts again", slot.ticket_id)
    if state in (pb.TICKET_STATE_ADMITTED, pb.TICKET_STATE_PARKED):
        return True
    slot.lost = True
    log.error("ticket %s is %s: its slot is lost", slot.ticket_id, _state_name(state))
    return False


def _queued_again(slot: Slot, r: pb.SubmitResponse, req: pb.SubmitRequest,
                  why: str = "was lost by the authority") -> bool:
    """A ticket of the run that never started was submitted again under its run_id (the
    authority lost it while it was queued, or its lease lapsed before its admission reached
    this replica), and ``r`` answered: follow the new ticket. True when it was admitted at
    once; raises when it ended."""
    log.warning("the ticket of run %s %s: submitted again as %s", req.run_id, why, r.ticket_id)
    slot.ticket_id = r.ticket_id
    if r.state == pb.TICKET_STATE_ADMITTED:
        slot.grant = r.grant
        return True
    if r.state != pb.TICKET_STATE_QUEUED:
        raise _ended(r.ticket_id, r.state, r.superseded_by, req.run_id)
    return False


def _resubmission(req: pb.SubmitRequest) -> pb.SubmitRequest:
    """``req`` again, for a run whose ticket lapsed before the run started: an EXPIRED ticket
    of the run does not answer it, a new one is made (never Reclaim: the run never ran)."""
    again = pb.SubmitRequest()
    again.CopyFrom(req)
    again.resubmit_expired = True
    return again


#: Why a ticket this slot followed is submitted again.
_LAPSED = "lapsed before its admission reached this replica (the run had not started)"


def _reclaim_refused(slot: Slot, err: AdmissionError) -> None:
    slot.lost = True
    log.error("ticket %s cannot be re-registered: %s; its slot is lost", slot.ticket_id, err)


def _status_of(exc: BaseException) -> int | None:
    """The HTTP status an SDK error carries: ``status_code`` (openai, anthropic), ``status``,
    or ``response.status_code`` (httpx)."""
    for holder in (exc, getattr(exc, "response", None)):
        for attr in ("status_code", "status"):
            value = getattr(holder, attr, None)
            if isinstance(value, int) and 100 <= value <= 599:
                return value
    return None


def outcome_of(exc: BaseException) -> Outcome:
    """The outcome a model provider's error stands for: HTTP 429 or a rate-limit error class is
    ``rate_limited``; 5xx, timeouts and overload or connection errors are ``overloaded``;
    anything else is ``failed``. Reads the status the openai, anthropic and httpx errors carry,
    then the class names along the exception and its cause."""
    seen: BaseException | None = exc
    for _ in range(3):
        if seen is None:
            break
        status = _status_of(seen)
        if status == 429:
            return "rate_limited"
        if status is not None and status >= 500:
            return "overloaded"
        if status is not None:
            return "failed"
        names = " ".join(c.__name__ for c in type(seen).__mro__)
        if "RateLimit" in names:
            return "rate_limited"
        if isinstance(seen, TimeoutError) or any(
            k in names for k in ("Timeout", "Overloaded", "ServiceUnavailable", "InternalServer", "APIConnection")
        ):
            return "overloaded"
        seen = seen.__cause__
    return "failed"


def reported_outcome(failure: BaseException | None, outcome: Outcome | None = None) -> Any:
    """The Release outcome (``pb.OUTCOME_*``) of a block that ended with ``failure`` (None: it
    returned): ``outcome`` if given, else ok or :func:`outcome_of` the failure; None for a block
    the caller interrupted or cancelled (nothing is reported then)."""
    if isinstance(failure, (KeyboardInterrupt, SystemExit, GeneratorExit, asyncio.CancelledError)):
        return None
    return _OUTCOMES[outcome or (outcome_of(failure) if failure is not None else "ok")]


def _report(slot: Slot, failure: BaseException | None, started: float) -> pb.ReleaseRequest:
    """The Release of an admitted slot with what its block came to (nothing for a block the
    caller interrupted or cancelled)."""
    req = pb.ReleaseRequest(ticket_id=slot.ticket_id)
    outcome = reported_outcome(failure, slot.outcome)
    if outcome is None:
        return req
    req.outcome = outcome
    req.latency_ms = slot.latency_ms if slot.latency_ms is not None else int((time.monotonic() - started) * 1000)
    return req


@dataclass(frozen=True)
class Authorization:
    """Authorize's answer for one model step."""

    decision: Literal["allow", "deny", "unknown"]
    #: Empty for allow; RESOURCE_LIMIT, QUOTA_EXHAUSTED or RESOURCE_USAGE_UNKNOWN otherwise.
    reason: str
    granted_output_tokens: int
    replay: bool
    remaining_tokens: int | None
    remaining_cost_usd: float | None

    @property
    def allowed(self) -> bool:
        return self.decision == "allow"


@dataclass(frozen=True)
class AuthAttempt:
    """CheckAuthAttempt's answer."""

    allowed: bool
    remaining: int
    retry_after_ms: int
    locked: bool
    degraded: bool
    #: Empty when allowed; LOCKED_OUT, ATTEMPTS_EXHAUSTED or KEY_TABLE_FULL otherwise.
    reason: str


def _metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """Call metadata carrying a bearer token, if one is given."""
    return (("authorization", f"Bearer {token}"),) if token else ()


def _default_instance_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass
class _Key:
    """A Submit's key and what it asks of the key's other tickets."""

    key: str
    policy: KeyPolicy
    supersede_running: bool
    debounce: float | None
    debounce_max: float | None

    def into(self, req: pb.SubmitRequest) -> None:
        if self.policy not in _KEY_POLICIES:
            raise ValueError(f"key_policy must be one of {sorted(_KEY_POLICIES)}, not {self.policy!r}")
        req.key = self.key
        req.key_policy = _KEY_POLICIES[self.policy]
        req.supersede_running = self.supersede_running
        if self.debounce:
            req.debounce.FromMilliseconds(round(self.debounce * 1000))
        if self.debounce_max:
            req.debounce_max.FromMilliseconds(round(self.debounce_max * 1000))


def _key(key: str | None, policy: KeyPolicy, supersede_running: bool, debounce: float | None,
         debounce_max: float | None) -> _Key | None:
    if key is None:
        if policy != "none" or supersede_running or debounce or debounce_max:
            raise ValueError("key_policy, supersede_running and debounce need a key")
        return None
    return _Key(key, policy, supersede_running, debounce, debounce_max)


class _Requests:
    """Builds requests for one host and replica."""

    def __init__(self, host_id: str, instance_id: str | None) -> None:
        self.host_id = host_id
        self.instance_id = instance_id or _default_instance_id()

    def submit(
        self,
        subject: str,
        run_id: str | None,
        account_id: str | None,
        mode: Mode,
        rss_mb: int | None,
        priority: int,
        key: _Key | None = None,
    ) -> pb.SubmitRequest:
        req = pb.SubmitRequest(
            host_id=self.host_id,
            instance_id=self.instance_id,
            subject=subject,
            account_id=account_id or "",
            run_id=run_id or uuid.uuid4().hex,
            mode=pb.SUBMIT_MODE_TRY if mode == "try" else pb.SUBMIT_MODE_QUEUE,
            priority=priority,
        )
        if rss_mb is not None:
            req.rss_mb = rss_mb
        if key is not None:
            key.into(req)
        return req

    def authorize(
        self,
        run_id: str,
        step: int,
        subject: str,
        account_id: str | None,
        model: str,
        requested_output_tokens: int,
        estimated_input_tokens: int,
        estimated_cost_usd: float,
    ) -> pb.AuthorizeRequest:
        return pb.AuthorizeRequest(
            host_id=self.host_id,
            run_id=run_id,
            step=step,
            subject=subject,
            account_id=account_id or "",
            model=model,
            requested_output_tokens=requested_output_tokens,
            estimated_input_tokens=estimated_input_tokens,
            estimated_cost_usd=estimated_cost_usd,
        )

    def settle(
        self,
        run_id: str,
        step: int,
        input_tokens: int,
        output_tokens: int,
        cost_usd: float,
        coverage: Coverage,
    ) -> pb.SettleRequest:
        return pb.SettleRequest(
            host_id=self.host_id,
            run_id=run_id,
            step=step,
            usage=pb.Usage(
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                cost_usd=cost_usd,
                coverage=_COVERAGE[coverage],
            ),
        )


def _authorization(r: pb.AuthorizeResponse) -> Authorization:
    return Authorization(
        decision=_DECISION.get(r.decision, "deny"),  # type: ignore[arg-type]
        reason=r.reason,
        granted_output_tokens=r.granted_output_tokens,
        replay=r.replay,
        remaining_tokens=r.remaining_tokens if r.HasField("remaining_tokens") else None,
        remaining_cost_usd=r.remaining_cost_usd if r.HasField("remaining_cost_usd") else None,
    )


def _auth_attempt(r: pb.AuthAttemptResponse) -> AuthAttempt:
    return AuthAttempt(
        allowed=r.allowed,
        remaining=r.remaining,
        retry_after_ms=r.retry_after_ms,
        locked=r.locked,
        degraded=r.degraded,
        reason=r.reason,
    )


def _state_name(state: int) -> str:
    return pb.TicketState.Name(state).removeprefix("TICKET_STATE_")  # type: ignore[arg-type]


class _Connection:
    """What both clients share: the host and replica they act for, the token, the deadline."""

    _req: _Requests
    _md: tuple[tuple[str, str], ...]
    _timeout: float

    @property
    def host_id(self) -> str:
        return self._req.host_id

    @property
    def instance_id(self) -> str:
        return self._req.instance_id

    @property
    def timeout(self) -> float:
        """The deadline of each unary call, seconds."""
        return self._timeout

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The call metadata (the bearer token), for calls made on ``stub`` directly."""
        return self._md

    #: Set by ``close()``: from then on every call raises :class:`ClientClosed`.
    _closed: bool = False

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed(type(self).__name__)

    def _release_run_request(self, run_id: str) -> pb.ReleaseRequest:
        return pb.ReleaseRequest(host_id=self._req.host_id, run_id=run_id)


class AdmissionClient(_Connection):
    """A blocking client for one gateway host (``host_id``) and replica (``instance_id``).

    The channel is created lazily on first use: TLS with ``credentials`` (e.g.
    ``grpc.ssl_channel_credentials(ca)``), plaintext without, or the ``channel`` you pass.
    ``token`` is sent as ``authorization: Bearer <token>`` on every call. ``close()`` (or
    ``with``) closes the channel.
    """

    def __init__(
        self,
        target: str,
        *,
        host_id: str,
        instance_id: str | None = None,
        channel: grpc.Channel | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        timeout: float = 10.0,
        token: str | None = None,
    ) -> None:
        self._target = target
        self._channel = channel
        self._credentials = credentials
        self._stub: pb_grpc.AdmissionStub | None = None
        self._req = _Requests(host_id, instance_id)
        self._timeout = timeout
        self._md = _metadata(token)

    def __enter__(self) -> AdmissionClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the channel. Every later call, and every retry or renewal under way, raises
        :class:`~admission_authority_client.ClientClosed` at once; nothing reopens it."""
        self._closed = True
        if self._channel is not None:
            self._channel.close()
            self._channel = None
            self._stub = None

    @property
    def stub(self) -> pb_grpc.AdmissionStub:
        """The generated stub, for calls the wrapper does not cover."""
        self._check_open()
        if self._stub is None:
            if self._channel is None:
                self._channel = (
                    grpc.secure_channel(self._target, self._credentials, options=_channel_options(self._target))
                    if self._credentials is not None
                    else grpc.insecure_channel(self._target, options=_channel_options(self._target))
                )
            self._stub = pb_grpc.AdmissionStub(self._channel)
        return self._stub

    @contextlib.contextmanager
    def slot(
        self,
        subject: str,
        *,
        run_id: str | None = None,
        account_id: str | None = None,
        mode: Mode = "queue",
        rss_mb: int | None = None,
        wait_timeout: float | None = None,
        priority: int = 0,
        on_queued: Callable[..., None] | None = None,
        key: str | None = None,
        key_policy: KeyPolicy = "none",
        supersede_running: bool = False,
        debounce: float | None = None,
        debounce_max: float | None = None,
    ) -> Iterator[Slot]:
        """Hold one installation-wide slot for the block: Submit, wait in the queue if need be,
        renew in the background, and Release on exit, on error and on interruption (a queued
        ticket is withdrawn). Refusals raise :class:`~admission_authority_client.Busy` and its
        siblings; ``wait_timeout`` (seconds) bounds the wait in the queue (``TimeoutError``).

        ``priority`` is 1 (highest) .. 5 (lowest), 0 for the host's default (3). While the
        ticket waits, ``on_queued(position, eta_ms)`` (or ``on_queued(position, eta_ms,
        blocked_by)`` when it takes three: what holds it, ``"TOTAL"``, ``"SUBJECT"``,
        ``"ACCOUNT"``, ``"MEMORY"``, ``"TURN"`` or ``"STATE_LOSS"``) is called with its place in
        line and the
        authority's estimate of the wait (0 = unknown), first from the Submit's answer and then
        whenever the Wait stream reports a change.

        A Submit the authority could not answer is repeated with the same run_id within the
        client's deadline; when it still fails and may have made a ticket, that ticket is
        released by run before the error is raised, so no slot is left held.

        ``key`` (e.g. a conversation id) with ``key_policy`` lets the newest message of a
        conversation win (``keep_newest``, ``serial_keep_newest``: a waiting slot whose ticket a
        newer one took over raises :class:`~admission_authority_client.Superseded`), or runs a
        key's runs one at a time (``serial``), or refuses a second one
        (``reject_new``: :class:`~admission_authority_client.KeyBusy`). With
        ``supersede_running`` the key's running slots learn it at their next renewal
        (:attr:`Slot.superseded_by`); ``debounce`` (seconds) admits a ticket only once no newer
        one of its key came for that long, at most ``debounce_max`` after the first.
        """
        req = self._req.submit(
            subject, run_id, account_id, mode, rss_mb, priority,
            _key(key, key_policy, supersede_running, debounce, debounce_max),
        )
        try:
            r = self._unary(self.stub.Submit, req)
        except AdmissionError as e:
            if e.may_have_applied:
                self._release_run_soon(req.run_id)
            raise
        release: pb.ReleaseRequest | None = None
        try:
            slot = Slot(r.ticket_id, r.grant, r.lease_ttl_ms, shadow_reason=r.shadow_reason)
            if r.state == pb.TICKET_STATE_QUEUED:
                if on_queued is not None:
                    _tell(on_queued, r.position, r.eta_ms, r.blocked_by)
                while True:
                    try:
                        slot.grant = self._wait(r.ticket_id, wait_timeout, on_queued)
                        if self._still_held(r.ticket_id):
                            break
                        r = self._unary(self.stub.Submit, _resubmission(req))
                        why = _LAPSED
                    except TicketEnded as e:
                        if e.state != "EXPIRED":
                            raise
                        r = self._unary(self.stub.Submit, _resubmission(req))
                        why = _LAPSED
                    except AdmissionError as e:
                        if e.code != grpc.StatusCode.NOT_FOUND:
                            raise
                        r = self._unary(self.stub.Submit, req)
                        why = "was lost by the authority while it was queued"
                    if _queued_again(slot, r, req, why):
                        break
            elif r.state != pb.TICKET_STATE_ADMITTED:
                raise _ended(r.ticket_id, r.state, r.superseded_by, req.run_id)
            stop = threading.Event()
            # Held by the renewer while it re-registers the ticket, and by the run's exit while
            # it stops the renewer: a slot that has been left is never reclaimed.
            leaving = threading.Lock()
            renewer = threading.Thread(
                target=self._renew_until, args=(slot, stop, req, leaving), daemon=True,
                name="admission-renew",
            )
            renewer.start()
            started = time.monotonic()
            failure: BaseException | None = None
            try:
                yield slot
            except BaseException as e:
                failure = e
                raise
            finally:
                with leaving:
                    stop.set()
                renewer.join()
                release = _report(slot, failure, started)
        finally:
            self._release(r.ticket_id, release)

    def _wait(
        self,
        ticket_id: str,
        timeout: float | None,
        on_queued: Callable[..., None] | None = None,
    ) -> int:
        """Follow a queued ticket until it is admitted; a stream cut while it waits (the
        authority restarted or could not be reached) is reopened, with backoff, for up to
        :data:`_RESUME_WAIT_FOR` of trying, within ``timeout`` overall. Raises
        :class:`TicketEnded` when the ticket ended (EXPIRED: its lease lapsed while the stream
        was cut)."""
        end = None if timeout is None else time.monotonic() + timeout
        backoff = _FIRST_BACKOFF
        cut_since: float | None = None
        while True:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"ticket {ticket_id} still queued after {timeout} s")
            try:
                for event in self.stub.Wait(pb.WaitRequest(ticket_id=ticket_id), timeout=left, metadata=self._md):
                    cut_since, backoff = None, _FIRST_BACKOFF
                    if event.state == pb.TICKET_STATE_ADMITTED:
                        return event.grant
                    if event.state != pb.TICKET_STATE_QUEUED:
                        raise _ended(ticket_id, event.state, event.superseded_by)
                    if on_queued is not None:
                        _tell(on_queued, event.position, event.eta_ms, event.blocked_by)
                err = AdmissionError(f"the Wait stream of ticket {ticket_id} ended without an answer")
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                    raise TimeoutError(f"ticket {ticket_id} still queued after {timeout} s") from None
                err = translate(e)
                if not err.retryable:
                    raise err from None
            now = time.monotonic()
            cut_since = now if cut_since is None else cut_since
            if now - cut_since > _RESUME_WAIT_FOR:
                raise err
            log.warning("the Wait stream of %s was cut (will reopen it): %s", ticket_id, err)
            time.sleep(backoff if end is None else max(min(backoff, end - now), 0))
            backoff = min(backoff * 2, _MAX_BACKOFF)

    def _unary(self, rpc: Callable[..., T], request: Any, *, idempotent: bool = True) -> T:
        """One unary call within the client's deadline, repeated (same request, so the same
        idempotency key) while the authority or its store cannot answer; raises the typed error
        of the last try. A call that is not idempotent is repeated only when it was certainly
        not applied (STORE_UNAVAILABLE)."""
        end = time.monotonic() + self._timeout
        backoff = _FIRST_BACKOFF
        while True:
            self._check_open()
            try:
                return rpc(request, timeout=max(end - time.monotonic(), 0.001), metadata=self._md)
            except grpc.RpcError as e:
                err = translate(e)
            if _give_up(err, idempotent, end - time.monotonic(), backoff):
                raise err
            time.sleep(backoff)
            backoff = min(backoff * 2, _MAX_BACKOFF)

    def release_run(self, run_id: str) -> str:
        """Release (or withdraw) the ticket this host's Submit made for ``run_id``, for a caller
        that never saw its ticket id. Returns the state it had (``EXPIRED`` when there was
        none); releasing twice is no error."""
        r = self._unary(self.stub.Release, self._release_run_request(run_id))
        return _state_name(r.previous_state)

    def _release_run_soon(self, run_id: str) -> None:
        """Release by run in a background thread, retrying until the authority answers (at most
        :data:`_RELEASE_RUN_FOR`): a Submit given up on may still be applied once the store
        answers again, and its slot must come back then, not a lease later."""

        def run() -> None:
            end = time.monotonic() + _RELEASE_RUN_FOR
            while True:
                try:
                    self.release_run(run_id)
                    return
                except AdmissionError as e:
                    if not e.retryable or time.monotonic() > end:
                        log.warning("releasing run %s failed; its lease will expire: %s", run_id, e)
                        return

        threading.Thread(target=run, daemon=True, name="admission-release-run").start()

    def _renew_until(
        self, slot: Slot, stop: threading.Event, req: pb.SubmitRequest, leaving: threading.Lock
    ) -> None:
        """Renew every third of the lease until ``stop``. A Renew that fails is retried at
        once with backoff (each try waits at most half an interval, and a channel of several
        addresses sends it to another replica), not an interval later, so the lease is lost
        only when the authority was unreachable for most of it. A ticket the authority no
        longer knows (EXPIRED: its store lost it, or its lease ran out while this replica was
        cut off) is re-registered with Reclaim, so its run keeps counting against the caps;
        only a refused Reclaim (the ticket ended) marks the slot lost. Never once the run has
        left its slot (``stop``, set under ``leaving``): a finished run holds nothing again."""
        every = _renew_every(slot)
        wait = every
        while not stop.wait(wait):
            wait, tries, backoff = every, 0, _FIRST_BACKOFF
            while True:
                tries += 1
                reclaimed = False
                try:
                    r = self.stub.Renew(pb.RenewRequest(ticket_ids=[slot.ticket_id]), timeout=every / 2, metadata=self._md)
                    state = r.tickets[0].state if r.tickets else pb.TICKET_STATE_ADMITTED
                    superseded_by = r.tickets[0].superseded_by if r.tickets else ""
                    if state == pb.TICKET_STATE_EXPIRED:
                        with leaving:
                            if stop.is_set():
                                return
                            back = self.stub.Reclaim(_held(req, slot), timeout=every, metadata=self._md)
                        state, reclaimed = back.state, back.reclaimed
                except ClientClosed as e:
                    _reclaim_refused(slot, e)
                    return
                except grpc.RpcError as e:
                    err = translate(e)
                    if not err.retryable:
                        _reclaim_refused(slot, err)
                        return
                    _renew_failed(slot, err, tries)
                    if stop.wait(backoff):
                        return
                    backoff = _renew_backoff(backoff, every)
                    continue
                if tries > 1:
                    log.info("renewed %s after %d tries", slot.ticket_id, tries)
                if not _after_renew(slot, state, reclaimed, superseded_by):
                    return
                break

    def _still_held(self, ticket_id: str) -> bool:
        """Renew an admission heard on a Wait stream before the run starts on it: True when it
        is still admitted (its lease now runs from this renewal), False when it lapsed. The
        event may have reached this process long after it was sent (a stream held up by the
        network, a process frozen with it in its buffers), so no figure in it can say how much
        lease is left: one Renew per queued admission does."""
        r = self._unary(self.stub.Renew, pb.RenewRequest(ticket_ids=[ticket_id]))
        state = r.tickets[0].state if r.tickets else pb.TICKET_STATE_EXPIRED
        return state == pb.TICKET_STATE_ADMITTED

    def _release(self, ticket_id: str, req: pb.ReleaseRequest | None = None) -> None:
        try:
            self._unary(self.stub.Release, req or pb.ReleaseRequest(ticket_id=ticket_id))
        except AdmissionError as e:
            # The lease frees the slot within lease_ttl anyway.
            log.warning("releasing %s failed; its lease will expire: %s", ticket_id, e)

    def authorize(
        self,
        run_id: str,
        step: int,
        subject: str,
        *,
        requested_output_tokens: int,
        estimated_input_tokens: int = 0,
        account_id: str | None = None,
        model: str = "",
        estimated_cost_usd: float = 0.0,
    ) -> Authorization:
        """Reserve budget for one model step (``step`` is 1-based)."""
        req = self._req.authorize(
            run_id, step, subject, account_id, model,
            requested_output_tokens, estimated_input_tokens, estimated_cost_usd,
        )
        return _authorization(self._unary(self.stub.Authorize, req))

    def settle(
        self,
        run_id: str,
        step: int,
        *,
        input_tokens: int,
        output_tokens: int,
        cost_usd: float = 0.0,
        coverage: Coverage = "complete",
    ) -> bool:
        """Record what a step used; returns True when this repeated an identical Settle."""
        req = self._req.settle(run_id, step, input_tokens, output_tokens, cost_usd, coverage)
        return self._unary(self.stub.Settle, req).replay

    def check_auth_attempt(self, endpoint: str, identity: str, *, peek: bool = False) -> AuthAttempt:
        """Count one attempt against ``endpoint``'s bucket for ``identity``; with ``peek``,
        count nothing and answer what an attempt would meet (e.g. whether it is locked out)."""
        req = pb.AuthAttemptRequest(endpoint=endpoint, identity=identity, peek=peek)
        # Each attempt counts: repeated only when it certainly was not counted.
        return _auth_attempt(self._unary(self.stub.CheckAuthAttempt, req, idempotent=peek))

    def reset_auth_attempts(self, endpoint: str, identity: str) -> bool:
        """Clear a bucket after a verified success; True when there was one."""
        req = pb.AuthResetRequest(endpoint=endpoint, identity=identity)
        return self._unary(self.stub.ResetAuthAttempts, req).cleared

    def stats(self) -> pb.Stats:
        """Live counters of this client's host."""
        return self._unary(self.stub.GetStats, pb.GetStatsRequest(host_id=self._req.host_id))


_LIMIT_FIELDS = {"total", "per_subject", "per_account", "overflow_policy", "lease_ttl_ms",
                 "retention_ms", "max_retained", "priority_aging_ms", "mode"}
#: Map fields update_limits replaces whole (a dict of name to value).
_MAP_FIELDS = {"subjects", "accounts", "weights"}
_QUEUE_FIELDS = {"queue_total": "total", "queue_per_subject": "per_subject",
                 "queue_hard_total": "hard_total"}


class OperatorClient:
    """A blocking client for the ``Operator`` service (an operator credential's ``token``):
    a host's limits while the fleet runs, and the generated ``stub`` for the other calls.

    ``update_limits("gw-1", total=64)`` reads the limits in force, changes the named fields and
    writes them back at the revision it read, reading again if another operator changed them in
    between; ``reset_limits`` returns the host to the configuration file."""

    #: Set by ``close()``: from then on every call raises :class:`ClientClosed`.
    _closed: bool = False

    def __init__(
        self,
        target: str,
        *,
        channel: grpc.Channel | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        timeout: float = 10.0,
        token: str | None = None,
    ) -> None:
        self._target = target
        self._channel = channel
        self._credentials = credentials
        self._stub: pb_grpc.OperatorStub | None = None
        self._timeout = timeout
        self._md = _metadata(token)

    def __enter__(self) -> OperatorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the channel; every later call raises
        :class:`~admission_authority_client.ClientClosed` at once."""
        self._closed = True
        if self._channel is not None:
            self._channel.close()
            self._channel = None
            self._stub = None

    @property
    def stub(self) -> pb_grpc.OperatorStub:
        """The generated stub, for calls the wrapper does not cover."""
        if self._closed:
            raise ClientClosed(type(self).__name__)
        if self._stub is None:
            if self._channel is None:
                self._channel = (
                    grpc.secure_channel(self._target, self._credentials, options=_channel_options(self._target))
                    if self._credentials is not None
                    else grpc.insecure_channel(self._target, options=_channel_options(self._target))
                )
            self._stub = pb_grpc.OperatorStub(self._channel)
        return self._stub

    def _call(self, rpc: Callable[..., T], request: Any) -> T:
        try:
            return rpc(request, timeout=self._timeout, metadata=self._md)
        except grpc.RpcError as e:
            raise translate(e) from None

    def get_limits(self, host_id: str, *, or_defaults: bool = False) -> pb.GetLimitsResponse:
        """The limits ``host_id`` is decided with now, their ``source`` and ``revision``. A host
        that is not one yet answers NOT_FOUND, or with ``or_defaults`` the limits it would
        start with (revision 0); either way nothing is made."""
        return self._call(self.stub.GetLimits, pb.GetLimitsRequest(host_id=host_id, or_defaults=or_defaults))

    def set_limits(
        self, host_id: str, limits: pb.HostLimits, *, expected_revision: int = 0
    ) -> pb.SetLimitsResponse:
        """Put ``limits`` (the whole message) in force; with ``expected_revision``, only if the
        limits are still at it (else :class:`AdmissionError` with code FAILED_PRECONDITION)."""
        req = pb.SetLimitsRequest(host_id=host_id, limits=limits, expected_revision=expected_revision)
        return self._call(self.stub.SetLimits, req)

    def update_limits(
        self, host_id: str, **changes: int | str | dict[str, int] | None
    ) -> pb.SetLimitsResponse:
        """Change some fields of the limits in force (``total``, ``per_subject``,
        ``per_account`` (None: no cap), ``queue_total``, ``queue_per_subject``,
        ``queue_hard_total``, ``overflow_policy``, ``lease_ttl_ms``, ``retention_ms``,
        ``max_retained``, ``priority_aging_ms``, ``mode`` (``"enforce"`` or ``"shadow"``),
        and the maps ``subjects``, ``accounts``, ``weights``, each replaced whole by the dict
        given) and keep the rest, at the revision read."""
        unknown = set(changes) - _LIMIT_FIELDS - set(_QUEUE_FIELDS) - _MAP_FIELDS
        if unknown:
            raise TypeError(f"update_limits: unknown fields {sorted(unknown)}")
        nulls = sorted(k for k, v in changes.items() if v is None and k != "per_account")
        if nulls:
            raise TypeError(f"update_limits: only per_account may be None, not {nulls}")

        def change(limits: pb.HostLimits) -> bool:
            for name, value in changes.items():
                if name in _QUEUE_FIELDS:
                    setattr(limits.queue, _QUEUE_FIELDS[name], value)
                elif name in _MAP_FIELDS:
                    if not isinstance(value, dict):
                        raise TypeError(f"update_limits: {name} takes a dict of name to value")
                    field = getattr(limits, name)
                    field.clear()
                    field.update(value)
                elif value is None and name == "per_account":
                    limits.ClearField("per_account")
                else:
                    setattr(limits, name, value)
            return True

        reply = self.edit_limits(host_id, change)
        assert reply is not None
        return reply

    def edit_limits(
        self, host_id: str, change: Callable[[pb.HostLimits], bool]
    ) -> pb.SetLimitsResponse | None:
        """Read the limits in force, let ``change`` edit a copy (it returns False when there is
        nothing to write: then nothing is, and the answer is None) and write it back at the
        revision read; read again if another operator changed them in between."""
        for _ in range(5):
            current = self.get_limits(host_id, or_defaults=True)
            limits = pb.HostLimits()
            limits.CopyFrom(current.limits)
            if not change(limits):
                return None
            try:
                return self.set_limits(host_id, limits, expected_revision=current.revision)
            except AdmissionError as e:
                if e.code != grpc.StatusCode.FAILED_PRECONDITION:
                    raise
        raise AdmissionError(f"the limits of {host_id} kept changing")

    def reset_limits(self, host_id: str, *, expected_revision: int = 0) -> pb.ResetLimitsResponse:
        """Return ``host_id`` to the configuration file's limits."""
        req = pb.ResetLimitsRequest(host_id=host_id, expected_revision=expected_revision)
        return self._call(self.stub.ResetLimits, req)


class AsyncAdmissionClient(_Connection):
    """The asyncio client: the same calls as :class:`AdmissionClient`, awaited. Its channel is
    opened lazily, on the event loop that first uses it, so the client may be built before any
    loop runs."""

    def __init__(
        self,
        target: str,
        *,
        host_id: str,
        instance_id: str | None = None,
        channel: grpc.aio.Channel | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        timeout: float = 10.0,
        token: str | None = None,
    ) -> None:
        self._target = target
        self._channel = channel
        self._credentials = credentials
        self._given_channel = channel is not None
        self._token = token
        self._stub: pb_grpc.AdmissionAsyncStub | None = None
        self._req = _Requests(host_id, instance_id)
        self._timeout = timeout
        self._md = _metadata(token)
        #: The event loop the channel was opened on.
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Releases by run still retrying in the background.
        self._background: set[asyncio.Task[None]] = set()

    def blocking(self, *, timeout: float | None = None) -> AdmissionClient:
        """A blocking client for the same authority, host, replica, credentials and token
        (e.g. for code that must answer synchronously). Not possible for a client built
        from a ready ``channel``: pass ``credentials`` instead."""
        if self._given_channel:
            raise ValueError("a client built from a channel cannot be copied; pass credentials= instead")
        return AdmissionClient(
            self._target,
            host_id=self._req.host_id,
            instance_id=self._req.instance_id,
            credentials=self._credentials,
            timeout=self._timeout if timeout is None else timeout,
            token=self._token,
        )

    async def connect(self, timeout: float | None = None) -> bool:
        """Open the channel now (TCP and HTTP/2 handshakes) rather than on the first call, so
        that call is as prompt as the rest; True when it is ready within ``timeout`` (default
        the client's)."""
        self.stub  # opens the channel on the running loop
        assert self._channel is not None
        try:
            await asyncio.wait_for(self._channel.channel_ready(), timeout or self._timeout)
            return True
        except asyncio.TimeoutError:
            return False

    async def __aenter__(self) -> AsyncAdmissionClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Wait for the releases by run still retrying in the background, then close the
        channel. Every later call, and every retry or renewal under way, raises
        :class:`~admission_authority_client.ClientClosed` at once; nothing reopens it."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        self._closed = True
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
            self._stub = None

    @property
    def stub(self) -> pb_grpc.AdmissionAsyncStub:
        """The generated asyncio stub, for calls the wrapper does not cover. A channel belongs
        to the event loop it was opened on: once that loop has closed (one ``asyncio.run``
        ended and another began), the next call opens a new channel on the running loop."""
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if (
            self._stub is not None
            and not self._given_channel
            and loop is not None
            and self._loop is not None
            and self._loop is not loop
            and self._loop.is_closed()
        ):
            # The old channel died with its loop; it cannot be closed from this one.
            self._channel = None
            self._stub = None
        if self._stub is None:
            self._loop = loop
            if self._channel is None:
                self._channel = (
                    grpc.aio.secure_channel(self._target, self._credentials, options=_channel_options(self._target))
                    if self._credentials is not None
                    else grpc.aio.insecure_channel(self._target, options=_channel_options(self._target))
                )
            # AdmissionStub on an aio channel is the asyncio stub (AdmissionAsyncStub exists
            # only in the type stubs).
            self._stub = pb_grpc.AdmissionStub(self._channel)
        return self._stub

    @contextlib.asynccontextmanager
    async def slot(
        self,
        subject: str,
        *,
        run_id: str | None = None,
        account_id: str | None = None,
        mode: Mode = "queue",
        rss_mb: int | None = None,
        wait_timeout: float | None = None,
        priority: int = 0,
        on_queued: Callable[..., None] | None = None,
        key: str | None = None,
        key_policy: KeyPolicy = "none",
        supersede_running: bool = False,
        debounce: float | None = None,
        debounce_max: float | None = None,
    ) -> AsyncIterator[Slot]:
        """As :meth:`AdmissionClient.slot`; cancelling the task while it waits in the queue
        withdraws the ticket."""
        req = self._req.submit(
            subject, run_id, account_id, mode, rss_mb, priority,
            _key(key, key_policy, supersede_running, debounce, debounce_max),
        )
        try:
            r = await self._unary(self.stub.Submit, req)
        except AdmissionError as e:
            if e.may_have_applied:
                self._release_run_soon(req.run_id)
            raise
        except asyncio.CancelledError:
            # The Submit may have reached the authority: withdraw whatever it made.
            self._release_run_soon(req.run_id)
            raise
        release: pb.ReleaseRequest | None = None
        try:
            slot = Slot(r.ticket_id, r.grant, r.lease_ttl_ms, shadow_reason=r.shadow_reason)
            if r.state == pb.TICKET_STATE_QUEUED:
                if on_queued is not None:
                    _tell(on_queued, r.position, r.eta_ms, r.blocked_by)
                while True:
                    try:
                        slot.grant = await self._wait(r.ticket_id, wait_timeout, on_queued)
                        if await self._still_held(r.ticket_id):
                            break
                        r = await self._unary(self.stub.Submit, _resubmission(req))
                        why = _LAPSED
                    except TicketEnded as e:
                        if e.state != "EXPIRED":
                            raise
                        r = await self._unary(self.stub.Submit, _resubmission(req))
                        why = _LAPSED
                    except AdmissionError as e:
                        if e.code != grpc.StatusCode.NOT_FOUND:
                            raise
                        r = await self._unary(self.stub.Submit, req)
                        why = "was lost by the authority while it was queued"
                    if _queued_again(slot, r, req, why):
                        break
            elif r.state != pb.TICKET_STATE_ADMITTED:
                raise _ended(r.ticket_id, r.state, r.superseded_by, req.run_id)
            renewer = _Renewer(self, slot, req)
            started = time.monotonic()
            failure: BaseException | None = None
            try:
                yield slot
            except BaseException as e:
                failure = e
                raise
            finally:
                await renewer.stop()
                release = _report(slot, failure, started)
        finally:
            # Shielded, so a cancellation that interrupted the wait still withdraws the ticket.
            await asyncio.shield(self._release(r.ticket_id, release))

    async def _wait(
        self,
        ticket_id: str,
        timeout: float | None,
        on_queued: Callable[..., None] | None = None,
    ) -> int:
        """As :meth:`AdmissionClient._wait`, awaited."""
        loop = asyncio.get_running_loop()
        end = None if timeout is None else loop.time() + timeout
        backoff = _FIRST_BACKOFF
        cut_since: float | None = None
        while True:
            left = None if end is None else end - loop.time()
            if left is not None and left <= 0:
                raise TimeoutError(f"ticket {ticket_id} still queued after {timeout} s")
            try:
                call = self.stub.Wait(pb.WaitRequest(ticket_id=ticket_id), timeout=left, metadata=self._md)
                async for event in call:
                    cut_since, backoff = None, _FIRST_BACKOFF
                    if event.state == pb.TICKET_STATE_ADMITTED:
                        return int(event.grant)
                    if event.state != pb.TICKET_STATE_QUEUED:
                        raise _ended(ticket_id, event.state, event.superseded_by)
                    if on_queued is not None:
                        _tell(on_queued, event.position, event.eta_ms, event.blocked_by)
                err = AdmissionError(f"the Wait stream of ticket {ticket_id} ended without an answer")
            except grpc.aio.AioRpcError as e:
                if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                    raise TimeoutError(f"ticket {ticket_id} still queued after {timeout} s") from None
                err = translate(e)
                if not err.retryable:
                    raise err from None
            now = loop.time()
            cut_since = now if cut_since is None else cut_since
            if now - cut_since > _RESUME_WAIT_FOR:
                raise err
            log.warning("the Wait stream of %s was cut (will reopen it): %s", ticket_id, err)
            await asyncio.sleep(backoff if end is None else max(min(backoff, end - now), 0))
            backoff = min(backoff * 2, _MAX_BACKOFF)

    async def _unary(
        self, rpc: Callable[..., Awaitable[T]], request: Any, *, idempotent: bool = True
    ) -> T:
        """As :meth:`AdmissionClient._unary`, awaited."""
        loop = asyncio.get_running_loop()
        end = loop.time() + self._timeout
        backoff = _FIRST_BACKOFF
        while True:
            self._check_open()
            try:
                return await rpc(request, timeout=max(end - loop.time(), 0.001), metadata=self._md)
            except grpc.aio.AioRpcError as e:
                err = translate(e)
            if _give_up(err, idempotent, end - loop.time(), backoff):
                raise err
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, _MAX_BACKOFF)

    async def release_run(self, run_id: str) -> str:
        """As :meth:`AdmissionClient.release_run`, awaited."""
        r = await self._unary(self.stub.Release, self._release_run_request(run_id))
        return _state_name(r.previous_state)

    def _release_run_soon(self, run_id: str) -> None:
        """As :meth:`AdmissionClient._release_run_soon`, as a task of this loop (kept until it
        ends; :meth:`close` waits for it)."""

        async def run() -> None:
            end = asyncio.get_running_loop().time() + _RELEASE_RUN_FOR
            while True:
                try:
                    await self.release_run(run_id)
                    return
                except AdmissionError as e:
                    if not e.retryable or asyncio.get_running_loop().time() > end:
                        log.warning("releasing run %s failed; its lease will expire: %s", run_id, e)
                        return

        task = asyncio.get_running_loop().create_task(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _renew_until(
        self,
        slot: Slot,
        req: pb.SubmitRequest,
        *,
        due: bool = False,
        reclaiming: asyncio.Lock | None = None,
    ) -> None:
        """As :meth:`AdmissionClient._renew_until`, until cancelled; ``due``: the first renewal
        is due now. A Reclaim runs under ``reclaiming``, which the slot's exit takes before it
        cancels this: a slot that has been left is never reclaimed."""
        reclaiming = reclaiming or asyncio.Lock()
        every = _renew_every(slot)
        while True:
            if not due:
                await asyncio.sleep(every)
            due = False
            tries, backoff = 0, _FIRST_BACKOFF
            while True:
                tries += 1
                reclaimed = False
                try:
                    r = await self.stub.Renew(
                        pb.RenewRequest(ticket_ids=[slot.ticket_id]), timeout=every / 2, metadata=self._md
                    )
                    state = r.tickets[0].state if r.tickets else pb.TICKET_STATE_ADMITTED
                    superseded_by = r.tickets[0].superseded_by if r.tickets else ""
                    if state == pb.TICKET_STATE_EXPIRED:
                        async with reclaiming:
                            back = await self.stub.Reclaim(_held(req, slot), timeout=every, metadata=self._md)
                        state, reclaimed = back.state, back.reclaimed
                except ClientClosed as e:
                    _reclaim_refused(slot, e)
                    return
                except grpc.aio.AioRpcError as e:
                    err = translate(e)
                    if not err.retryable:
                        _reclaim_refused(slot, err)
                        return
                    _renew_failed(slot, err, tries)
                    await asyncio.sleep(backoff)
                    backoff = _renew_backoff(backoff, every)
                    continue
                if tries > 1:
                    log.info("renewed %s after %d tries", slot.ticket_id, tries)
                if not _after_renew(slot, state, reclaimed, superseded_by):
                    return
                break

    async def _still_held(self, ticket_id: str) -> bool:
        """As :meth:`AdmissionClient._still_held`, awaited."""
        r = await self._unary(self.stub.Renew, pb.RenewRequest(ticket_ids=[ticket_id]))
        state = r.tickets[0].state if r.tickets else pb.TICKET_STATE_EXPIRED
        return state == pb.TICKET_STATE_ADMITTED

    async def _release(self, ticket_id: str, req: pb.ReleaseRequest | None = None) -> None:
        try:
            await self._unary(self.stub.Release, req or pb.ReleaseRequest(ticket_id=ticket_id))
        except AdmissionError as e:
            log.warning("releasing %s failed; its lease will expire: %s", ticket_id, e)

    async def authorize(
        self,
        run_id: str,
        step: int,
        subject: str,
        *,
        requested_output_tokens: int,
        estimated_input_tokens: int = 0,
        account_id: str | None = None,
        model: str = "",
        estimated_cost_usd: float = 0.0,
    ) -> Authorization:
        """Reserve budget for one model step (``step`` is 1-based)."""
        req = self._req.authorize(
            run_id, step, subject, account_id, model,
            requested_output_tokens, estimated_input_tokens, estimated_cost_usd,
        )
        return _authorization(await self._unary(self.stub.Authorize, req))

    async def settle(
        self,
        run_id: str,
        step: int,
        *,
        input_tokens: int,
        output_tokens: int,
        cost_usd: float = 0.0,
        coverage: Coverage = "complete",
    ) -> bool:
        """Record what a step used; returns True when this repeated an identical Settle."""
        req = self._req.settle(run_id, step, input_tokens, output_tokens, cost_usd, coverage)
        return (await self._unary(self.stub.Settle, req)).replay

    async def check_auth_attempt(self, endpoint: str, identity: str, *, peek: bool = False) -> AuthAttempt:
        """Count one attempt against ``endpoint``'s bucket for ``identity``; with ``peek``,
        count nothing and answer what an attempt would meet (e.g. whether it is locked out)."""
        req = pb.AuthAttemptRequest(endpoint=endpoint, identity=identity, peek=peek)
        return _auth_attempt(await self._unary(self.stub.CheckAuthAttempt, req, idempotent=peek))

    async def reset_auth_attempts(self, endpoint: str, identity: str) -> bool:
        """Clear a bucket after a verified success; True when there was one."""
        req = pb.AuthResetRequest(endpoint=endpoint, identity=identity)
        return (await self._unary(self.stub.ResetAuthAttempts, req)).cleared

    async def stats(self) -> pb.Stats:
        """Live counters of this client's host."""
        return await self._unary(self.stub.GetStats, pb.GetStatsRequest(host_id=self._req.host_id))
