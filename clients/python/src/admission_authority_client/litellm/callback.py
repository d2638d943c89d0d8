"""The LiteLLM callback: a slot and a token reservation around every model call, released
exactly once whichever way the call ends."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import sys
import time
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import HTTPException
from litellm.integrations.custom_logger import CustomLogger

from .._client import AsyncAdmissionClient
from ..errors import AdmissionError, AdmissionRefused, Superseded, TicketEnded
from .limits import Caps, RateLimits, Window, deployments, group_cap, windows
from .settings import Settings

log = logging.getLogger("admission_authority_client.litellm")

#: The call types that reach a model and are counted.
COUNTED_CALLS = frozenset(
    {"completion", "acompletion", "text_completion", "atext_completion", "responses", "aresponses"}
)


class _Local:
    """The per-proxy bound used while the authority cannot be reached (``local`` mode)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._sem: asyncio.Semaphore | None = None

    def semaphore(self) -> asyncio.Semaphore:
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.limit)
        return self._sem


@dataclass
class _Call:
    """One admitted call: what releases it, and what it reserved."""

    stack: contextlib.AsyncExitStack
    run_id: str
    subject: str
    account: str | None
    started: float
    input_estimate: int
    reserved: bool
    stream: bool
    #: Output characters streamed so far (a stream cut short settles them as partial usage).
    streamed_chars: int = 0
    usage: tuple[int, int] | None = None
    #: LiteLLM's tpm windows of the call, charged ``tpm_charged`` (its estimate) before it
    #: and corrected by its usage when it ends.
    tpm: tuple[Window, ...] = ()
    tpm_charged: int = 0


