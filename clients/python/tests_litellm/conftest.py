"""Two real LiteLLM proxies with the drop-in, one authority, one fake upstream.

* The authority is the repo's binary (``$ADMISSION_BIN``, else the debug build) with gateway
  and operator credentials, a short lease and a rate limit domain for LiteLLM's windows.
* The upstream is an OpenAI-compatible server run in this process: it answers chat completions
  (streamed or not, with usage), and counts the requests it is serving at once, in all and by
  the ``tag=`` a test writes into the message. ``delay=S`` makes it take S seconds, ``fail``
  makes it answer 500.
* The proxies are ``litellm --config`` processes (LiteLLM 1.108.7, no database, offline cost
  map) whose keys come from this directory's ``keys.py`` (a ``custom_auth``), both registering
  ``admission_authority_client.litellm.handler``. Tests set the host's limits they need with
  the operator client first; each uses keys and tags of its own.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from admission_authority_client import AdmissionClient, OperatorClient
from admission_authority_client.v1 import admission_pb2 as pb

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
HOST = "litellm"
GATEWAY_TOKEN = "gw-litellm-test-token-0123456789"
OPERATOR_TOKEN = "op-litellm-test-token-0123456789"
T = TypeVar("T")


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def eventually(what: str, check: Callable[[], T | None], deadline: float = 10.0) -> T:
    """Poll ``check`` until it returns something other than None, or fail after ``deadline``."""
    end = time.monotonic() + deadline
    while True:
        value = check()
        if value is not None:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {deadline} s waiting for: {what}")
        time.sleep(0.05)


# ---- the upstream ----


@dataclass
class Tag:
    now: int = 0
    max: int = 0
    total: int = 0
    max_tokens: list[int | None] = field(default_factory=list)


class Upstream:
    """A fake OpenAI-compatible provider that counts what reaches it."""

    USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}

    def __init__(self) -> None:
        self.port = free_port()
        self._lock = threading.Lock()
        self.tags: dict[str, Tag] = {}
        self.all = Tag()
        #: The tag of every request, in the order they arrived.
        self.order: list[str] = []
        app = Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])])
        self._server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off")
        )
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        eventually("the upstream listening", lambda: self._server.started or None)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)

    def tag(self, name: str) -> Tag:
        with self._lock:
            return self.tags.setdefault(name, Tag())

    def _enter(self, tag: str, max_tokens: int | None, count_all: bool = True) -> None:
        with self._lock:
            if count_all:
                self.order.append(tag)
            for t in (self.all, self.tags.setdefault(tag, Tag()))[0 if count_all else 1 :]:
                t.now += 1
                t.total += 1
                t.max = max(t.max, t.now)
                t.max_tokens.append(max_tokens)

    def _leave(self, tag: str, model: Any = None) -> None:
        with self._lock:
            self.all.now -= 1
            self.tags[tag].now -= 1
            self.tags[f"{tag}@{model}"].now -= 1

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        words: dict[str, str] = {}
        for m in body.get("messages", []):
            c = m.get("content")
            if isinstance(c, str):
                for w in c.split():
                    k, _, v = w.partition("=")
                    words[k] = v
        # Counted under the tag, and under "<tag>@<model>": which deployment served it.
        tag, delay = words.get("tag", ""), float(words.get("delay") or 0.05)
        # "usage=<prompt>+<completion>" in the message sets the tokens the call reports.
        usage = dict(self.USAGE)
        if "usage" in words:
            prompt, _, completion = words["usage"].partition("+")
            usage = {"prompt_tokens": int(prompt), "completion_tokens": int(completion)}
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        self._enter(tag, body.get("max_tokens"))
        self._enter(f"{tag}@{body.get('model')}", body.get("max_tokens"), count_all=False)
        if "fail" in words:
            try:
                await asyncio.sleep(delay)
            finally:
                self._leave(tag, body.get("model"))
            return JSONResponse({"error": {"message": "upstream failed", "type": "server_error"}}, status_code=500)
        if body.get("stream"):
            include_usage = (body.get("stream_options") or {}).get("include_usage")

            async def chunks() -> Any:
                try:
                    for i in range(5):
                        await asyncio.sleep(delay / 5)
                        yield _sse({"choices": [{"index": 0, "delta": {"content": f"w{i} "}, "finish_reason": None}]})
                    yield _sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                    if include_usage:
                        yield _sse({"choices": [], "usage": usage})
                    yield "data: [DONE]\n\n"
                finally:
                    self._leave(tag, body.get("model"))

            return StreamingResponse(chunks(), media_type="text/event-stream")
        try:
            await asyncio.sleep(delay)
        finally:
            self._leave(tag, body.get("model"))
        return JSONResponse(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 1,
                "model": "fake",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
                "usage": usage,
            }
        )


def _sse(chunk: dict[str, Any]) -> str:
    return "data: " + json.dumps({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "fake", **chunk}) + "\n\n"


# ---- the authority ----


class Authority:
    def __init__(self, workdir: Path, port: int | None = None) -> None:
        self.port = port or free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.proc_dir = workdir
        config = workdir / "authority.yaml"
        config.write_text(
            f"""
