"""The limits set in LiteLLM, held installation-wide.

* A key's ``max_parallel_requests`` becomes the cap of the key's subject on the host
  (``scheduling.subjects``), and the sum of a model group's deployments' the cap of the group's
  account (``scheduling.accounts``), written with ``SetLimits`` under ``ADMISSION_LIMITS_TOKEN``
  (an operator credential the proxies are given for this). An entry written is never above the
  host's ``per_subject`` (``per_account``): whatever LiteLLM says, a key or a model group gets no
  more than the operator's default. Nothing else of the limits is touched.
* ``rpm_limit`` and ``tpm_limit`` of a key, user, team, team member and end user become windows
  of one minute (as LiteLLM's own limiter counts them) in the rate limit domain
  ``ADMISSION_RATE_LIMIT_DOMAIN``, asked through the rate limit service the authority serves
  (``envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit``) with LiteLLM's value as the
  descriptor's limit. Requests count one each before the call. Tokens are charged before the
  call with its estimate (the input, estimated, plus ``max_tokens`` or the default): a call
  whose estimate does not fit is refused (429, its charges taken back with ``hits_subtrahend``),
  so calls started together can never pass the limit by more than their estimates' error; when
  the call ends the charge is corrected by the usage LiteLLM reports (more added, or the rest
  taken back).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from .._client import OperatorClient, _channel_options, _metadata
from ..errors import AdmissionError
from ..v1 import admission_pb2 as pb

log = logging.getLogger("admission_authority_client.litellm")

class Caps:
    """Writes LiteLLM's ``max_parallel_requests`` into the host's limits: a key's into
    ``subjects`` (at most ``per_subject``), a model group's deployments' (summed) into
    ``accounts`` (at most ``per_account``, when the host has one)."""

    def __init__(self, target: str, host_id: str, token: str, timeout: float, recheck: float) -> None:
        self._operator = OperatorClient(target, token=token, timeout=timeout)
        self._host = host_id
        #: How long a cap written (or found in place) is trusted before it is read again: an
        #: operator's SetLimits or ResetLimits may have replaced it meanwhile.
        self._recheck = recheck
        #: (field, name) -> (the LiteLLM value in force, when it was last confirmed)
        self._known: dict[tuple[str, str], tuple[int, float]] = {}
        self._lock = asyncio.Lock()

    async def ensure(self, field: str, name: str, cap: int) -> None:
        """Make ``cap`` (within the operator's ceiling) the cap of ``name`` in ``field``
        (``subjects`` or ``accounts``), unless it already is."""
        known = self._known.get((field, name))
        if known is not None and known[0] == cap and time.monotonic() - known[1] < self._recheck:
            return
        async with self._lock:
            await asyncio.to_thread(self._write, field, name, cap)
            self._known[(field, name)] = (cap, time.monotonic())

    def _write(self, field: str, name: str, cap: int) -> None:
        def change(limits: pb.HostLimits) -> bool:
            if field == "subjects":
                ceiling = limits.per_subject
            else:
                ceiling = limits.per_account if limits.HasField("per_account") else cap
            wanted = max(1, min(cap, ceiling))
            entries = getattr(limits, field)
            if entries.get(name) == wanted:
                return False
            entries[name] = wanted
            log.info("%s %s: cap %d (max_parallel_requests %d in LiteLLM)", field, name, wanted, cap)
            return True

        self._operator.edit_limits(self._host, change)

    def close(self) -> None:
        self._operator.close()


@dataclass(frozen=True)
class Window:
    """One LiteLLM limit as a rate limit descriptor: ``kind`` is ``rpm`` or ``tpm``."""

    kind: str
    scope: str
    value: str
    limit: int


def deployments(group: str) -> list[tuple[str, int | None]]:
    """The model group's deployments in this proxy's router: each one's id and its
    ``max_parallel_requests`` (``None`` when it sets none). Empty outside a proxy."""
    try:
        from litellm.proxy.proxy_server import llm_router
    except ImportError:
        return []
    if llm_router is None:
        return []
    out: list[tuple[str, int | None]] = []
    for d in llm_router.get_model_list(model_name=group) or []:
        model_id = (d.get("model_info") or {}).get("id")
        cap = (d.get("litellm_params") or {}).get("max_parallel_requests")
        if model_id:
            out.append((str(model_id), cap if isinstance(cap, int) and cap > 0 else None))
    return out


def group_cap(group: str) -> int | None:
    """The sum of the ``max_parallel_requests`` of the model group's deployments, when every
    one of them sets it; else ``None``."""
    caps = [cap for _, cap in deployments(group)]
    if not caps or any(cap is None for cap in caps):
        return None
    return sum(cap for cap in caps if cap is not None)


def windows(key: Any, key_id: str) -> list[Window]:
    """The rpm and tpm limits LiteLLM's key record carries, as windows (``key_id``: the key's
    subject id, never the key itself)."""
    out: list[Window] = []
    team = getattr(key, "team_id", None)
    user = getattr(key, "user_id", None)
    end_user = getattr(key, "end_user_id", None)
    scopes: list[tuple[str, str | None, str]] = [
        ("key", key_id, ""),
        ("user", user, "user_"),
        ("team", team, "team_"),
        ("team_member", f"{team}:{user}" if team and user else None, "team_member_"),
        ("end_user", end_user, "end_user_"),
    ]
    for scope, value, prefix in scopes:
        if not value:
            continue
        for kind in ("rpm", "tpm"):
            limit = getattr(key, f"{prefix}{kind}_limit", None)
            if isinstance(limit, int) and limit >= 0:
                out.append(Window(kind, scope, str(value), limit))
    return out


class RateLimits:
    """Asks the authority's rate limit service about LiteLLM's windows."""

    METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

    def __init__(self, target: str, domain: str, token: str | None, timeout: float) -> None:
        self._target = target
        self._domain = domain
        self._md = _metadata(token)
        self._timeout = timeout
        self._channel: grpc.aio.Channel | None = None
        self._call: Any = None

    async def over(self, items: Sequence[tuple[Window, int]]) -> bool:
        """Count each window's hits (0: only look) and say whether any is over its limit."""
        if not items:
            return False
        return _overall_code(await self._ask(_request(self._domain, items))) == 2

    async def take_back(self, windows: Sequence[Window], hits: int) -> None:
        """Take ``hits`` back from each window (never below zero): a charge made ahead that
        was not used."""
        if windows and hits > 0:
            await self._ask(_request(self._domain, [(w, 0) for w in windows], subtrahend=hits))

    async def _ask(self, request: bytes) -> bytes:
        if self._call is None:
            self._channel = grpc.aio.insecure_channel(self._target, options=_channel_options(self._target))
            self._call = self._channel.unary_unary(
                self.METHOD, request_serializer=None, response_deserializer=None
            )
        last: grpc.aio.AioRpcError | None = None
        for attempt in range(3):
            try:
                reply: bytes = await self._call(request, timeout=self._timeout, metadata=self._md)
                return reply
            except grpc.aio.AioRpcError as e:
                last = e
                if e.code() != grpc.StatusCode.UNAVAILABLE:  # (a count is not repeated on a timeout)
                    raise AdmissionError(f"rate limit service: {e.details()}", e.code()) from None
                await asyncio.sleep(0.05 * (attempt + 1))
        assert last is not None
        raise AdmissionError(f"rate limit service: {last.details()}", last.code())

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()