class AdmissionHandler(CustomLogger):  # type: ignore[misc]
    """The LiteLLM callback; see the module documentation. LiteLLM calls only hooks defined on
    the registered class itself, so every hook is defined here."""

    def __init__(self, settings: Settings | None = None) -> None:
        super().__init__()
        self.settings = settings or Settings.from_env()
        s = self.settings
        self.client = AsyncAdmissionClient(
            s.target,
            host_id=s.host_id,
            instance_id=s.replica,
            token=s.token,
            timeout=s.timeout,
        )
        self._calls: dict[str, _Call] = {}
        #: Calls being ended (settled and released) in the background.
        self._ending: set[asyncio.Task[None]] = set()
        self._local = _Local(s.local_max_parallel)
        self._caps = Caps(s.target, s.host_id, s.limits_token, s.timeout, s.limits_recheck) if s.limits_token else None
        self._rate_limits = (
            RateLimits(s.target, s.rate_limit_domain, s.token, s.timeout) if s.rate_limit_domain else None
        )
        self._warned_caps = False
        #: (subject, account) -> until when no budget is known to apply to it (no Authorize)
        self._unbudgeted: dict[tuple[str, str | None], float] = {}
        #: model group -> (its accounts' caps from LiteLLM's max_parallel_requests, when read)
        self._group_caps: dict[str, tuple[list[tuple[str, int]], float]] = {}
        #: The deployment of a model group tried first next (ADMISSION_ACCOUNT=deployment).
        self._turn = 0
        log.info(
            "admission-authority drop-in: host %s, replica %s, authority %s, subject %s, "
            "account %s, mode %s, failure mode %s",
            s.host_id, s.replica, s.target, s.subject, s.account, s.mode, s.failure_mode,
        )
        _say_which_limits_hold(s)
        _drain_before_proxy_shutdown(self)

    # ---- who a call counts against ----

    def _subject(self, key: Any) -> str:
        s = self.settings.subject
        value = {
            "team": getattr(key, "team_id", None),
            "user": getattr(key, "user_id", None),
            "end_user": getattr(key, "end_user_id", None),
        }.get(s)
        if value:
            return _id(f"{s}:{value}")
        return _key_subject(key)

    def _account(self, data: dict[str, Any]) -> str | None:
        """The model group's account; ``None`` for none, or for a deployment's (chosen at
        admission, :meth:`_admit`)."""
        if self.settings.account in ("none", "deployment"):
            return None
        model = data.get("model")
        return _id(f"model:{model}") if model else None

    # ---- before the call ----

    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: str
    ) -> dict[str, Any]:
        if call_type not in COUNTED_CALLS:
            return data
        call_id = str(data.get("litellm_call_id") or uuid.uuid4())
        data["litellm_call_id"] = call_id
        if call_id in self._calls:
            return data
        s = self.settings
        subject, account = self._subject(user_api_key_dict), self._account(data)
        run_id = _id(f"{s.replica}/{call_id}")
        input_estimate = _input_estimate(data)
        requested = _int(data.get("max_tokens") or data.get("max_completion_tokens")) or s.default_max_tokens
        estimate = input_estimate + requested
        tpm = await self._litellm_limits(user_api_key_dict, subject, account, str(data.get("model") or ""), estimate)
        try:
            return await self._admit_call(data, call_id, run_id, subject, account, input_estimate, requested, tpm, estimate)
        except BaseException:
            # The call does not go on: its tokens were charged for nothing.
            await self._take_back(call_id, tpm, estimate)
            raise

    async def _admit_call(
        self,
        data: dict[str, Any],
        call_id: str,
        run_id: str,
        subject: str,
        account: str | None,
        input_estimate: int,
        requested: int,
        tpm: tuple[Window, ...],
        estimate: int,
    ) -> dict[str, Any]:
        """Take the call's slot and reserve its tokens; raises the HTTP answer that refuses it."""
        s = self.settings
        stack = contextlib.AsyncExitStack()
        watch = _DisconnectWatch(sys._getframe(), self.client, run_id)
        try:
            try:
                account, run_id = await self._admit(stack, watch, subject, account, run_id, data)
            finally:
                watch.stop()
        except Superseded as e:
            log.info("call %s: superseded by %s, a newer call with the same %s", call_id, e.superseded_by, s.key_header)
            raise HTTPException(
                status_code=409,
                detail=f"superseded by a newer request with the same {s.key_header}",
            ) from None
        except TicketEnded:
            if not watch.gone:
                raise self._refused_late() from None
            log.info("call %s: the client left while it was queued; its ticket was withdrawn", call_id)
            raise HTTPException(status_code=499, detail="the client closed the request while it was queued") from None
        except AdmissionRefused as e:
            retry = max(1, math.ceil(e.retry_after or 1))
            raise HTTPException(
                status_code=429,
                detail=f"admission refused: {e.reason or e.message}",
                headers={"retry-after": str(retry)},
            ) from None
        except TimeoutError:
            raise HTTPException(
                status_code=429,
                detail=f"queued for more than ADMISSION_WAIT_TIMEOUT ({s.wait_timeout:g} s)",
                headers={"retry-after": "1"},
            ) from None
        except AdmissionError as e:
            if not e.retryable:
                raise HTTPException(status_code=500, detail=f"admission authority: {e.message}") from None
            if s.failure_mode == "closed":
                raise self._unavailable(f"failure mode closed: {e}") from None
            log.warning("authority unreachable, admitting under the local bound: %s", e)
            await stack.enter_async_context(_semaphore(self._local.semaphore()))
            self._calls[call_id] = _Call(
                stack, run_id, subject, account, time.monotonic(), 0, False, bool(data.get("stream")),
                tpm=tpm, tpm_charged=estimate,
            )
            return data
        reserved = False
        if s.reserve_tokens and not self._unbudgeted.get((subject, account), 0) > time.monotonic():
            try:
                auth = await self.client.authorize(
                    run_id,
                    1,
                    subject,
                    requested_output_tokens=requested,
                    estimated_input_tokens=input_estimate,
                    account_id=account,
                    model=str(data.get("model") or ""),
                )
            except BaseException:
                await stack.aclose()
                raise
            if auth.decision == "deny":
                await stack.aclose()
                raise HTTPException(
                    status_code=429,
                    detail=f"token budget: {auth.reason}",
                    headers={"retry-after": "60"},
                )
            reserved = auth.decision == "allow"
            if reserved and auth.remaining_tokens is None and auth.remaining_cost_usd is None:
                # No budget applies to this subject and account: reserving would only cost
                # time. Look again after ADMISSION_LIMITS_RECHECK (a reload may add one).
                if len(self._unbudgeted) > 100_000:
                    self._unbudgeted.clear()
                self._unbudgeted[(subject, account)] = time.monotonic() + max(s.limits_recheck, 1.0)
            if reserved and auth.granted_output_tokens < requested:
                data["max_tokens"] = auth.granted_output_tokens
        self._calls[call_id] = _Call(
            stack, run_id, subject, account, time.monotonic(), input_estimate, reserved, bool(data.get("stream")),
            tpm=tpm, tpm_charged=estimate,
        )
        return data

    async def _take_back(self, call_id: str, tpm: tuple[Window, ...], charged: int) -> None:
        """Give back tokens charged ahead to the call's tpm windows."""
        if not tpm or self._rate_limits is None or charged <= 0:
            return
        try:
            await self._rate_limits.take_back(tpm, charged)
        except AdmissionError as e:
            log.warning("call %s: %d tokens charged ahead stay in LiteLLM's tpm windows: %s", call_id, charged, e)

    async def _admit(
        self,
        stack: contextlib.AsyncExitStack,
        watch: _DisconnectWatch,
        subject: str,
        account: str | None,
        run_id: str,
        data: dict[str, Any],
    ) -> tuple[str | None, str]:
        """Take a slot for the call (entered on ``stack``); returns its account and run id.

        With ``ADMISSION_ACCOUNT=deployment`` the account is a deployment of the call's model
        group, chosen here since LiteLLM picks one only after this hook: a deployment with a
        free slot (each tried without queueing, in turn from the next one), else the queue of
        the next one. A group of several deployments is then called on the chosen one (its
        model id)."""
        s = self.settings
        mode: Literal["try", "queue"] = "try" if s.mode == "reject" else "queue"

        key = self._key(data)

        async def slot(account: str | None, run: str, mode: Literal["try", "queue"]) -> None:
            await stack.enter_async_context(
                self.client.slot(
                    subject,
                    run_id=run,
                    account_id=account,
                    mode=mode,
                    wait_timeout=s.wait_timeout,
                    on_queued=watch.queued,
                    key=key,
                    key_policy=s.key_policy if key is not None else "none",  # type: ignore[arg-type]
                )
            )

        if s.account != "deployment":
            await slot(account, run_id, mode)
            return account, run_id
        ids = [d for d, _ in deployments(str(data.get("model") or ""))]
        if len(ids) <= 1:
            account = _id(f"deployment:{ids[0]}") if ids else None
            await slot(account, run_id, mode)
            return account, run_id
        self._turn = (self._turn + 1) % len(ids)
        order = ids[self._turn :] + ids[: self._turn]
        refused: AdmissionRefused | None = None
        for i, deployment in enumerate(order):
            account, run = _id(f"deployment:{deployment}"), _id(f"{run_id}@{i}")
            try:
                await slot(account, run, "try")
            except AdmissionRefused as e:
                refused = e
                continue
            data["model"] = deployment
            return account, run
        if mode == "try" and refused is not None:
            raise refused
        account = _id(f"deployment:{order[0]}")
        await slot(account, run_id, "queue")
        data["model"] = order[0]
        return account, run_id

    async def _litellm_limits(
        self, key: Any, subject: str, account: str | None, group: str, estimate: int
    ) -> tuple[Window, ...]:
        """Hold the limits set in LiteLLM installation-wide: a key's ``max_parallel_requests``
        as its subject's cap, a model group's deployments' as its account's, rpm (counted now)
        and tpm (charged the call's ``estimate`` now, corrected when the call ends) as windows.
        A call that does not fit is refused with its charges taken back. Returns the tpm
        windows charged."""
        s = self.settings
        cap = getattr(key, "max_parallel_requests", None)
        caps: list[tuple[str, str, int]] = []
        if isinstance(cap, int) and cap > 0 and s.subject == "key":
            caps.append(("subjects", subject, cap))
        if group and (account is not None or s.account == "deployment"):
            known = self._group_caps.get(group)
            if known is None or time.monotonic() - known[1] > s.limits_recheck:
                if s.account == "deployment":
                    named = [(_id(f"deployment:{d}"), cap) for d, cap in deployments(group) if cap is not None]
                else:
                    total = group_cap(group)
                    named = [(account or "", total)] if total is not None else []
                known = (named, time.monotonic())
                self._group_caps[group] = known
            caps.extend(("accounts", name, cap) for name, cap in known[0] if name)
        if caps and self._caps is not None:
            try:
                for field, name, value in caps:
                    await self._caps.ensure(field, name, value)
            except AdmissionError as e:
                if s.failure_mode != "local":
                    raise self._unavailable(f"writing LiteLLM's caps: {e}") from None
                log.warning("LiteLLM's caps not written; the call goes on: %s", e)
        elif caps and not self._warned_caps:
            self._warned_caps = True
            log.warning(
                "LiteLLM sets max_parallel_requests here, which holds per proxy only: set "
                "ADMISSION_LIMITS_TOKEN to hold it installation-wide"
            )
        if self._rate_limits is None:
            return ()
        found = windows(key, _key_subject(key))
        if not found:
            return ()
        try:
            over = await self._rate_limits.over([(w, 1 if w.kind == "rpm" else estimate) for w in found])
        except AdmissionError as e:
            if s.failure_mode == "local":
                log.warning("rate limits unreachable; the call goes on under the local bound: %s", e)
                return ()
            raise self._unavailable(f"rate limits: {e}") from None
        if over:
            # Refused: the call takes nothing from any window.
            for kind, hits in (("rpm", 1), ("tpm", estimate)):
                try:
                    await self._rate_limits.take_back([w for w in found if w.kind == kind], hits)
                except AdmissionError as e:
                    log.warning("a refused call's %s charge stays in LiteLLM's windows: %s", kind, e)
            raise HTTPException(
                status_code=429,
                detail="rate limit exceeded (a LiteLLM rpm or tpm limit, installation-wide)",
                headers={"retry-after": str(max(1, 60 - int(time.time()) % 60))},
            )
        return tuple(w for w in found if w.kind == "tpm")

    def _key(self, data: dict[str, Any]) -> str | None:
        """The call's key: the value of ``ADMISSION_KEY_HEADER`` in its request (any case),
        as a wire name; None without the setting or the header."""
        header = self.settings.key_header
        if header is None:
            return None
        headers = (data.get("proxy_server_request") or {}).get("headers") or {}
        for name, value in headers.items():
            if str(name).lower() == header and str(value).strip():
                return _id(str(value).strip())
        return None

    def _refused_late(self) -> HTTPException:
        """A ticket that ended while it was queued (shed, drained, or lapsed past retrying)."""
        return HTTPException(status_code=429, detail="admission refused: the ticket ended while queued", headers={"retry-after": "1"})

    def _unavailable(self, why: str) -> HTTPException:
        log.warning("authority unreachable, refusing the call: %s", why)
        return HTTPException(status_code=503, detail="admission authority unavailable", headers={"retry-after": "1"})

    # ---- after the call: every path releases exactly once ----

    def _finish_soon(
        self, call_id: str, failure: BaseException | None, usage: tuple[int, int] | None, coverage: str
    ) -> None:
        """End the call (settle, then release) in a task of its own: the response goes out
        without waiting for either. The call leaves ``_calls`` now, so whichever hook comes
        first ends it, and only once."""
        call = self._calls.pop(call_id, None)
        if call is None:
            return
        task = asyncio.get_running_loop().create_task(self._finish(call_id, call, failure, usage, coverage))
        self._ending.add(task)
        task.add_done_callback(self._ending.discard)

    async def _finish(
        self, call_id: str, call: _Call, failure: BaseException | None, usage: tuple[int, int] | None, coverage: str
    ) -> None:
        try:
            if call.tpm and self._rate_limits is not None and usage is not None:
                # The estimate charged before the call becomes what it used (unknown usage
                # keeps the estimate).
                extra = sum(usage) - call.tpm_charged
                try:
                    if extra > 0:
                        await self._rate_limits.over([(w, extra) for w in call.tpm])
                    elif extra < 0:
                        await self._rate_limits.take_back(call.tpm, -extra)
                except AdmissionError as e:
                    log.warning("call %s: LiteLLM's tpm windows keep its estimate, not its usage: %s", call_id, e)
            if call.reserved:
                inp, out = usage if usage is not None else (0, 0)
                try:
                    await self.client.settle(
                        call.run_id, 1, input_tokens=inp, output_tokens=out, coverage=coverage  # type: ignore[arg-type]
                    )
                except AdmissionError as e:
                    log.warning("call %s: settle failed (the reservation turns uncertain): %s", call_id, e)
        finally:
            if failure is None:
                await call.stack.aclose()
            else:
                await call.stack.__aexit__(type(failure), failure, failure.__traceback__)

    async def async_post_call_success_hook(self, data: dict[str, Any], user_api_key_dict: Any, response: Any) -> Any:
        call = self._calls.get(str(data.get("litellm_call_id")))
        if call is None or call.stream:
            return response
        self._finish_soon(str(data.get("litellm_call_id")), None, _usage(response), "complete")
        return response

    async def async_post_call_streaming_iterator_hook(
        self, user_api_key_dict: Any, response: Any, request_data: dict[str, Any]
    ) -> AsyncGenerator[Any, None]:
        call_id = str(request_data.get("litellm_call_id"))
        call = self._calls.get(call_id)
        ended = False
        failure: BaseException | None = None
        try:
            async for item in response:
                if call is not None:
                    usage = _usage(item)
                    if usage is not None:
                        call.usage = usage
                    call.streamed_chars += _chunk_chars(item)
                yield item
            ended = True
        except BaseException as e:
            failure = e
            raise
        finally:
            if call is not None:
                if call.usage is not None:
                    usage, coverage = call.usage, "complete" if ended else "partial"
                else:
                    usage = (call.input_estimate, math.ceil(call.streamed_chars / 4))
                    coverage = "partial" if call.streamed_chars else "unknown"
                cut = failure if failure is not None and not isinstance(failure, GeneratorExit) else None
                self._finish_soon(call_id, cut, usage, coverage)

    async def async_post_call_failure_hook(
        self,
        request_data: dict[str, Any],
        original_exception: Exception,
        user_api_key_dict: Any,
        traceback_str: str | None = None,
    ) -> None:
        # An LLM error, or a rejection after admission (another hook, a proxy check): the
        # provider billed nothing.
        self._finish_soon(str(request_data.get("litellm_call_id")), original_exception, (0, 0), "complete")

    async def async_log_success_event(self, kwargs: dict[str, Any], response_obj: Any, start_time: Any, end_time: Any) -> None:
        # A path none of the hooks above saw (they release first; this finds nothing then).
        self._finish_soon(str(kwargs.get("litellm_call_id")), None, _usage(response_obj), "complete")

    async def async_log_failure_event(self, kwargs: dict[str, Any], response_obj: Any, start_time: Any, end_time: Any) -> None:
        exc = kwargs.get("exception")
        failure = exc if isinstance(exc, BaseException) else RuntimeError("the call failed")
        self._finish_soon(str(kwargs.get("litellm_call_id")), failure, (0, 0), "complete")

    async def drain(self) -> None:
        """End what this proxy still holds, for a proxy shutting down: its server has let every
        running call finish, but the calls being ended in the background would die with the
        process (the slot would then lapse one lease later instead of freeing now). A call no
        hook ended is released with its usage unknown (its reservation kept as charged). Waits
        at most ``ADMISSION_TIMEOUT``."""
        for call_id in list(self._calls):
            self._finish_soon(call_id, None, None, "unknown")
        if self._ending:
            _, late = await asyncio.wait(set(self._ending), timeout=self.settings.timeout)
            if late:
                log.warning("shutting down with %d call(s) not yet released: they lapse within one lease", len(late))

    def held(self) -> int:
        """Calls admitted and not yet released in this proxy (ending ones included)."""
        return len(self._calls) + len(self._ending)


