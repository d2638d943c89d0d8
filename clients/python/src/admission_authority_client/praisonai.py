"""Drop-ins for PraisonAI gateways (``praisonai-bot``): the authority instead of each process's
own admission gate and auth limiters.

* :class:`AuthorityGate`: PraisonAI's admission-gate contract (``enabled``, ``admit()``,
  ``stats()``, ``in_flight``, ``queued``) on the authority's tickets. One installation-wide cap
  for every replica; queued turns wait in the authority's fair queue; a turn waiting on a human
  approval lends its slot out (Park / Unpark); with ``authorize_output_tokens`` set, the turn's
  budget is checked with Authorize inside ``admit()`` and settled when the turn ends.
* :class:`AuthorityAuthLimiter`: PraisonAI's synchronous auth-limiter interface (``allow``,
  ``reset``, ``time_until_allowed``, ``prune``) on CheckAuthAttempt, with the fallback policy of
  PraisonAI's own Redis limiter: a local bucket, the authority skipped for 5 s after an error, a
  lockout earned locally outliving recovery, never failing open.
* :func:`install` wires both into one ``BotOS`` or ``WebSocketGateway``;
  :func:`patch_praisonai` replaces PraisonAI's gate and limiter factories process-wide (config-
  and CLI-driven starts) and returns an undo handle.
* :class:`UsageSink`: PraisonAI's token-usage sink; usage reported during a turn is settled
  against that turn's Authorize when it ends.

Needs PraisonAI: ``pip install 'admission-authority-client[praisonai]'``.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import logging
import os
import resource
import sys
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

import grpc
import grpc.aio

try:
    from praisonai_bot.bots import _admission as _praison_admission
    from praisonai_bot.bots._admission import AdmissionRejected
    from praisonai_bot.gateway import pairing as _praison_pairing
    from praisonai_bot.gateway import rate_limiter as _praison_rate_limiter
    from praisonai_bot.gateway.rate_limiter import AuthRateLimiter
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "admission_authority_client.praisonai needs PraisonAI: "
        "pip install 'admission-authority-client[praisonai]'"
    ) from e

from ._client import (
    _LAPSED,
    _RESUME_WAIT_FOR,
    AdmissionClient,
    AsyncAdmissionClient,
    reported_outcome,
)
from .errors import _details
from .v1 import admission_pb2 as pb

log = logging.getLogger("admission_authority_client.praisonai")

FailureMode = Literal["closed", "local"]

BUSY_MESSAGE = "Busy right now — please resend in a moment."
UNAVAILABLE_MESSAGE = "Busy right now — please resend in a moment."
BUDGET_MESSAGE = "This conversation has used up its budget for now."
SUPERSEDED_MESSAGE = "A newer message in this conversation replaced this one."

#: Codes that say the authority could not answer (as opposed to answering no).
_UNREACHABLE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.INTERNAL,
}
_LIVE = (pb.TICKET_STATE_ADMITTED, pb.TICKET_STATE_PARKED, pb.TICKET_STATE_QUEUED)


class AuthorityRejected(AdmissionRejected):  # type: ignore[misc]
    """A turn the authority (or the gate's failure mode) refused. PraisonAI catches it as its
    own ``AdmissionRejected`` and sends ``message`` to the user.

    ``reason``: BUSY, QUEUE_FULL, MEMORY_PRESSURE, DRAINING, SHED, EXPIRED, UNAVAILABLE, or the
    Authorize reason (RESOURCE_LIMIT, QUOTA_EXHAUSTED, RESOURCE_USAGE_UNKNOWN).
    """

    def __init__(self, message: str, reason: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after = retry_after


#: How long the withdrawal of a Submit whose answer never arrived keeps trying.
_WITHDRAW_FOR = 60.0


class _Unreachable(Exception):
    """The authority did not answer; the gate's failure mode decides."""


class _TicketLost(Exception):
    """The authority no longer knows a queued ticket (its store lost it): the run submits
    again under its run_id."""


class _TicketLapsed(Exception):
    """A followed ticket's lease lapsed before its admission reached this gateway: the run
    submits again under its run_id, with ``resubmit_expired``."""


#: Cancellations a turn's ending rides through before it gives up (each retried call is
#: bounded by its own deadline).
_CANCELLATIONS_RIDDEN = 3


async def _through_cancellation(step: Callable[[], Coroutine[Any, Any, None]]) -> bool:
    """Run ``step()`` to its end, starting it again when the task is cancelled meanwhile (the
    calls it makes are idempotent); True when a cancellation arrived, for the caller to
    re-raise once the work is done."""
    cancelled = False
    for _ in range(_CANCELLATIONS_RIDDEN):
        try:
            await step()
            return cancelled
        except asyncio.CancelledError:
            cancelled = True
    return cancelled


def process_rss_mb() -> int | None:
    """This process's resident memory in MiB (Linux: current, from /proc; elsewhere the peak)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") // (1024 * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    except (OSError, ValueError):  # pragma: no cover - platform without getrusage
        return None
    return int(peak / (1024 * 1024 if sys.platform == "darwin" else 1024)) or None


def wire_name(name: str) -> str:
    """``name`` as the authority accepts names (1..128 bytes of printable ASCII): unchanged when
    it already is, else ``sha256:<hex>`` of it (stable, so the same user stays one subject)."""
    if name and len(name) <= 128 and name.isascii() and name.isprintable():
        return name
    return "sha256:" + hashlib.sha256(name.encode()).hexdigest()


def _state(state: int) -> str:
    return pb.TicketState.Name(state).removeprefix("TICKET_STATE_")  # type: ignore[arg-type]


@dataclass
class _Turn:
    """One admitted turn: its ticket, its budget reservation and the usage reported for it."""

    gate: AuthorityGate
    ticket_id: str
    run_id: str
    subject: str
    account_id: str
    loop: asyncio.AbstractEventLoop
    #: The grant of its admission, which a Reclaim of the ticket names.
    grant: int = 0
    parked: bool = False
    lost: bool = False
    #: Its conversation's key and the key's policy (empty: none), which a Reclaim names.
    key: str = ""
    key_policy: int = 0
    #: A newer message of its conversation, submitted with ``supersede_running``: that turn's
    #: ticket id, heard at a renewal. The turn may stop (its slot counts until it ends).
    superseded_by: str = ""
    closed: bool = False
    authorized: bool = False
    waits: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    usage_lock: threading.Lock = field(default_factory=threading.Lock)
    transition: asyncio.Lock = field(default_factory=asyncio.Lock)

    def add_usage(self, input_tokens: int, output_tokens: int) -> None:
        with self.usage_lock:
            self.input_tokens += max(0, input_tokens)
            self.output_tokens += max(0, output_tokens)

    def human_wait(self) -> _HumanWait:
        return _HumanWait(self)


#: The turn the current task (and the worker threads it copies its context into) runs for.
_CURRENT_TURN: contextvars.ContextVar[_Turn | None] = contextvars.ContextVar(
    "admission_authority_turn", default=None
)


class _HumanWait:
    """PraisonAI's human-wait scope (sync and async): Park the turn's ticket while a person is
    asked, Unpark it (and wait for a slot if none is free) when the answer comes back."""

    def __init__(self, turn: _Turn) -> None:
        self._turn = turn
        self._entered = False

    def _blocking(self, coro: Coroutine[Any, Any, None]) -> bool:
        """Run ``coro`` on the gate's loop from a worker thread; False on the loop itself,
        where a synchronous wait cannot block (the slot then stays held)."""
        loop = self._turn.loop
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop or loop.is_closed():
            coro.close()
            return False
        try:
            asyncio.run_coroutine_threadsafe(coro, loop).result()
            return True
        except Exception as e:  # never break the approval itself
            log.warning("human-wait slot transfer failed: %s", e)
            return False

    def __enter__(self) -> _HumanWait:
        self._entered = self._blocking(self._turn.gate._suspend(self._turn))
        return self

    def __exit__(self, *exc: object) -> None:
        if self._entered:
            self._blocking(self._turn.gate._resume(self._turn))

    async def __aenter__(self) -> _HumanWait:
        if asyncio.get_running_loop() is self._turn.loop:
            await self._turn.gate._suspend(self._turn)
            self._entered = True
        else:
            self._entered = self._blocking(self._turn.gate._suspend(self._turn))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if not self._entered:
            return
        if asyncio.get_running_loop() is self._turn.loop:
            await self._turn.gate._resume(self._turn)
        else:
            self._blocking(self._turn.gate._resume(self._turn))


class _Admission:
    """What ``AuthorityGate.admit()`` returns: enter to hold a slot for one turn."""

    def __init__(self, gate: AuthorityGate, session_id: str) -> None:
        self._gate = gate
        self._session_id = session_id
        self._turn: _Turn | None = None
        self._local: Any = None
        self._tokens: list[tuple[contextvars.ContextVar[Any], contextvars.Token[Any]]] = []

    async def __aenter__(self) -> _Admission:
        gate = self._gate
        try:
            turn = await gate._enter(self._session_id)
        except _Unreachable as e:
            if gate.failure_mode == "closed":
                gate._count("rejected")
                log.warning("authority unreachable, refusing the turn (failure_mode closed): %s", e)
                raise AuthorityRejected(gate.unavailable_message, "UNAVAILABLE") from None
            log.warning("authority unreachable, admitting through the local gate: %s", e)
            local = gate._local_gate().admit(session_id=self._session_id)
            await local.__aenter__()  # raises PraisonAI's own AdmissionRejected when full
            self._local = local
            return self
        self._turn = turn
        self._tokens.append((_CURRENT_TURN, _CURRENT_TURN.set(turn)))
        scope = _human_wait_scope()
        if scope is not None:
            self._tokens.append((scope, scope.set(turn.human_wait)))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc: BaseException | None = None,
        tb: TracebackType | None = None,
    ) -> bool:
        for var, token in reversed(self._tokens):
            try:
                var.reset(token)
            except ValueError:  # exited in another context than entered
                pass
        self._tokens.clear()
        local, self._local = self._local, None
        if local is not None:
            await local.__aexit__(exc_type, exc, tb)
        turn, self._turn = self._turn, None
        if turn is not None:
            # Runs to its end even when the turn's task is cancelled (see _exit). The release
            # says what the turn's provider calls came to (a rate-limit error lowers an
            # adaptive cap).
            await self._gate._exit(turn, exc)
        return False


def _human_wait_scope() -> contextvars.ContextVar[Any] | None:
    try:
        from praisonaiagents.approval.registry import HUMAN_WAIT_SCOPE
    except ImportError:  # pragma: no cover - older core without the hook
        return None
    scope: contextvars.ContextVar[Any] = HUMAN_WAIT_SCOPE
    return scope


class AuthorityGate:
    """PraisonAI's admission gate, decided by the authority for every replica at once.

    ``client`` is an :class:`~admission_authority_client.AsyncAdmissionClient` for the
    installation's ``host_id``; its channel opens lazily on the loop that first admits a turn, so
    the gate may be built before any loop runs (as ``BotOS`` does). A turn's subject is
    ``subject(session_id)`` (default: the session id, so the authority's per-subject cap and
    round robin are per user) and its account ``account(session_id)`` (default: none).

    With ``newest_message_wins``, the newest message of a conversation wins: each turn is keyed
    by ``conversation(session_id)`` (default: the session id, which PraisonAI's channels set
    per chat) with ``KEY_POLICY_SERIAL_KEEP_NEWEST``, so a conversation runs one turn at a time
    and, while one runs, only its newest message waits: an older waiting turn is refused with
    ``superseded_message`` (reason ``SUPERSEDED``) the moment a newer one arrives. With
    ``supersede_running`` as well, the running turn learns it too (:attr:`superseded`, at the
    next renewal) and may stop. A turn admitted without a session id (where the gateway does
    not know the conversation: ``admit()`` called bare) carries no key and is scheduled as
    before.

    ``failure_mode`` says what a turn gets when the authority cannot be reached: ``"closed"``
    (default) refuses it with ``unavailable_message``; ``"local"`` admits it through a bounded
    local PraisonAI gate of ``local_max_concurrent_runs`` / ``local_queue_depth`` (per replica).

    With ``authorize_output_tokens`` set, ``admit()`` also calls Authorize for step 1 of the
    turn's run (``requested_output_tokens`` = that number): a DENY refuses the turn with
    ``budget_message``; UNKNOWN follows ``unknown_usage``. The turn is settled when it ends with
    the usage reported through :class:`UsageSink` (coverage COMPLETE), or, with no sink
    installed, as COVERAGE_UNKNOWN so its reservation keeps counting as spent.
    """

    enabled = True

    def __init__(
        self,
        client: AsyncAdmissionClient,
        *,
        subject: Callable[[str], str] | None = None,
        account: Callable[[str], str | None] | None = None,
        failure_mode: FailureMode = "closed",
        local_max_concurrent_runs: int = 0,
        local_queue_depth: int = 0,
        authorize_output_tokens: int | None = None,
        model: str = "",
        unknown_usage: Literal["reject", "allow"] = "reject",
        busy_message: str = BUSY_MESSAGE,
        unavailable_message: str = UNAVAILABLE_MESSAGE,
        budget_message: str = BUDGET_MESSAGE,
        stats_every: float = 5.0,
        replaces: Any = None,
        resource_policy: Any = None,
        resource_sampler: Any = None,
        newest_message_wins: bool = False,
        conversation: Callable[[str], str | None] | None = None,
        supersede_running: bool = False,
        superseded_message: str = SUPERSEDED_MESSAGE,
    ) -> None:
        if failure_mode not in ("closed", "local"):
            raise ValueError(f"failure_mode: must be 'closed' or 'local', not {failure_mode!r}")
        if failure_mode == "local" and local_max_concurrent_runs <= 0:
            raise ValueError("local_max_concurrent_runs: must be at least 1 with failure_mode 'local'")
        if local_queue_depth < 0:
            raise ValueError("local_queue_depth: must not be negative")
        if authorize_output_tokens is not None and authorize_output_tokens < 1:
            raise ValueError("authorize_output_tokens: must be at least 1 (or None: no Authorize)")
        if unknown_usage not in ("reject", "allow"):
            raise ValueError(f"unknown_usage: must be 'reject' or 'allow', not {unknown_usage!r}")
        if supersede_running and not newest_message_wins:
            raise ValueError("supersede_running: needs newest_message_wins")
        self._client = client
        self._newest_wins = newest_message_wins
        self._conversation = conversation or (lambda session_id: session_id or None)
        self._supersede_running = supersede_running
        self.superseded_message = superseded_message
        self._subject = subject or (lambda session_id: session_id or "anonymous")
        self._account = account or (lambda session_id: None)
        self.failure_mode: FailureMode = failure_mode
        self._local_max = local_max_concurrent_runs
        self._local_queue = local_queue_depth
        self._local: Any = None
        self._authorize_tokens = authorize_output_tokens
        self._model = model
        self._unknown_usage = unknown_usage
        self.busy_message = busy_message
        self.unavailable_message = unavailable_message
        self.budget_message = budget_message
        self._stats_every = stats_every
        #: Whether a UsageSink reports this process's token usage (then Settle is COMPLETE).
        self.usage_reported = False
        # This replica's turns (PraisonAI's gate counts per process).
        self._in_flight = 0
        self._queued = 0
        self._awaiting_human = 0
        self._counters = {"admitted": 0, "rejected": 0, "shed": 0, "superseded": 0,
                          "local_admitted": 0}
        self._held: dict[str, _Turn] = {}
        self._renew_every = 10.0
        self._renewer: asyncio.Task[None] | None = None
        self._authority: pb.Stats | None = None
        self._authority_at = 0.0
        self._refreshing: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._reachable = True
        #: Turns ending now (their Settle and Release): aclose() waits for them.
        self._exiting: set[asyncio.Future[None]] = set()
        # What the replaced PraisonAI gate was configured with: stats() shows it until the
        # authority's figures arrive, and its memory ceiling keeps applying to this replica.
        self._configured: dict[str, Any] = {}
        if replaces is not None and callable(getattr(replaces, "stats", None)):
            try:
                self._configured = dict(replaces.stats())
            except Exception:  # a gate that cannot say: nothing to show
                self._configured = {}
        # A gate PraisonAI built for memory alone (max_concurrent_runs 0 and a resource policy)
        # configures no concurrency ceiling: its stats say 0, as PraisonAI's do; the
        # authority's caps still apply (``installation_max_concurrent_runs``).
        self._resource_only = replaces is not None and self._configured.get(
            "max_concurrent_runs", None) == 0
        if resource_policy is None and replaces is not None:
            resource_policy = getattr(replaces, "_resource_policy", None)
        if resource_policy is not None and not getattr(resource_policy, "enabled", True):
            resource_policy = None
        self._resource_policy = resource_policy
        self._resource_sampler = resource_sampler
        self._prime_stats()
        # Built inside the event loop (as PraisonAI's runtimes build it): open the channel at
        # once, so the first turn does not pay the connection's handshakes.
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            self._spawn(self._connect())

    # -- PraisonAI's gate contract ----------------------------------------------------------

    def admit(self, *, session_id: str = "") -> _Admission:
        """An async context manager holding one installation-wide slot for a turn."""
        return _Admission(self, session_id)

    @property
    def in_flight(self) -> int:
        """This replica's turns holding a slot (authority-admitted or local)."""
        return self._in_flight + (self._local.in_flight if self._local is not None else 0)

    @property
    def queued(self) -> int:
        """This replica's turns waiting for a slot."""
        return self._queued + (self._local.queued if self._local is not None else 0)

    def stats(self) -> dict[str, Any]:
        """PraisonAI's gate counters, from this replica's turns and the last authority figures
        the gate's own calls brought back (refreshed every ``stats_every`` seconds while turns
        run). Never calls the authority."""
        a = self._authority
        local = self._local.stats() if self._local is not None else {}
        configured = self._configured

        def figure(authority: int | None, key: str) -> int:
            # The authority's, else what the replaced gate was configured with (always that for
            # a resource-only gate, which configures no ceiling).
            if authority is None or self._resource_only:
                return int(configured.get(key, 0) or 0)
            return int(authority)

        return {
            "max_concurrent_runs": figure(a.total if a is not None else None, "max_concurrent_runs"),
            "max_concurrent_runs_per_scope": figure(
                a.per_subject if a is not None else None, "max_concurrent_runs_per_scope"),
            "queue_depth": figure(a.queue_total if a is not None else None, "queue_depth"),
            "in_flight": self.in_flight,
            "queued": self.queued,
            "awaiting_human": self._awaiting_human + int(local.get("awaiting_human", 0)),
            "admitted": self._counters["admitted"] + int(local.get("admitted", 0)),
            "rejected": self._counters["rejected"] + int(local.get("rejected", 0)),
            "shed": self._counters["shed"] + int(local.get("shed", 0)),
            "superseded": self._counters["superseded"],
            "max_rss_mb": self._max_rss_mb(),
            # Beyond PraisonAI's keys: the installation as the authority last reported it.
            "authority_reachable": self._reachable,
            "failure_mode": self.failure_mode,
            "local_admitted": self._counters["local_admitted"],
            "installation_max_concurrent_runs": int(a.total) if a is not None else None,
            "installation_in_flight": int(a.in_flight) if a is not None else None,
            "installation_queued": int(a.queued) if a is not None else None,
            "installation_parked": int(a.parked) if a is not None else None,
        }

    # -- the turn's life --------------------------------------------------------------------

    def _count(self, name: str) -> None:
        self._counters[name] += 1

    def _local_gate(self) -> Any:
        if self._local is None:
            from praisonaiagents.gateway import ConcurrencyLimitPolicy

            self._local = _praison_admission.AdmissionGate(
                ConcurrencyLimitPolicy(
                    max_concurrent_runs=self._local_max, queue_depth=self._local_queue
                )
            )
        return self._local

    def _max_rss_mb(self) -> float:
        """This replica's memory ceiling: the replaced gate's (PraisonAI's ``max_rss_mb``) when
        it had one, else the authority's ``memory.max_rss_mb``."""
        local = float(getattr(self._resource_policy, "hard_rss_mb", 0.0) or 0.0)
        if local > 0:
            return local
        return float(self._authority.max_rss_mb) if self._authority is not None else 0.0

    def _memory_refuses(self) -> bool:
        """Whether this replica's own memory ceiling refuses a turn now (PraisonAI's memory
        pressure policy: REJECT at or above its hard ceiling). Its QUEUE (soft pressure) admits
        through the authority, which queues when no slot is free, as PraisonAI's gate does with
        a free slot."""
        policy = self._resource_policy
        if policy is None:
            return False
        try:
            from praisonaiagents.gateway import AdmissionDecision, ResourceSample

            if self._resource_sampler is not None:
                sample = self._resource_sampler.read()
            else:
                rss = process_rss_mb()
                sample = ResourceSample(rss_mb=None if rss is None else float(rss))
            return bool(policy.evaluate(sample) is AdmissionDecision.REJECT)
        except Exception as e:  # never crash a turn to monitor memory, as PraisonAI's gate
            log.warning("the memory pressure policy failed (%s); admitting", e)
            return False

    async def _connect(self) -> None:
        try:
            await self._client.connect(timeout=self._client.timeout)
        except Exception as e:  # the first turn connects instead, and says why if it cannot
            log.debug("opening the channel early failed: %s", e)

    def _prime_stats(self) -> None:
        """Fetch the authority's figures once, synchronously, so that stats() is right from
        construction (PraisonAI reads it straight after building a gate). Bounded by half a
        second; without an answer stats() shows the replaced gate's configuration until the
        first refresh."""
        try:
            blocking = self._client.blocking(timeout=min(self._client.timeout, 0.5))
        except ValueError:  # a client built from a ready channel: no blocking twin
            return
        try:
            self._authority = blocking.stub.GetStats(
                pb.GetStatsRequest(host_id=self._client.host_id),
                timeout=blocking.timeout, metadata=blocking.metadata)
            self._authority_at = time.monotonic()
        except grpc.RpcError as e:
            log.debug("the authority's stats are not available yet: %s", e)
        finally:
            blocking.close()

    async def _call(self, rpc: Any, request: Any, timeout: float | None = None) -> Any:
        """One unary call within ``timeout`` (default the client's), repeated with the same
        request (so the same idempotency key: every call the gate makes has one) while the
        authority or its store cannot answer; a failure past the deadline becomes
        :class:`_Unreachable`. While the authority is known unreachable (the last call failed
        so), a call is tried once: turns fail over to the failure mode at once instead of
        each waiting out the deadline."""
        loop = asyncio.get_running_loop()
        end = loop.time() + (timeout or self._client.timeout)
        retry = self._reachable or timeout is not None
        backoff = 0.05
        while True:
            try:
                response = await rpc(request, timeout=max(end - loop.time(), 0.001),
                                     metadata=self._client.metadata)
                break
            except grpc.aio.AioRpcError as e:
                if e.code() not in _UNREACHABLE:
                    raise
                if not retry or end - loop.time() <= backoff:
                    self._reachable = False
                    raise _Unreachable(f"{e.code().name}: {e.details()}") from None
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)
        self._reachable = True
        return response

    async def _enter(self, session_id: str) -> _Turn:
        if self._memory_refuses():
            self._count("rejected")
            raise AuthorityRejected(self.busy_message, "MEMORY_PRESSURE")
        stub = self._client.stub
        subject = wire_name(self._subject(session_id))
        account = self._account(session_id)
        account = wire_name(account) if account else ""
        request = pb.SubmitRequest(
            host_id=self._client.host_id,
            instance_id=self._client.instance_id,
            subject=subject,
            account_id=account,
            run_id=uuid.uuid4().hex,
            mode=pb.SUBMIT_MODE_QUEUE,
        )
        conversation = self._conversation(session_id) if self._newest_wins else None
        if conversation:
            request.key = wire_name(conversation)
            request.key_policy = pb.KEY_POLICY_SERIAL_KEEP_NEWEST
            request.supersede_running = self._supersede_running
        rss = process_rss_mb()
        if rss is not None:
            request.rss_mb = rss
        try:
            r = await self._call(stub.Submit, request)
        except (asyncio.CancelledError, _Unreachable):
            # The Submit may have reached the authority (or may yet, when a stalled store
            # resumes): withdraw whatever it made.
            self._spawn(self._withdraw(request))
            raise
        except grpc.aio.AioRpcError as e:
            raise self._refusal(e) from None
        self._refresh_soon()
        turn = _Turn(self, r.ticket_id, request.run_id, subject, account, asyncio.get_running_loop())
        turn.key, turn.key_policy = request.key, request.key_policy
        self._renew_every = max(r.lease_ttl_ms / 3000, 0.01)
        turn.grant = int(r.grant)
        if r.state == pb.TICKET_STATE_QUEUED:
            self._queued += 1
            try:
                await self._queued_until_admitted(turn, request)
            except BaseException:
                await asyncio.shield(self._release(turn.ticket_id))
                raise
            finally:
                self._queued -= 1
        elif r.state != pb.TICKET_STATE_ADMITTED:  # a fresh run_id: cannot happen
            self._count("rejected")
            raise AuthorityRejected(self.busy_message, _state(r.state))
        self._in_flight += 1
        self._count("admitted")
        self._held[turn.ticket_id] = turn
        self._ensure_renewer()
        try:
            await self._authorize(turn)
        except BaseException:
            await asyncio.shield(self._exit(turn))
            raise
        return turn

    async def _queued_until_admitted(self, turn: _Turn, request: pb.SubmitRequest) -> None:
        """Wait for a queued turn's admission. A ticket the authority lost while it waited
        (its store lost its state) is submitted again under the same run_id and followed; so is
        one whose lease lapsed before its admission reached this gateway (the Wait stream says
        EXPIRED, or the Renew every heard admission gets before the turn runs finds it expired),
        with ``resubmit_expired``: the turn never ran on it, so it is never re-registered
        (Reclaim is for turns that ran)."""
        again = pb.SubmitRequest()
        again.CopyFrom(request)
        again.resubmit_expired = True
        while True:
            resubmit, why = request, "was lost by the authority while it was queued"
            try:
                turn.grant = await self._wait_admitted(turn.ticket_id)
                if await self._still_held(turn.ticket_id):
                    return
                resubmit, why = again, _LAPSED
            except _TicketLost:
                pass
            except _TicketLapsed:
                resubmit, why = again, _LAPSED
            try:
                r = await self._call(self._client.stub.Submit, resubmit)
            except grpc.aio.AioRpcError as e:
                raise self._refusal(e) from None
            log.warning("the ticket of run %s %s: submitted again as %s", request.run_id, why,
                        r.ticket_id)
            turn.ticket_id, turn.grant = r.ticket_id, int(r.grant)
            if r.state == pb.TICKET_STATE_ADMITTED:
                return
            if r.state != pb.TICKET_STATE_QUEUED:
                self._count("rejected")
                raise AuthorityRejected(self.busy_message, _state(r.state))

    async def _reclaim(self, turn: _Turn) -> None:
        """Re-register a turn's ticket the authority no longer knows (its store lost it, or
        its lease ran out while this gateway was cut off), so that its run counts again; a
        refusal (the ticket ended) means the turn no longer holds a slot."""
        request = pb.ReclaimRequest(
            ticket_id=turn.ticket_id, host_id=self._client.host_id, run_id=turn.run_id,
            subject=turn.subject, account_id=turn.account_id,
            instance_id=self._client.instance_id, grant=turn.grant,
            key=turn.key, key_policy=turn.key_policy,  # type: ignore[arg-type]
        )
        try:
            r = await self._call(self._client.stub.Reclaim, request, timeout=self._renew_every)
        except _Unreachable as e:
            log.warning("re-registering ticket %s failed (will retry): %s", turn.ticket_id, e)
            return
        except grpc.aio.AioRpcError as e:
            turn.lost = True
            log.error("ticket %s cannot be re-registered (%s: %s): its turn no longer holds a "
                      "slot", turn.ticket_id, e.code().name, e.details())
            return
        if r.reclaimed:
            log.warning("ticket %s was unknown to the authority (its state was lost, or its "
                        "lease ran out): re-registered, its turn counts again", turn.ticket_id)

    def _refusal(self, e: grpc.aio.AioRpcError) -> Exception:
        """A Submit refusal as AuthorityRejected; other errors (bad credential, bad input) are
        logged and treated as the authority being unusable."""
        reason, retry_after, _ = _details(e)
        if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
            self._count("rejected")
            return AuthorityRejected(self.busy_message, reason or "BUSY", retry_after)
        log.error("the authority refused the gate's call (%s: %s)", e.code().name, e.details())
        return _Unreachable(f"{e.code().name}: {e.details()}")

    async def _still_held(self, ticket_id: str) -> bool:
        """Renew an admission heard on a Wait stream before the turn runs on it (the event may
        have come late: a held stream, a frozen process): True when it is still admitted, with
        its lease running from now; False when it lapsed."""
        try:
            r = await self._call(
                self._client.stub.Renew, pb.RenewRequest(ticket_ids=[ticket_id])
            )
        except grpc.aio.AioRpcError as e:
            raise _Unreachable(f"Renew: {e.code().name}: {e.details()}") from None
        state = r.tickets[0].state if r.tickets else pb.TICKET_STATE_EXPIRED
        return bool(state == pb.TICKET_STATE_ADMITTED)

    async def _wait_admitted(self, ticket_id: str) -> int:
        """Follow a queued ticket until it is admitted (its grant). Refusals raise
        AuthorityRejected; a lease that lapsed while the stream was cut, _TicketLapsed. A
        stream cut while it waits (the authority restarted or could not be reached) is reopened
        with backoff for up to ``_RESUME_WAIT_FOR`` of trying, as the client's slots do: an
        authority on a data dir keeps the ticket and its place through a restart."""
        loop = asyncio.get_running_loop()
        backoff = 0.05
        cut_since: float | None = None
        while True:
            call = self._client.stub.Wait(pb.WaitRequest(ticket_id=ticket_id), metadata=self._client.metadata)
            try:
                async for event in call:
                    cut_since, backoff = None, 0.05
                    if event.state == pb.TICKET_STATE_ADMITTED:
                        return int(event.grant)
                    if event.state == pb.TICKET_STATE_EXPIRED:
                        raise _TicketLapsed(ticket_id)
                    if event.state == pb.TICKET_STATE_SHED:
                        self._count("shed")
                        raise AuthorityRejected(self.busy_message, "SHED")
                    if event.state == pb.TICKET_STATE_SUPERSEDED:
                        self._count("superseded")
                        log.info("turn %s superseded by %s, a newer message of its conversation",
                                 ticket_id, event.superseded_by)
                        raise AuthorityRejected(self.superseded_message, "SUPERSEDED")
                    if event.state != pb.TICKET_STATE_QUEUED:
                        self._count("rejected")
                        raise AuthorityRejected(self.busy_message, _state(event.state))
                cut = "the Wait stream ended without an answer"
            except grpc.aio.AioRpcError as e:
                if e.code() == grpc.StatusCode.NOT_FOUND:
                    raise _TicketLost(ticket_id) from None
                if e.code() not in _UNREACHABLE:
                    raise _Unreachable(f"Wait: {e.code().name}: {e.details()}") from None
                cut = f"Wait: {e.code().name}: {e.details()}"
            finally:
                call.cancel()
            now = loop.time()
            cut_since = now if cut_since is None else cut_since
            if now - cut_since > _RESUME_WAIT_FOR:
                raise _Unreachable(cut)
            log.warning("the Wait stream of %s was cut (will reopen it): %s", ticket_id, cut)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    async def _authorize(self, turn: _Turn) -> None:
        if self._authorize_tokens is None:
            return
        request = pb.AuthorizeRequest(
            host_id=self._client.host_id,
            run_id=turn.run_id,
            step=1,
            subject=turn.subject,
            account_id=turn.account_id,
            model=self._model,
            requested_output_tokens=self._authorize_tokens,
        )
        try:
            r = await self._call(self._client.stub.Authorize, request)
        except grpc.aio.AioRpcError as e:
            raise self._refusal(e) from None
        if r.decision == pb.DECISION_ALLOW or (
            r.decision == pb.DECISION_UNKNOWN and self._unknown_usage == "allow"
        ):
            turn.authorized = True  # settled when the turn ends
            return
        self._count("rejected")
        raise AuthorityRejected(self.budget_message, r.reason or "RESOURCE_LIMIT")

    async def _exit(self, turn: _Turn, failure: BaseException | None = None) -> None:
        """End a turn: settle its budget, give its slot back, reporting the turn's outcome (OK,
        or what its exception stands for; nothing for a cancelled turn). Safe to call twice.

        It runs to its end through a cancellation of the task it runs in (re-raised after):
        ``asyncio.run`` cancels every task still running when its main coroutine returns, a
        turn ending just then included, and the slot must come back at once rather than at
        the end of its lease."""
        if turn.closed:
            return
        turn.closed = True
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._exiting.add(done)
        try:
            cancelled = await _through_cancellation(lambda: self._close(turn))
            if turn.authorized:
                cancelled |= await _through_cancellation(lambda: self._settle(turn))
            request = pb.ReleaseRequest(ticket_id=turn.ticket_id)
            outcome = reported_outcome(failure)
            if outcome is not None:
                request.outcome = outcome
            cancelled |= await _through_cancellation(lambda: self._release(turn.ticket_id, request))
        finally:
            self._exiting.discard(done)
            done.set_result(None)
        if cancelled:
            raise asyncio.CancelledError

    async def _close(self, turn: _Turn) -> None:
        async with turn.transition:
            if turn.parked:
                self._awaiting_human -= 1
            else:
                self._in_flight -= 1
        self._held.pop(turn.ticket_id, None)

    async def _settle(self, turn: _Turn) -> None:
        with turn.usage_lock:
            usage = pb.Usage(
                input_tokens=turn.input_tokens,
                output_tokens=turn.output_tokens,
                coverage=pb.COVERAGE_COMPLETE if self.usage_reported else pb.COVERAGE_UNKNOWN,
            )
        request = pb.SettleRequest(host_id=self._client.host_id, run_id=turn.run_id, step=1, usage=usage)
        try:
            await self._call(self._client.stub.Settle, request)
        except (grpc.aio.AioRpcError, _Unreachable) as e:
            # The reservation keeps counting as spent; an operator can resolve it.
            log.warning("settling run %s failed: %s", turn.run_id, e)

    async def _release(self, ticket_id: str, request: pb.ReleaseRequest | None = None) -> None:
        try:
            await self._call(self._client.stub.Release, request or pb.ReleaseRequest(ticket_id=ticket_id))
        except (grpc.aio.AioRpcError, _Unreachable) as e:
            log.warning("releasing %s failed; its lease will expire: %s", ticket_id, e)

    async def _withdraw(self, request: pb.SubmitRequest) -> None:
        """Undo a Submit whose answer never arrived: release its run (whatever ticket it made),
        retrying for up to a minute while the authority cannot answer."""
        release = pb.ReleaseRequest(host_id=request.host_id, run_id=request.run_id)
        try:
            await self._call(self._client.stub.Release, release, timeout=_WITHDRAW_FOR)
        except (grpc.aio.AioRpcError, _Unreachable) as e:
            log.warning("withdrawing run %s failed; its lease will expire: %s", request.run_id, e)

    # -- human waits ------------------------------------------------------------------------

    async def _suspend(self, turn: _Turn) -> None:
        async with turn.transition:
            turn.waits += 1
            if turn.waits != 1 or turn.parked or turn.closed:
                return
            try:
                await self._call(self._client.stub.Park, pb.ParkRequest(ticket_id=turn.ticket_id))
            except (grpc.aio.AioRpcError, _Unreachable) as e:
                log.warning("parking %s failed; the turn keeps its slot: %s", turn.ticket_id, e)
                return
            turn.parked = True
            self._in_flight -= 1
            self._awaiting_human += 1

    async def _resume(self, turn: _Turn) -> None:
        async with turn.transition:
            turn.waits -= 1
            if turn.waits != 0 or not turn.parked or turn.closed:
                return
            try:
                r = await self._call(self._client.stub.Unpark, pb.UnparkRequest(ticket_id=turn.ticket_id))
                if r.state == pb.TICKET_STATE_QUEUED:
                    await self._wait_admitted(turn.ticket_id)
            except (grpc.aio.AioRpcError, _Unreachable, AuthorityRejected, _TicketLost) as e:
                # The approval already happened; the turn goes on but holds no slot.
                turn.lost = True
                log.error("ticket %s could not get its slot back after a human wait: %s", turn.ticket_id, e)
                return
            turn.parked = False
            self._awaiting_human -= 1
            self._in_flight += 1

    # -- background: renewals and the stats cache ------------------------------------------

    def _ensure_renewer(self) -> None:
        if self._renewer is None or self._renewer.done():
            self._renewer = self._spawn(self._renew_loop())

    async def _renew_loop(self) -> None:
        """Renew every held ticket in one call per interval, with this process's RSS."""
        while self._held:
            await asyncio.sleep(self._renew_every)
            ids = list(self._held)
            for i in range(0, len(ids), 1000):
                request = pb.RenewRequest(ticket_ids=ids[i : i + 1000])
                rss = process_rss_mb()
                if rss is not None:
                    request.rss_mb = rss
                try:
                    r = await self._call(self._client.stub.Renew, request, timeout=self._renew_every)
                except (grpc.aio.AioRpcError, _Unreachable) as e:
                    log.warning("renewing %d tickets failed (will retry): %s", len(ids), e)
                    continue
                for t in r.tickets:
                    turn = self._held.get(t.ticket_id)
                    if turn is not None and t.superseded_by and not turn.superseded_by:
                        turn.superseded_by = t.superseded_by
                        log.info("turn %s is superseded by %s, a newer message of its "
                                 "conversation", t.ticket_id, t.superseded_by)
                    if turn is None or t.state in _LIVE or turn.lost:
                        continue
                    if t.state == pb.TICKET_STATE_EXPIRED and turn.grant > 0 and not turn.parked:
                        await self._reclaim(turn)
                        continue
                    turn.lost = True
                    log.error("ticket %s is %s: its turn no longer holds a slot",
                              t.ticket_id, _state(t.state))
            self._refresh_soon()

    def _refresh_soon(self) -> None:
        """Refresh the cached authority figures in the background when they are old."""
        if time.monotonic() - self._authority_at < self._stats_every:
            return
        if self._refreshing is not None and not self._refreshing.done():
            return
        self._authority_at = time.monotonic()
        self._refreshing = self._spawn(self._refresh())

    async def _refresh(self) -> None:
        try:
            self._authority = await self._call(
                self._client.stub.GetStats, pb.GetStatsRequest(host_id=self._client.host_id)
            )
        except (grpc.aio.AioRpcError, _Unreachable) as e:
            log.debug("refreshing the authority's stats failed: %s", e)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """A background task, referenced until it ends (the loop keeps only weak references)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def aclose(self) -> None:
        """Finish background work (withdrawals of interrupted Submits, turns ending now: their
        Settle and Release) and stop renewing. Call when the gateway stops; turns still running
        lose their renewals."""
        if self._exiting:
            await asyncio.gather(*self._exiting, return_exceptions=True)
        if self._renewer is not None:
            self._renewer.cancel()
        pending = [t for t in self._background if t is not self._renewer]
        await asyncio.gather(*pending, return_exceptions=True)
        if self._renewer is not None:
            await asyncio.gather(self._renewer, return_exceptions=True)

    async def refresh_stats(self) -> dict[str, Any]:
        """Fetch the authority's figures now (``stats()`` itself never calls out)."""
        self._authority_at = time.monotonic()
        await self._refresh()
        return self.stats()