scheduling: {{ total: 64, per_subject: 64, lease_ttl: 2s, queue: {{ total: 1000 }} }}
resources: {{ reservation_ttl: 5s }}
allowances:
  "model:budgeted": {{ tokens: 100000, window: 24h }}
credentials:
  - {{ name: litellm, role: gateway, host_ids: [{HOST}], domains: [litellm], token_sha256: {sha(GATEWAY_TOKEN)} }}
  - {{ name: ops, role: operator, token_sha256: {sha(OPERATOR_TOKEN)} }}
rate_limits:
  domains:
    - {{ domain: litellm }}
"""
        )
        binary = os.environ.get("ADMISSION_BIN", str(REPO / "target/debug/admission-authority"))
        self.proc = subprocess.Popen(
            [binary, "serve", "--listen", self.addr, "--config", str(config)],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "RUST_LOG": "warn"},
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith("listening on "), f"unexpected first line: {line!r}"
        self.operator = OperatorClient(self.addr, token=OPERATOR_TOKEN)
        self.client = AdmissionClient(self.addr, host_id=HOST, instance_id="test", token=GATEWAY_TOKEN)

    def stats(self) -> pb.Stats:
        return self.client.stats()

    def reservations(self) -> list[pb.ReservationInfo]:
        """The host's reservations not yet settled."""
        reply = self.operator.stub.ListReservations(
            pb.ListReservationsRequest(host_id=HOST), metadata=(("authorization", f"Bearer {OPERATOR_TOKEN}"),)
        )
        return list(reply.reservations)

    def budget_left(self) -> int:
        """Tokens the ``budgeted`` model's allowance has left (a one-token probe, refunded)."""
        run = f"probe-{uuid.uuid4().hex}"
        auth = self.client.authorize(run, 1, "probe", requested_output_tokens=1, account_id="model:budgeted")
        assert auth.allowed and auth.remaining_tokens is not None, auth
        self.client.settle(run, 1, input_tokens=0, output_tokens=0)
        return auth.remaining_tokens + 1

    def tpm_left(self, key: str, limit: int) -> int:
        """What LiteLLM's tpm window of ``key`` (whose ``tpm_limit`` is ``limit``) has left this
        minute, named as the drop-in names it: a look, which counts nothing."""
        import grpc

        from admission_authority_client.litellm.limits import RateLimits, Window, _read_varint, _request

        # The key's id as the drop-in has it: LiteLLM's hash of the key, never the key.
        window = Window("tpm", "key", "key:" + hashlib.sha256(key.encode()).hexdigest()[:32], limit)
        with grpc.insecure_channel(self.addr) as channel:
            call: Any = channel.unary_unary(RateLimits.METHOD, request_serializer=None, response_deserializer=None)
            reply: bytes = call(_request("litellm", [(window, 0)]), metadata=(("authorization", f"Bearer {GATEWAY_TOKEN}"),))
        # RateLimitResponse.statuses (2), its first DescriptorStatus's limit_remaining (3).
        i = 0
        while i < len(reply):
            tag, i = _read_varint(reply, i)
            if tag & 7 == 0:
                _, i = _read_varint(reply, i)
                continue
            size, i = _read_varint(reply, i)
            if tag >> 3 == 2:
                status, j = reply[i : i + size], 0
                while j < len(status):
                    t, j = _read_varint(status, j)
                    if t & 7 == 0:
                        v, j = _read_varint(status, j)
                        if t >> 3 == 3:
                            return v
                    else:
                        n, j = _read_varint(status, j)
                        j += n
                return 0  # a status without limit_remaining: none left
            i += size
        raise AssertionError(f"no descriptor status in {reply!r}")

    def settled(self) -> None:
        """Wait until no call holds a slot or a reservation (what a test left behind ends)."""
        eventually(
            "every slot and reservation released",
            lambda: (self.stats().in_flight == 0 and self.stats().queued == 0 and not self.reservations()) or None,
        )

    def limits(self, **changes: Any) -> None:
        """Set the host's limits for a test (the rest as configured)."""
        self.operator.reset_limits(HOST)
        if changes:
            self.operator.update_limits(HOST, **changes)

    def stop(self) -> None:
        self.client.close()
        self.operator.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