def _drain_before_proxy_shutdown(handler: AdmissionHandler) -> None:
    """Have the LiteLLM proxy's shutdown wait for ``handler.drain()`` first. Its server (uvicorn)
    ends the process as soon as the application's shutdown returns, and LiteLLM gives a
    callback no shutdown hook of its own, so the proxy's shutdown function is wrapped. Outside
    the proxy (LiteLLM as a library) there is nothing to wrap."""
    try:
        from litellm.proxy import proxy_server
    except ImportError:  # pragma: no cover (the proxy's extras are not installed)
        return
    shutdown = getattr(proxy_server, "proxy_shutdown_event", None)
    if shutdown is None:
        log.warning("this LiteLLM has no proxy_shutdown_event: calls ending at shutdown may lapse instead of freeing")
        return

    async def drained(*args: Any, **kwargs: Any) -> Any:
        try:
            await handler.drain()
        except Exception:  # the proxy's own shutdown goes on
            log.exception("ending the calls this proxy holds at shutdown failed")
        return await shutdown(*args, **kwargs)

    proxy_server.proxy_shutdown_event = drained


def _say_which_limits_hold(s: Settings) -> None:
    """One line at start: which of the limits set in LiteLLM this proxy holds fleet-wide, and
    which per proxy (with what would hold them fleet-wide)."""
    fleet: list[str] = []
    per_proxy: list[str] = []
    missing: list[str] = []
    if s.limits_token:
        fleet.append("max_parallel_requests (keys, deployments)")
    else:
        per_proxy.append("max_parallel_requests (keys, deployments)")
        missing.append("ADMISSION_LIMITS_TOKEN")
    if s.rate_limit_domain:
        fleet.append("rpm_limit and tpm_limit (keys, users, teams, team members, end users)")
    else:
        per_proxy.append("rpm_limit and tpm_limit")
        missing.append("ADMISSION_RATE_LIMIT_DOMAIN")
    line = f"LiteLLM's limits held fleet-wide: {'; '.join(fleet) or 'none'}. Per proxy: {'; '.join(per_proxy) or 'none'}"
    if missing:
        log.warning("%s (set %s to hold them fleet-wide)", line, " and ".join(missing))
    else:
        log.info("%s", line)