# ---- the two messages, encoded by hand (envoy.service.ratelimit.v3; no generated code needed) ----


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _entry(key: str, value: str) -> bytes:
    return _field(1, _field(1, key.encode()) + _field(2, value.encode()))


def _request(domain: str, items: Sequence[tuple[Window, int]], subtrahend: int = 0) -> bytes:
    """A RateLimitRequest: each window with its hits (0 only looks), or, with ``subtrahend``,
    each window's count taken back by that much (the descriptors then carry no hits)."""
    out = bytearray(_field(1, domain.encode()))
    for w, hits in items:
        d = _entry("litellm", w.kind) + _entry(w.scope, w.value)
        # limit: RateLimitOverride { requests_per_unit, unit: MINUTE (2) }
        d += _field(2, b"\x08" + _varint(w.limit) + b"\x10\x02")
        if not subtrahend:
            # hits_addend: google.protobuf.UInt64Value (an explicit 0 only looks)
            d += _field(3, b"\x08" + _varint(hits) if hits else b"")
        out += _field(2, d)
    if subtrahend:
        # hits_subtrahend (field 4, a varint)
        out += _varint(4 << 3) + _varint(subtrahend)
    return bytes(out)


def _overall_code(reply: bytes) -> int:
    """RateLimitResponse.overall_code (field 1): 1 OK, 2 OVER_LIMIT."""
    i = 0
    while i < len(reply):
        tag, i = _read_varint(reply, i)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, i = _read_varint(reply, i)
            if number == 1:
                return value
        elif wire == 2:
            size, i = _read_varint(reply, i)
            i += size
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            break
    return 0


def _read_varint(b: bytes, i: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        byte = b[i]
        i += 1
        n |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return n, i
        shift += 7