# ---- the proxies ----


class Proxy:
    """A ``litellm`` proxy process with the drop-in."""

    def __init__(
        self, name: str, workdir: Path, env: dict[str, str], port: int | None = None, config: str = "litellm.yaml"
    ) -> None:
        self.name = name
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / f"proxy-{name}.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "litellm"),
                "--config", str(workdir / config),
                "--host", "127.0.0.1",
                "--port", str(self.port),
                "--num_workers", "1",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=workdir,
            env={
                **os.environ,
                "PYTHONPATH": str(HERE),
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                "LITELLM_MASTER_KEY": "sk-master",
                "LITELLM_LOG": "ERROR",
                "ADMISSION_REPLICA_ID": f"proxy-{name}",
                **env,
            },
        )

    def wait_ready(self, deadline: float = 90.0) -> None:
        def ready() -> bool | None:
            if self.proc.poll() is not None:
                raise AssertionError(f"proxy {self.name} exited {self.proc.returncode}:\n{self.log()}")
            try:
                return httpx.get(f"{self.url}/health/liveliness", timeout=1).status_code == 200 or None
            except httpx.HTTPError:
                return None

        eventually(f"proxy {self.name} ready", ready, deadline)

    def log(self) -> str:
        return self.log_path.read_text()[-4000:]

    def chat(
        self,
        key: str,
        text: str,
        *,
        stream: bool = False,
        timeout: float = 60.0,
        headers: dict[str, str] | None = None,
        **body: Any,
    ) -> httpx.Response:
        """One chat completion; a stream is read to its end."""
        payload = {"model": body.pop("model", "fake"), "messages": [{"role": "user", "content": text}], "stream": stream, **body}
        sent = {"authorization": f"Bearer {key}", **(headers or {})}
        with httpx.Client(timeout=timeout) as c:
            if not stream:
                return c.post(f"{self.url}/v1/chat/completions", json=payload, headers=sent)
            with c.stream("POST", f"{self.url}/v1/chat/completions", json=payload, headers=sent) as r:
                r.read()
                return r

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()


LITELLM_CONFIG = """
model_list:
  - model_name: fake
    litellm_params: {{ model: openai/fake, api_base: "http://127.0.0.1:{port}/v1", api_key: x }}
  - model_name: budgeted
    litellm_params: {{ model: openai/budgeted, api_base: "http://127.0.0.1:{port}/v1", api_key: x }}
  - model_name: capped
    litellm_params: {{ model: openai/capped, api_base: "http://127.0.0.1:{port}/v1", api_key: x, max_parallel_requests: 1 }}
  - model_name: pair
    litellm_params: {{ model: openai/pair-a, api_base: "http://127.0.0.1:{port}/v1", api_key: x, max_parallel_requests: 1 }}
    model_info: {{ id: pair-a }}
  - model_name: pair
    litellm_params: {{ model: openai/pair-b, api_base: "http://127.0.0.1:{port}/v1", api_key: x, max_parallel_requests: 1 }}
    model_info: {{ id: pair-b }}
litellm_settings:
  callbacks: ["admission_authority_client.litellm.handler"]
general_settings:
  master_key: sk-master
  custom_auth: keys.user_api_key_auth
"""