def _key_subject(key: Any) -> str:
    """``key:`` and the key's SHA-256 in hex (its first 32 digits), as LiteLLM keeps keys
    (``token``), never the key itself: a value that is not such a hash is hashed here."""
    token = str(getattr(key, "token", None) or getattr(key, "api_key", None) or "anonymous")
    if not (len(token) == 64 and all(c in "0123456789abcdef" for c in token)):
        token = hashlib.sha256(token.encode()).hexdigest()
    return _id(f"key:{token[:32]}")


def _id(s: str) -> str:
    """An id the authority takes: printable ASCII, at most 128 characters."""
    clean = "".join(c if 33 <= ord(c) <= 126 else "_" for c in s)
    return clean[:128] or "_"


def _int(v: Any) -> int:
    try:
        return max(0, int(v))
    except (TypeError, ValueError):
        return 0


def _input_estimate(data: dict[str, Any]) -> int:
    """Input tokens, estimated at 4 characters a token over the messages (or prompt/input)."""
    chars = 0
    for m in data.get("messages") or []:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            chars += sum(len(str(p.get("text", ""))) for p in content if isinstance(p, dict))
    for field in ("prompt", "input"):
        v = data.get(field)
        if isinstance(v, str):
            chars += len(v)
    return math.ceil(chars / 4)