# -- auth limiter ---------------------------------------------------------------------------

#: Longest auth window or lockout the authority takes: 7 days.
_MAX_AUTH_SECONDS = 7 * 24 * 3600.0

#: PraisonAI's endpoint names → the authority's built-in buckets. The six approval
#: and pairing endpoints share the `approval` rule (10 / 60 s) but keep a count each, as in
#: PraisonAI: their identity is prefixed with the endpoint name.
PRAISONAI_BUCKETS: Mapping[str, str] = {
    "approval_pending": "approval",
    "approval_resolve": "approval",
    "approval_allowlist": "approval",
    "pairing_pending": "approval",
    "pairing_approve": "approval",
    "pairing_revoke": "approval",
    "ws_upgrade": "ws_upgrade",
    "magic_link": "magic_link",
    "pairing_verify": "pairing_verify",
}


class AuthorityAuthLimiter:
    """PraisonAI's synchronous auth limiter, counted by the authority for every replica.

    ``client`` is a blocking :class:`~admission_authority_client.AdmissionClient`; calls use a
    ``timeout`` deadline (default 100 ms) because PraisonAI calls the limiter on its event loop.
    ``buckets`` maps PraisonAI's endpoint names to the authority's buckets (default
    :data:`PRAISONAI_BUCKETS`; unmapped names are sent as they are).

    The numbers it is built with (``max_attempts``, ``window_seconds``, ``lockout_seconds``) are
    the ones enforced: every call declares them as the endpoint's bucket, and the authority
    applies them unless its operator named that bucket in ``auth.buckets`` (then the operator's
    numbers decide, and the limiter logs, once per endpoint, which numbers replaced its own).
    Numbers the authority cannot take are refused here, with the parameter named.

    When the authority cannot answer, a local PraisonAI ``AuthRateLimiter`` built from the
    same numbers decides (per replica, as PraisonAI's Redis limiter does), and the
    authority is skipped for ``retry_after`` seconds. A lockout earned locally is checked before
    every call and outlives the authority's recovery. Never fails open: an answer the limiter
    cannot interpret refuses.
    """

    def __init__(
        self,
        client: AdmissionClient,
        max_attempts: int = 5,
        window_seconds: float = 60.0,
        lockout_seconds: float = 300.0,
        max_keys: int = 10_000,
        *,
        buckets: Mapping[str, str] | None = None,
        timeout: float = 0.1,
        retry_after: float = 5.0,
    ) -> None:
        if not 1 <= int(max_attempts) <= 1_000_000:
            raise ValueError(f"max_attempts: must be 1..1000000, not {max_attempts!r}")
        if not 0.001 <= float(window_seconds) <= _MAX_AUTH_SECONDS:
            raise ValueError(f"window_seconds: must be 0.001..604800 (7 days), not {window_seconds!r}")
        if not 0 <= float(lockout_seconds) <= _MAX_AUTH_SECONDS:
            raise ValueError(f"lockout_seconds: must be 0..604800 (7 days), not {lockout_seconds!r}")
        self._declared = pb.AuthBucket(
            max_attempts=int(max_attempts),
            window_ms=max(1, round(float(window_seconds) * 1000)),
            lockout_ms=round(float(lockout_seconds) * 1000),
        )
        self._overridden: set[str] = set()
        self._client = client
        self._buckets = dict(PRAISONAI_BUCKETS if buckets is None else buckets)
        self._timeout = timeout
        self._retry_after = retry_after
        self._down_until = 0.0
        self._local = AuthRateLimiter(max_attempts, window_seconds, lockout_seconds, max_keys)
        self._lock = threading.Lock()
        #: (endpoint, identity) → when the authority said its lockout ends (time.time()); kept
        #: for when the authority cannot be asked.
        self._remote_locks: dict[tuple[str, str], float] = {}
        self._max_keys = max_keys

    def _request(self, endpoint: str, identity: str) -> tuple[str, str]:
        bucket = self._buckets.get(endpoint, endpoint)
        return bucket, wire_name(identity if bucket == endpoint else f"{endpoint}:{identity}")

    def _remote(self, fn: Callable[[], Any]) -> Any:
        """Call the authority unless it failed recently; None when it cannot answer."""
        if time.time() < self._down_until:
            return None
        try:
            return fn()
        except grpc.RpcError as e:
            code = e.code()
            if code in _UNREACHABLE:
                self._down_until = time.time() + self._retry_after
                log.warning("Authority auth rate limiter unavailable, using local: %s", code.name)
                return None
            raise

    def allow(self, endpoint: str, identity: str) -> bool:
        # A lockout earned locally during an outage must outlive the authority's recovery.
        if self._local.time_until_allowed(endpoint, identity) > 0:
            return False
        bucket, who = self._request(endpoint, identity)
        request = pb.AuthAttemptRequest(endpoint=bucket, identity=who, declared=self._declared)
        try:
            r = self._remote(lambda: self._client.stub.CheckAuthAttempt(
                request, timeout=self._timeout, metadata=self._client.metadata))
        except grpc.RpcError as e:
            log.error("the authority refused CheckAuthAttempt for %s (%s: %s); refusing",
                      endpoint, e.code().name, e.details())
            return False
        if r is None:
            # The authority cannot answer: a lockout it reported to this replica still holds,
            # then the local bucket decides.
            if self._remote_lock_left(endpoint, identity) > 0:
                return False
            return bool(self._local.allow(endpoint, identity))
        self._note_bucket(bucket, r)
        if not r.allowed and r.retry_after_ms:
            with self._lock:
                if len(self._remote_locks) >= self._max_keys:
                    self._prune_remote(time.time())
                self._remote_locks[(endpoint, identity)] = time.time() + r.retry_after_ms / 1000
        return bool(r.allowed)

    def reset(self, endpoint: str, identity: str) -> None:
        self._local.reset(endpoint, identity)
        with self._lock:
            self._remote_locks.pop((endpoint, identity), None)
        bucket, who = self._request(endpoint, identity)
        request = pb.AuthResetRequest(endpoint=bucket, identity=who, declared=self._declared)
        try:
            self._remote(lambda: self._client.stub.ResetAuthAttempts(
                request, timeout=self._timeout, metadata=self._client.metadata))
        except grpc.RpcError as e:
            log.error("the authority refused ResetAuthAttempts for %s: %s", endpoint, e.details())

    def time_until_allowed(self, endpoint: str, identity: str) -> float:
        """Seconds until ``identity`` is no longer locked out (0.0 when it is not): the
        authority's answer, counting nothing (CheckAuthAttempt with ``peek``), so a lockout
        earned through another replica shows here; and the local fallback's lockout."""
        local = float(self._local.time_until_allowed(endpoint, identity))
        bucket, who = self._request(endpoint, identity)
        request = pb.AuthAttemptRequest(endpoint=bucket, identity=who, peek=True,
                                        declared=self._declared)
        try:
            r = self._remote(lambda: self._client.stub.CheckAuthAttempt(
                request, timeout=self._timeout, metadata=self._client.metadata))
        except grpc.RpcError as e:
            log.error("the authority refused CheckAuthAttempt(peek) for %s (%s: %s)",
                      endpoint, e.code().name, e.details())
            return max(local, self._remote_lock_left(endpoint, identity), 1.0)  # never fail open
        if r is None:
            return max(local, self._remote_lock_left(endpoint, identity))
        remote = r.retry_after_ms / 1000 if r.locked else 0.0
        return max(local, remote)

    def _note_bucket(self, bucket: str, r: pb.AuthAttemptResponse) -> None:
        """Say once per bucket when the operator's numbers decide instead of the limiter's."""
        if not r.HasField("bucket") or r.bucket == self._declared or bucket in self._overridden:
            return
        self._overridden.add(bucket)
        d, b = self._declared, r.bucket
        log.warning(
            "auth bucket %s: the authority's operator configured %d attempts / %d ms / %d ms "
            "lockout; they decide instead of this limiter's %d / %d ms / %d ms",
            bucket, b.max_attempts, b.window_ms, b.lockout_ms,
            d.max_attempts, d.window_ms, d.lockout_ms,
        )

    def _remote_lock_left(self, endpoint: str, identity: str) -> float:
        """What remains of the last lockout the authority reported to this replica."""
        with self._lock:
            return max(0.0, self._remote_locks.get((endpoint, identity), 0.0) - time.time())

    def prune(self) -> int:
        with self._lock:
            removed = self._prune_remote(time.time())
        return removed + int(self._local.prune())

    def _prune_remote(self, now: float) -> int:
        stale = [k for k, until in self._remote_locks.items() if until <= now]
        for k in stale:
            del self._remote_locks[k]
        return len(stale)


