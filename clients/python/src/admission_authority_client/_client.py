"""The client wrappers: :class:`AdmissionClient` (blocking) and :class:`AsyncAdmissionClient`
(asyncio), over the generated stubs in :mod:`admission_authority_client.v1`.

Both share the request builders and answer types below; they differ only in how they wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Literal

import grpc
import grpc.aio

from .errors import AdmissionError, TicketEnded, translate
from .v1 import admission_pb2 as pb
from .v1 import admission_pb2_grpc as pb_grpc

log = logging.getLogger("admission_authority_client")

Mode = Literal["queue", "try"]
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
    ) -> pb.SubmitRequest:
        req = pb.SubmitRequest(
            host_id=self.host_id,
            instance_id=self.instance_id,
            subject=subject,
            account_id=account_id or "",
            run_id=run_id or uuid.uuid4().hex,
            mode=pb.SUBMIT_MODE_TRY if mode == "try" else pb.SUBMIT_MODE_QUEUE,
        )
        if rss_mb is not None:
            req.rss_mb = rss_mb
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
        if self._channel is not None:
            self._channel.close()
            self._channel = None
            self._stub = None

    @property
    def stub(self) -> pb_grpc.AdmissionStub:
        """The generated stub, for calls the wrapper does not cover."""
        if self._stub is None:
            if self._channel is None:
                self._channel = (
                    grpc.secure_channel(self._target, self._credentials)
                    if self._credentials is not None
                    else grpc.insecure_channel(self._target)
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
    ) -> Iterator[Slot]:
        """Hold one installation-wide slot for the block: Submit, wait in the queue if need be,
        renew in the background, and Release on exit, on error and on interruption (a queued
        ticket is withdrawn). Refusals raise :class:`~admission_authority_client.Busy` and its
        siblings; ``wait_timeout`` (seconds) bounds the wait in the queue (``TimeoutError``).
        """
        try:
            r = self.stub.Submit(
                self._req.submit(subject, run_id, account_id, mode, rss_mb),
                timeout=self._timeout, metadata=self._md,
            )
        except grpc.RpcError as e:
            raise translate(e) from None
        try:
            slot = Slot(r.ticket_id, r.grant, r.lease_ttl_ms)
            if r.state == pb.TICKET_STATE_QUEUED:
                slot.grant = self._wait(r.ticket_id, wait_timeout)
            elif r.state != pb.TICKET_STATE_ADMITTED:
                raise TicketEnded(r.ticket_id, _state_name(r.state))
            stop = threading.Event()
            renewer = threading.Thread(
                target=self._renew_until, args=(slot, stop), daemon=True, name="admission-renew"
            )
            renewer.start()
            try:
                yield slot
            finally:
                stop.set()
                renewer.join()
        finally:
            self._release(r.ticket_id)

    def _wait(self, ticket_id: str, timeout: float | None) -> int:
        try:
            for event in self.stub.Wait(pb.WaitRequest(ticket_id=ticket_id), timeout=timeout, metadata=self._md):
                if event.state == pb.TICKET_STATE_ADMITTED:
                    return event.grant
                if event.state != pb.TICKET_STATE_QUEUED:
                    raise TicketEnded(ticket_id, _state_name(event.state))
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise TimeoutError(f"ticket {ticket_id} still queued after {timeout} s") from None
            raise translate(e) from None
        raise AdmissionError(f"the Wait stream of ticket {ticket_id} ended without an answer")

    def _renew_until(self, slot: Slot, stop: threading.Event) -> None:
        every = max(slot.lease_ttl_ms / 3000, 0.005)
        while not stop.wait(every):
            try:
                r = self.stub.Renew(pb.RenewRequest(ticket_ids=[slot.ticket_id]), timeout=every, metadata=self._md)
            except grpc.RpcError as e:
                log.warning("renewing %s failed (will retry): %s", slot.ticket_id, translate(e))
                continue
            if r.tickets and r.tickets[0].state != pb.TICKET_STATE_ADMITTED:
                slot.lost = True
                log.error("ticket %s is %s: its slot is lost", slot.ticket_id,
                          _state_name(r.tickets[0].state))
                return

    def _release(self, ticket_id: str) -> None:
        try:
            self.stub.Release(pb.ReleaseRequest(ticket_id=ticket_id), timeout=self._timeout, metadata=self._md)
        except grpc.RpcError as e:
            # The lease frees the slot within lease_ttl anyway.
            log.warning("releasing %s failed; its lease will expire: %s", ticket_id, translate(e))

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
        try:
            return _authorization(self.stub.Authorize(req, timeout=self._timeout, metadata=self._md))
        except grpc.RpcError as e:
            raise translate(e) from None

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
        try:
            return self.stub.Settle(req, timeout=self._timeout, metadata=self._md).replay
        except grpc.RpcError as e:
            raise translate(e) from None

    def check_auth_attempt(self, endpoint: str, identity: str, *, peek: bool = False) -> AuthAttempt:
        """Count one attempt against ``endpoint``'s bucket for ``identity``; with ``peek``,
        count nothing and answer what an attempt would meet (e.g. whether it is locked out)."""
        req = pb.AuthAttemptRequest(endpoint=endpoint, identity=identity, peek=peek)
        try:
            return _auth_attempt(self.stub.CheckAuthAttempt(req, timeout=self._timeout, metadata=self._md))
        except grpc.RpcError as e:
            raise translate(e) from None

    def reset_auth_attempts(self, endpoint: str, identity: str) -> bool:
        """Clear a bucket after a verified success; True when there was one."""
        req = pb.AuthResetRequest(endpoint=endpoint, identity=identity)
        try:
            return self.stub.ResetAuthAttempts(req, timeout=self._timeout, metadata=self._md).cleared
        except grpc.RpcError as e:
            raise translate(e) from None

    def stats(self) -> pb.Stats:
        """Live counters of this client's host."""
        try:
            return self.stub.GetStats(
                pb.GetStatsRequest(host_id=self._req.host_id), timeout=self._timeout, metadata=self._md
            )
        except grpc.RpcError as e:
            raise translate(e) from None


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

    async def __aenter__(self) -> AsyncAdmissionClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
            self._stub = None

    @property
    def stub(self) -> pb_grpc.AdmissionAsyncStub:
        """The generated asyncio stub, for calls the wrapper does not cover."""
        if self._stub is None:
            if self._channel is None:
                self._channel = (
                    grpc.aio.secure_channel(self._target, self._credentials)
                    if self._credentials is not None
                    else grpc.aio.insecure_channel(self._target)
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
    ) -> AsyncIterator[Slot]:
        """As :meth:`AdmissionClient.slot`; cancelling the task while it waits in the queue
        withdraws the ticket."""
        try:
            r = await self.stub.Submit(
                self._req.submit(subject, run_id, account_id, mode, rss_mb),
                timeout=self._timeout, metadata=self._md,
            )
        except grpc.aio.AioRpcError as e:
            raise translate(e) from None
        try:
            slot = Slot(r.ticket_id, r.grant, r.lease_ttl_ms)
            if r.state == pb.TICKET_STATE_QUEUED:
                slot.grant = await self._wait(r.ticket_id, wait_timeout)
            elif r.state != pb.TICKET_STATE_ADMITTED:
                raise TicketEnded(r.ticket_id, _state_name(r.state))
            renewer = asyncio.create_task(self._renew_until(slot))
            try:
                yield slot
            finally:
                renewer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await renewer
        finally:
            # Shielded, so a cancellation that interrupted the wait still withdraws the ticket.
            await asyncio.shield(self._release(r.ticket_id))

    async def _wait(self, ticket_id: str, timeout: float | None) -> int:
        try:
            call = self.stub.Wait(pb.WaitRequest(ticket_id=ticket_id), timeout=timeout, metadata=self._md)
            async for event in call:
                if event.state == pb.TICKET_STATE_ADMITTED:
                    return int(event.grant)
                if event.state != pb.TICKET_STATE_QUEUED:
                    raise TicketEnded(ticket_id, _state_name(event.state))
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise TimeoutError(f"ticket {ticket_id} still queued after {timeout} s") from None
            raise translate(e) from None
        raise AdmissionError(f"the Wait stream of ticket {ticket_id} ended without an answer")

    async def _renew_until(self, slot: Slot) -> None:
        every = max(slot.lease_ttl_ms / 3000, 0.005)
        while True:
            await asyncio.sleep(every)
            try:
                r = await self.stub.Renew(
                    pb.RenewRequest(ticket_ids=[slot.ticket_id]), timeout=every, metadata=self._md
                )
            except grpc.aio.AioRpcError as e:
                log.warning("renewing %s failed (will retry): %s", slot.ticket_id, translate(e))
                continue
            if r.tickets and r.tickets[0].state != pb.TICKET_STATE_ADMITTED:
                slot.lost = True
                log.error("ticket %s is %s: its slot is lost", slot.ticket_id,
                          _state_name(r.tickets[0].state))
                return

    async def _release(self, ticket_id: str) -> None:
        try:
            await self.stub.Release(pb.ReleaseRequest(ticket_id=ticket_id), timeout=self._timeout, metadata=self._md)
        except grpc.aio.AioRpcError as e:
            log.warning("releasing %s failed; its lease will expire: %s", ticket_id, translate(e))

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
        try:
            return _authorization(await self.stub.Authorize(req, timeout=self._timeout, metadata=self._md))
        except grpc.aio.AioRpcError as e:
            raise translate(e) from None

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
        try:
            return (await self.stub.Settle(req, timeout=self._timeout, metadata=self._md)).replay
        except grpc.aio.AioRpcError as e:
            raise translate(e) from None

    async def check_auth_attempt(self, endpoint: str, identity: str, *, peek: bool = False) -> AuthAttempt:
        """Count one attempt against ``endpoint``'s bucket for ``identity``; with ``peek``,
        count nothing and answer what an attempt would meet (e.g. whether it is locked out)."""
        req = pb.AuthAttemptRequest(endpoint=endpoint, identity=identity, peek=peek)
        try:
            return _auth_attempt(await self.stub.CheckAuthAttempt(req, timeout=self._timeout, metadata=self._md))
        except grpc.aio.AioRpcError as e:
            raise translate(e) from None

    async def reset_auth_attempts(self, endpoint: str, identity: str) -> bool:
        """Clear a bucket after a verified success; True when there was one."""
        req = pb.AuthResetRequest(endpoint=endpoint, identity=identity)
        try:
            return (await self.stub.ResetAuthAttempts(req, timeout=self._timeout, metadata=self._md)).cleared
        except grpc.aio.AioRpcError as e:
            raise translate(e) from None

    async def stats(self) -> pb.Stats:
        """Live counters of this client's host."""
        try:
            return await self.stub.GetStats(
                pb.GetStatsRequest(host_id=self._req.host_id), timeout=self._timeout, metadata=self._md
            )
        except grpc.aio.AioRpcError as e:
            raise translate(e) from None