def _usage(obj: Any) -> tuple[int, int] | None:
    usage = getattr(obj, "usage", None)
    if usage is None and isinstance(obj, dict):
        usage = obj.get("usage")
    if usage is None:
        return None
    if isinstance(usage, dict):
        inp, out = usage.get("prompt_tokens"), usage.get("completion_tokens")
    else:
        inp, out = getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None)
    if inp is None and out is None:
        return None
    return _int(inp), _int(out)


def _chunk_chars(item: Any) -> int:
    try:
        return sum(len(c.delta.content or "") for c in item.choices)
    except (AttributeError, TypeError):
        return 0


@contextlib.asynccontextmanager
async def _semaphore(sem: asyncio.Semaphore) -> AsyncGenerator[None, None]:
    async with sem:
        yield


class _DisconnectWatch:
    """Withdraws a call's ticket when its HTTP client disconnects while the call is queued.

    LiteLLM passes the hook the request's body, not the request, and does not notice a client
    that leaves during the hook: once the call queues (an admission that does not wait costs
    nothing), the Starlette request is found on the frames that await the hook and polled; when
    its client is gone, the ticket is released by run id, which ends the slot's wait
    (:class:`TicketEnded`, with ``gone`` set)."""

    def __init__(self, frame: Any, client: AsyncAdmissionClient, run_id: str) -> None:
        # The chain of awaiting frames, kept now: a suspended coroutine's frame has no f_back.
        # Their locals are only read once the call queues.
        self._frames: list[Any] = []
        while frame is not None and len(self._frames) < 64:
            self._frames.append(frame)
            frame = frame.f_back
        self._client = client
        self._run_id = run_id
        self._watcher: asyncio.Task[None] | None = None
        self.gone = False

    def queued(self, *_: Any) -> None:
        """The ``on_queued`` callback: start watching the connection."""
        if self._watcher is not None:
            return
        request = _http_request(self._frames)
        if request is not None:
            self._watcher = asyncio.get_running_loop().create_task(self._watch(request))

    def stop(self) -> None:
        self._frames = []
        if self._watcher is not None and not self.gone:
            self._watcher.cancel()

    async def _watch(self, request: Any) -> None:
        while not await request.is_disconnected():
            await asyncio.sleep(0.25)
        self.gone = True
        try:
            await self._client.release_run(self._run_id)
        except AdmissionError as e:
            # The ticket lapses within its lease once the slot stops waiting for it.
            log.warning("run %s: withdrawing the ticket of a client that left failed: %s", self._run_id, e)


def _http_request(frames: list[Any]) -> Any:
    """The Starlette request among the locals of ``frames``; ``None`` when there is none."""
    for frame in frames:
        candidate = frame.f_locals.get("request")
        if candidate is not None and hasattr(candidate, "is_disconnected") and hasattr(candidate, "receive"):
            return candidate
    return None