# -- usage ----------------------------------------------------------------------------------


class UsageSink:
    """PraisonAI's token-usage sink (``get_token_collector().set_sink(...)``): usage tracked
    while a turn runs is added to that turn, and settled against its Authorize when the turn
    ends. Never blocks and never raises; reports outside a turn go only to ``previous``."""

    def __init__(self, previous: Any = None) -> None:
        self.previous = previous

    def persist(self, task_id: str = "", agent_name: str = "", model: str = "",
                metrics: Any = None, metadata: Any = None, **kwargs: Any) -> None:
        turn = _CURRENT_TURN.get()
        if turn is not None and metrics is not None:
            turn.add_usage(int(getattr(metrics, "input_tokens", 0) or 0),
                           int(getattr(metrics, "output_tokens", 0) or 0))
        if self.previous is not None:
            self.previous.persist(task_id=task_id, agent_name=agent_name, model=model,
                                  metrics=metrics, metadata=metadata, **kwargs)


def _install_usage_sink(gate: AuthorityGate) -> Callable[[], None]:
    """Route PraisonAI's token usage into turns (process-wide); returns the undo."""
    from praisonaiagents.telemetry.token_collector import get_token_collector

    collector = get_token_collector()
    previous = getattr(collector, "_sink", None)
    if not isinstance(previous, UsageSink):
        collector.set_sink(UsageSink(previous))
    gate.usage_reported = True

    def undo() -> None:
        if isinstance(getattr(collector, "_sink", None), UsageSink) and not isinstance(previous, UsageSink):
            collector.set_sink(previous)
        gate.usage_reported = False

    return undo