@dataclass
class Fleet:
    upstream: Upstream
    authority: Authority
    proxies: list[Proxy]
    workdir: Path
    #: Stopped after the proxies, at the end of the session.
    stoppers: list[Callable[[], None]] = field(default_factory=list)

    def proxy(self, name: str, env: dict[str, str] | None = None, **kw: Any) -> Proxy:
        """Another proxy against the same authority and upstream (stopped by the fixture)."""
        p = Proxy(name, self.workdir, {**self.env(), **(env or {})}, **kw)
        self.proxies.append(p)
        return p

    def env(self) -> dict[str, str]:
        return {
            "ADMISSION_AUTHORITY_URL": self.authority.addr,
            "ADMISSION_AUTHORITY_TOKEN": GATEWAY_TOKEN,
            "ADMISSION_HOST_ID": HOST,
            "ADMISSION_LIMITS_TOKEN": OPERATOR_TOKEN,
            "ADMISSION_RATE_LIMIT_DOMAIN": "litellm",
            "ADMISSION_TIMEOUT": "2",
            "ADMISSION_LIMITS_RECHECK": "0",
            # Calls that carry it are keyed by it (serial, keep newest); others are not.
            "ADMISSION_KEY_HEADER": "x-conversation-id",
        }


@pytest.fixture(scope="session")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    workdir = tmp_path_factory.mktemp("litellm")
    upstream = Upstream()
    (workdir / "litellm.yaml").write_text(LITELLM_CONFIG.format(port=upstream.port))
    authority = Authority(workdir)
    f = Fleet(upstream, authority, [], workdir)
    try:
        a, b = f.proxy("a"), f.proxy("b")
        a.wait_ready()
        b.wait_ready()
        yield f
    finally:
        for p in f.proxies:
            p.stop()
        for stop in f.stoppers:
            stop()
        f.authority.stop()
        upstream.stop()


@pytest.fixture
def a(fleet: Fleet) -> Proxy:
    return fleet.proxies[0]


@pytest.fixture
def b(fleet: Fleet) -> Proxy:
    return fleet.proxies[1]


def burst(n: int, call: Callable[[int], T]) -> list[T]:
    """``n`` calls at once, on threads; their results in order."""
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(call, range(n)))


@dataclass
class Extras:
    """Proxies configured otherwise, started together the first time a test needs one."""

    reject: Proxy
    #: Both against ``doomed``, an authority the failure tests stop.
    closed: Proxy
    local: Proxy
    doomed: Authority
    #: Killed (SIGKILL) and stopped (SIGTERM) by the tests.
    killed: Proxy
    stopped: Proxy
    #: ADMISSION_ACCOUNT=deployment.
    by_deployment: Proxy


@pytest.fixture(scope="session")
def extras(fleet: Fleet) -> Extras:
    doomed_dir = fleet.workdir / "doomed"
    doomed_dir.mkdir()
    doomed = Authority(doomed_dir)
    fleet.stoppers.append(doomed.stop)
    on_doomed = {"ADMISSION_AUTHORITY_URL": doomed.addr, "ADMISSION_LIMITS_TOKEN": "", "ADMISSION_RATE_LIMIT_DOMAIN": ""}
    e = Extras(
        reject=fleet.proxy("reject", {"ADMISSION_MODE": "reject"}),
        closed=fleet.proxy("closed", on_doomed),
        local=fleet.proxy("local", {**on_doomed, "ADMISSION_FAILURE_MODE": "local", "ADMISSION_LOCAL_MAX_PARALLEL": "1"}),
        doomed=doomed,
        killed=fleet.proxy("killed"),
        stopped=fleet.proxy("stopped"),
        by_deployment=fleet.proxy("by-deployment", {"ADMISSION_ACCOUNT": "deployment"}),
    )
    for p in (e.reject, e.closed, e.local, e.killed, e.stopped, e.by_deployment):
        p.wait_ready()
    return e


@pytest.fixture
def reject(extras: Extras) -> Proxy:
    return extras.reject