# -- wiring ---------------------------------------------------------------------------------


def _authority_lockout(lockout: Any, blocking: AdmissionClient) -> AuthorityAuthLimiter:
    """A pairing store's lockout limiter (PraisonAI's ``AuthRateLimiter``) as an
    :class:`AuthorityAuthLimiter` with the same numbers."""
    return AuthorityAuthLimiter(
        blocking, lockout._max, lockout._window, lockout._lockout, lockout._max_keys
    )


def install(target: Any, client: AsyncAdmissionClient, **gate_options: Any) -> AuthorityGate:
    """Put the authority in charge of one ``BotOS`` or ``WebSocketGateway`` (before its
    ``start()``): its admission gate becomes an :class:`AuthorityGate` (which shows the
    replaced gate's configuration until the authority's figures arrive, and keeps its memory
    ceiling for this replica), and for a gateway its pairing store's verify lockout an
    :class:`AuthorityAuthLimiter` with the same numbers. Token usage is routed to turns through
    :class:`UsageSink` (the token collector is process-wide). Returns the gate. For the
    gateway's HTTP auth limiters (built inside ``start()``) use :func:`patch_praisonai`."""
    gate_options.setdefault("replaces", getattr(target, "_admission_gate", None))
    gate = AuthorityGate(client, **gate_options)
    target._admission_gate = gate
    pairing = getattr(target, "pairing_store", None)
    if pairing is not None and hasattr(pairing, "_lockout"):
        pairing._lockout = _authority_lockout(pairing._lockout, client.blocking())
    _install_usage_sink(gate)
    return gate


class Undo:
    """Restores what :func:`patch_praisonai` replaced; ``undo()`` twice is harmless."""

    def __init__(self, steps: list[Callable[[], None]]) -> None:
        self._steps = steps

    def undo(self) -> None:
        while self._steps:
            self._steps.pop()()

    def __enter__(self) -> Undo:
        return self

    def __exit__(self, *exc: object) -> None:
        self.undo()


#: The patch in force (its ``Undo``), so that a second ``patch_praisonai`` replaces it.
_ACTIVE_PATCH: list[Undo] = []


def patch_praisonai(client: AsyncAdmissionClient, **gate_options: Any) -> Undo:
    """Process-wide: every admission gate and auth limiter PraisonAI builds from now on (BotOS,
    config- and CLI-driven gateway starts) is authority-backed, and token usage is routed to
    turns. Call before the runtime is built; ``undo()`` restores PraisonAI's own factories.

    The gate factory keeps PraisonAI's meaning of the config: no gate when admission is not
    configured (``max_concurrent_runs`` 0 and no policy), PraisonAI's own disabled gate when
    it builds one (e.g. a memory section with no ceiling), ``ValueError`` on a negative cap;
    otherwise an :class:`AuthorityGate` whose caps are the authority's, with the configured
    numbers as the bounds of the local gate when ``failure_mode="local"``, and the configured
    ``max_rss_mb`` as this replica's own memory ceiling. Every pairing store built from now on
    gets an :class:`AuthorityAuthLimiter` as its verify lockout, with its own numbers.

    A second call replaces the first: the first is undone (PraisonAI's own factories back)
    before the new one is installed, so nothing is wrapped twice; the first ``Undo`` then does
    nothing, and the second's ``undo()`` leaves PraisonAI exactly as it was.
    """
    while _ACTIVE_PATCH:
        _ACTIVE_PATCH.pop().undo()
    original_gate = _praison_admission.build_admission_gate
    original_limiter = _praison_rate_limiter.build_auth_rate_limiter
    gates: list[AuthorityGate] = []
    undo_sinks: list[Callable[[], None]] = []

    def build_admission_gate(
        max_concurrent_runs: int = 0,
        queue_depth: int = 0,
        overflow_policy: str = "reject",
        policy: Any = None,
        resource_policy: Any = None,
        max_concurrent_runs_per_scope: int = 0,
    ) -> Any:
        # PraisonAI's own builder validates the config and says whether a gate is wanted.
        local = original_gate(max_concurrent_runs, queue_depth, overflow_policy, policy,
                              resource_policy, max_concurrent_runs_per_scope)
        if local is None or not getattr(local, "enabled", True):
            return local  # PraisonAI wants no gate, or a disabled one: keep its answer
        options = dict(gate_options)
        options.setdefault("replaces", local)
        if options.get("failure_mode") == "local":
            options.setdefault("local_max_concurrent_runs", max(1, int(max_concurrent_runs or 1)))
            options.setdefault("local_queue_depth", int(queue_depth or 0))
        gate = AuthorityGate(client, **options)
        gates.append(gate)
        undo_sinks.append(_install_usage_sink(gate))
        return gate

    blocking = client.blocking()

    def build_auth_rate_limiter(redis_config: Any = None, **kwargs: Any) -> AuthorityAuthLimiter:
        return AuthorityAuthLimiter(blocking, **kwargs)

    original_pairing_init = _praison_pairing.PairingStore.__init__

    def pairing_init(store: Any, *args: Any, **kwargs: Any) -> None:
        original_pairing_init(store, *args, **kwargs)
        store._lockout = _authority_lockout(store._lockout, blocking)

    _praison_admission.build_admission_gate = build_admission_gate
    _praison_rate_limiter.build_auth_rate_limiter = build_auth_rate_limiter
    _praison_pairing.PairingStore.__init__ = pairing_init

    def restore() -> None:
        _praison_admission.build_admission_gate = original_gate
        _praison_rate_limiter.build_auth_rate_limiter = original_limiter
        _praison_pairing.PairingStore.__init__ = original_pairing_init
        for u in undo_sinks:
            u()
        blocking.close()
        if undo in _ACTIVE_PATCH:
            _ACTIVE_PATCH.remove(undo)

    undo = Undo([restore])
    _ACTIVE_PATCH.append(undo)
    return undo


__all__ = [
    "AuthorityAuthLimiter",
    "AuthorityGate",
    "AuthorityRejected",
    "PRAISONAI_BUCKETS",
    "Undo",
    "UsageSink",
    "install",
    "patch_praisonai",
    "process_rss_mb",
]
