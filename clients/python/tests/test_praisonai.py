"""The PraisonAI drop-ins against the real PraisonAI package and a real authority process.

Two ``BotOS`` replicas with a token-free test channel share one
authority through :class:`AuthorityGate`; two real ``WebSocketGateway`` processes-in-a-loop share
the authority-backed auth limiter through :func:`patch_praisonai`.
"""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest

# PraisonAI keeps state under $HOME; the tests must not touch the real one.
os.environ["HOME"] = tempfile.mkdtemp(prefix="praisonai-home-")

from praisonai_bot.bots import Bot, BotOS  # noqa: E402
from praisonai_bot.bots._admission import AdmissionRejected  # noqa: E402
from praisonai_bot.bots._registry import register_platform  # noqa: E402
from praisonai_bot.bots._session import BotSessionManager  # noqa: E402
from praisonaiagents.approval.registry import _human_wait_scope  # noqa: E402
from praisonaiagents.telemetry.token_collector import TokenMetrics, get_token_collector  # noqa: E402

from admission_authority_client import AdmissionClient, AsyncAdmissionClient  # noqa: E402
from admission_authority_client.praisonai import (  # noqa: E402
    AuthorityAuthLimiter,
    AuthorityGate,
    AuthorityRejected,
    SUPERSEDED_MESSAGE,
    install,
    patch_praisonai,
)
from admission_authority_client.v1 import admission_pb2 as pb  # noqa: E402

from .conftest import Server  # noqa: E402

StartServer = Callable[..., Server]
T = TypeVar("T")
BUSY = AdmissionRejected().message  # PraisonAI's own busy reply


# -- the harness: a token-free channel, blocking stub agents, replicas --------------------------


class Agents:
    """Stub agents (one per user: a session manager locks per agent for the whole call) whose
    blocking ``chat`` counts concurrent calls and waits for the test to let it finish."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.peak = 0
        self.go = threading.Event()
        #: Per user: called inside ``chat`` (in PraisonAI's worker thread) before it waits.
        self.during: dict[str, Callable[[], None]] = {}

    def agent(self, user: str) -> Any:
        agents = self

        class StubAgent:
            name = user
            chat_history: list[Any] = []

            def chat(self, prompt: str, **_: Any) -> str:
                with agents.lock:
                    agents.running += 1
                    agents.peak = max(agents.peak, agents.running)
                try:
                    if user in agents.during:
                        agents.during[user]()
                    assert agents.go.wait(20), "the test never let the agent finish"
                finally:
                    with agents.lock:
                        agents.running -= 1
                return f"done:{prompt}"

        return StubAgent()


class TestChannel:
    """A PraisonAI channel adapter with no platform behind it: the test sends turns directly."""

    def __init__(self, token: str = "", agent: Any = None, config: Any = None, **_: Any) -> None:
        self.session = BotSessionManager(platform="testchan")
        self._stop: asyncio.Event | None = None
        self.is_running = False

    def attach_gateway_runtime(self, seams: Any) -> None:
        self.session.attach_gateway_runtime(seams)

    async def start(self) -> None:
        self._stop = asyncio.Event()
        self.is_running = True
        await self._stop.wait()

    async def stop(self) -> None:
        self.is_running = False
        if self._stop is not None:
            self._stop.set()


register_platform("testchan", TestChannel)


class Replica:
    """One gateway replica: a BotOS running the test channel, its gate installed before start."""

    def __init__(self, agents: Agents) -> None:
        self.agents = agents
        self.bos = BotOS(bots=[Bot("testchan", agent=agents.agent("default"))], enable_supervision=False)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self.bos.start())
        bot = self.bos._bots["testchan"]
        await until("the channel to start", lambda: bot._adapter is not None and bot._adapter.is_running or None)
        self.channel: TestChannel = bot._adapter

    def send(self, user: str, text: str = "hi") -> asyncio.Task[str]:
        return asyncio.create_task(self.channel.session.chat(self.agents.agent(user), user, text))

    async def stop(self) -> None:
        await self.bos.stop()
        if self._task is not None:
            self._task.cancel()


async def until(what: str, check: Callable[[], T | None], deadline: float = 10.0) -> T:
    """Poll ``check`` on the loop until it returns something other than None."""
    end = time.monotonic() + deadline
    while True:
        value = check()
        if value is not None:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {deadline} s waiting for: {what}")
        await asyncio.sleep(0.02)


async def until_async(what: str, check: Callable[[], Awaitable[T | None]], deadline: float = 10.0) -> T:
    end = time.monotonic() + deadline
    while True:
        value = await check()
        if value is not None:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {deadline} s waiting for: {what}")
        await asyncio.sleep(0.02)


def authority_stats(addr: str, host: str = "gw") -> pb.Stats:
    with AdmissionClient(addr, host_id=host) as c:
        return c.stats()


def client(server: Server, replica: str) -> AsyncAdmissionClient:
    return AsyncAdmissionClient(server.addr, host_id="gw", instance_id=replica, timeout=2.0)


# -- the gate -----------------------------------------------------------------------------------


def test_two_botos_replicas_share_one_cap_and_the_surplus_gets_the_busy_reply(start_server: StartServer) -> None:
    server = start_server("--total", "2", "--queue-total", "2")
    agents = Agents()

    async def main() -> None:
        a, b = Replica(agents), Replica(agents)
        gate_a = install(a.bos, client(server, "replica-a"))
        gate_b = install(b.bos, client(server, "replica-b"))
        await a.start()
        await b.start()
        turns = [a.send(f"a{i}") for i in range(4)] + [b.send(f"b{i}") for i in range(4)]
        # Cap 2 + queue 2 across both replicas: four turns refused, whichever replica they hit.
        await until("four refusals", lambda: sum(t.done() for t in turns) == 4 or None)
        s = authority_stats(server.addr)
        assert (s.in_flight, s.queued) == (2, 2)
        assert gate_a.in_flight + gate_b.in_flight == 2 and gate_a.queued + gate_b.queued == 2
        refused = [t.result() for t in turns if t.done()]
        assert refused == [BUSY] * 4
        await until("both admitted turns to run", lambda: agents.running == 2 or None)
        agents.go.set()
        results = await asyncio.gather(*turns)
        assert sorted(results).count("done:hi") == 4 and results.count(BUSY) == 4
        assert agents.peak == 2, "the cap held across both replicas"
        for gate in (gate_a, gate_b):
            st = gate.stats()
            assert (st["in_flight"], st["queued"], st["awaiting_human"]) == (0, 0, 0)
        assert gate_a.stats()["rejected"] + gate_b.stats()["rejected"] == 4
        assert gate_a.stats()["admitted"] + gate_b.stats()["admitted"] == 4
        s = authority_stats(server.addr)
        assert (s.in_flight, s.queued, s.admitted, s.released, s.rejected) == (0, 0, 4, 4, 4)
        await a.stop()
        await b.stop()

    asyncio.run(main())


def test_turns_carry_on_through_a_killed_and_restarted_authority(
    start_server: StartServer, tmp_path: Path
) -> None:
    # An authority on a data dir, SIGKILLed and started again on the same address: the running
    # turn keeps its slot by renewing, the queued one's Wait is reopened and keeps its place.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        addr = f"127.0.0.1:{sock.getsockname()[1]}"
    flags = ("--data-dir", str(tmp_path / "data"), "--total", "1", "--queue-total", "2",
             "--lease-ttl", "2s")
    first = start_server(*flags, listen=addr)
    agents = Agents()

    async def main() -> None:
        replica = Replica(agents)
        gate = install(replica.bos, AsyncAdmissionClient(addr, host_id="gw", instance_id="replica-a", timeout=2.0))
        await replica.start()
        running = replica.send("alice")
        await until("alice's turn to run", lambda: agents.running == 1 or None)
        waiting = replica.send("bob")
        await until("bob's turn to queue", lambda: gate.queued == 1 or None)
        first.kill()
        start_server(*flags, listen=addr)
        restarted = time.monotonic()
        # Past the lease the restart gave: only the gate's renewals keep alice's slot.
        while time.monotonic() - restarted < 3.0:
            s = authority_stats(addr)
            assert (s.in_flight, s.queued, s.expired) == (1, 1, 0), s
            assert agents.running == 1
            await asyncio.sleep(0.1)
        agents.go.set()
        assert list(await asyncio.gather(running, waiting)) == ["done:hi", "done:hi"]
        s = authority_stats(addr)
        assert (s.in_flight, s.expired, s.released) == (0, 0, 2), s
        assert gate.stats()["rejected"] == 0
        await replica.stop()

    asyncio.run(main())


def test_turns_re_register_after_an_authority_in_memory_restarts(
    start_server: StartServer,
) -> None:
    # Without a data dir a restart forgets every ticket: the running turn's renewal finds its
    # ticket gone and re-registers it (Reclaim), so its run counts again; the queued turn's
    # Wait ends NOT_FOUND and it submits again under its run_id. Neither is refused.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        addr = f"127.0.0.1:{sock.getsockname()[1]}"
    flags = ("--total", "1", "--queue-total", "2", "--lease-ttl", "600ms")
    first = start_server(*flags, listen=addr)
    agents = Agents()

    async def main() -> None:
        replica = Replica(agents)
        gate = install(replica.bos, AsyncAdmissionClient(addr, host_id="gw", instance_id="replica-a", timeout=2.0))
        await replica.start()
        running = replica.send("alice")
        await until("alice's turn to run", lambda: agents.running == 1 or None)
        waiting = replica.send("bob")
        await until("bob's turn to queue", lambda: gate.queued == 1 or None)
        first.kill()
        start_server(*flags, listen=addr)
        await until("alice's run counted again",
                    lambda: authority_stats(addr).reclaimed == 1 or None)
        await until("bob's turn submitted again", lambda: (
            (lambda st: st.in_flight + st.queued == 2 or None)(authority_stats(addr))))
        agents.go.set()
        assert list(await asyncio.gather(running, waiting)) == ["done:hi", "done:hi"]
        s = authority_stats(addr)
        assert (s.in_flight, s.queued, s.released) == (0, 0, 2), s
        assert gate.stats()["rejected"] == 0
        await replica.stop()

    asyncio.run(main())


def test_a_turn_waiting_on_a_human_lends_its_slot_and_gets_it_back(start_server: StartServer) -> None:
    server = start_server("--total", "1", "--queue-total", "4")
    agents = Agents()
    answered = threading.Event()
    asked = threading.Event()

    def ask_a_human() -> None:
        # What PraisonAI's approval registry does around a backend's blocking human wait.
        with _human_wait_scope():
            asked.set()
            assert answered.wait(20)

    agents.during["asker"] = ask_a_human

    async def main() -> None:
        replica = Replica(agents)
        gate = install(replica.bos, client(server, "r"))
        await replica.start()
        asker = replica.send("asker")
        await until("the asker to park", lambda: asked.is_set() or None)
        await until_async("the ticket to be parked",
                          lambda: asyncio.to_thread(lambda: authority_stats(server.addr).parked == 1 or None))
        st = gate.stats()
        assert (st["in_flight"], st["awaiting_human"]) == (0, 1)
        # Its slot is lent out: another turn is admitted while the human thinks.
        holder = replica.send("holder")
        await until("the holder to run", lambda: agents.running == 2 or None)
        assert gate.stats()["in_flight"] == 1
        # The human answers while the holder runs: the asker queues first in line and waits.
        answered.set()
        await until_async("the asker to queue behind the holder",
                          lambda: asyncio.to_thread(lambda: authority_stats(server.addr).queued == 1 or None))
        assert not asker.done()
        agents.go.set()
        assert await holder == "done:hi"
        assert await asker == "done:hi"
        st = gate.stats()
        assert (st["in_flight"], st["queued"], st["awaiting_human"], st["admitted"]) == (0, 0, 0, 2)
        s = authority_stats(server.addr)
        assert (s.in_flight, s.queued, s.parked, s.released) == (0, 0, 0, 2)
        await replica.stop()

    asyncio.run(main())


def test_a_cancelled_queued_turn_leaves_no_ticket_behind(start_server: StartServer) -> None:
    server = start_server("--total", "1", "--queue-total", "4")
    agents = Agents()

    async def main() -> None:
        replica = Replica(agents)
        gate = install(replica.bos, client(server, "r"))
        await replica.start()
        holder = replica.send("holder")
        await until("the holder to run", lambda: agents.running == 1 or None)
        waiter = replica.send("waiter")
        await until("the waiter to queue", lambda: gate.queued == 1 or None)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        s = await until_async("the ticket to be withdrawn", lambda: asyncio.to_thread(
            lambda: (st := authority_stats(server.addr)).cancelled == 1 and st or None))
        assert (s.queued, s.in_flight) == (0, 1)
        assert gate.queued == 0
        agents.go.set()
        assert await holder == "done:hi"
        s = authority_stats(server.addr)
        assert (s.in_flight, s.queued, s.admitted) == (0, 0, 1)
        await replica.stop()

    asyncio.run(main())


def test_a_turn_cancelled_while_it_submits_withdraws_what_the_submit_made(start_server: StartServer) -> None:
    server = start_server("--total", "4")

    async def main() -> None:
        gate = AuthorityGate(client(server, "r"))
        # Cancel at the first await inside admit: the Submit is on its way or already answered.
        for _ in range(5):
            entering = asyncio.create_task(gate.admit(session_id="u").__aenter__())
            await asyncio.sleep(0)
            entering.cancel()
            with pytest.raises(asyncio.CancelledError):
                await entering
        await gate.aclose()  # the withdrawals run in the background; wait for them
        s = authority_stats(server.addr)
        assert (s.in_flight, s.queued, gate.in_flight) == (0, 0, 0)
        assert s.admitted == s.released, "whatever the Submits admitted was released"

    asyncio.run(main())


def test_stats_never_calls_out_and_release_is_idempotent(start_server: StartServer) -> None:
    server = start_server("--total", "3", "--per-subject", "2", "--queue-total", "5")
    c = client(server, "r")
    gate = AuthorityGate(c)  # built outside any event loop, as BotOS builds it
    assert gate.enabled and c._channel is None, "the channel opens lazily, on the loop"
    keys = {"max_concurrent_runs", "max_concurrent_runs_per_scope", "queue_depth", "in_flight",
            "queued", "admitted", "rejected", "shed", "max_rss_mb", "awaiting_human"}
    assert keys <= set(gate.stats())

    async def main() -> None:
        cm = gate.admit(session_id="alice")
        await cm.__aenter__()
        assert gate.in_flight == 1
        await cm.__aexit__(None, None, None)
        await cm.__aexit__(RuntimeError, RuntimeError("again"), None)  # twice: harmless
        assert (gate.in_flight, authority_stats(server.addr).released) == (0, 1)
        st = await gate.refresh_stats()
        assert (st["max_concurrent_runs"], st["max_concurrent_runs_per_scope"], st["queue_depth"]) == (3, 2, 5)
        assert st["admitted"] == 1

    asyncio.run(main())
    server.stop()
    started = time.monotonic()
    assert gate.stats()["max_concurrent_runs"] == 3  # cached, with the authority gone
    assert time.monotonic() - started < 0.05


def test_rss_is_sent_with_submit(start_server: StartServer) -> None:
    server = start_server("--total", "2", "--max-rss-mb", "1")

    async def main() -> None:
        gate = AuthorityGate(client(server, "r"))
        # This Python process is well over 1 MiB: the authority's memory ladder refuses.
        with pytest.raises(AuthorityRejected) as refused:
            async with gate.admit(session_id="alice"):
                pass
        assert refused.value.reason == "MEMORY_PRESSURE" and refused.value.message == BUSY

    asyncio.run(main())


def test_the_authority_stopped_mid_test_gives_each_gate_its_failure_mode(start_server: StartServer) -> None:
    server = start_server("--total", "4")
    agents = Agents()
    agents.go.set()

    async def main() -> None:
        closed, local = Replica(agents), Replica(agents)
        install(closed.bos, client(server, "closed"))
        local_gate = install(local.bos, client(server, "local"), failure_mode="local",
                             local_max_concurrent_runs=1)
        await closed.start()
        await local.start()
        assert await closed.send("u1") == "done:hi"
        assert await local.send("u2") == "done:hi"
        server.stop()
        # Closed (the default): refused with the busy reply, nothing runs.
        assert await closed.send("u3") == BUSY
        # Local: a bounded local gate of one slot and no queue decides.
        agents.go.clear()
        first = local.send("u4")
        await until("the local turn to run", lambda: agents.running == 1 or None)
        assert await local.send("u5") == BUSY
        agents.go.set()
        assert await first == "done:hi"
        st = local_gate.stats()
        assert st["authority_reachable"] is False and st["in_flight"] == 0
        assert agents.peak == 1
        await closed.stop()
        await local.stop()

    asyncio.run(main())


def test_failure_mode_is_checked_when_the_gate_is_built(start_server: StartServer) -> None:
    c = AsyncAdmissionClient("127.0.0.1:1", host_id="gw")
    with pytest.raises(ValueError, match="failure_mode"):
        AuthorityGate(c, failure_mode="open")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="local_max_concurrent_runs"):
        AuthorityGate(c, failure_mode="local")


# -- budgets: Authorize in admit(), usage settled through PraisonAI's token collector ----------


def test_admit_checks_the_budget_and_reported_usage_is_settled(start_server: StartServer, tmp_path: Path) -> None:
    config = tmp_path / "budget.yaml"
    config.write_text("scheduling: { total: 4 }\nallowances:\n  acme: { tokens: 500, window: 24h }\n")
    server = start_server("--config", str(config))
    agents = Agents()
    agents.go.set()

    def report_usage() -> None:
        # What PraisonAI's LLM layer does after every model call.
        get_token_collector().track_tokens("gpt-test", "agent", TokenMetrics(input_tokens=100, output_tokens=200))

    for user in ("u1", "u2", "u3"):
        agents.during[user] = report_usage

    async def main() -> None:
        replica = Replica(agents)
        gate = install(replica.bos, client(server, "r"), authorize_output_tokens=1000,
                       account=lambda session: "acme")
        await replica.start()
        # Turn 1 reserves 500 (all the allowance), uses 300: 200 remain.
        assert await replica.send("u1") == "done:hi"
        # Turn 2 is granted what remains (200) and uses 300: nothing remains. Without the usage
        # settled, turn 1's reservation would still hold all 500 and turn 2 would be refused.
        assert await replica.send("u2") == "done:hi"
        assert await replica.send("u3") == gate.budget_message
        s = authority_stats(server.addr)
        assert (s.settled, s.authorize_allowed, s.authorize_denied, s.in_flight) == (2, 2, 1, 0)
        await replica.stop()

    try:
        asyncio.run(main())
    finally:
        get_token_collector().set_sink(None)


# -- the auth limiter ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except (urllib.error.URLError, ConnectionError):
        return 0  # not listening (yet)


def test_two_gateways_share_the_magic_link_budget(start_server: StartServer) -> None:
    from praisonai_bot.gateway.server import WebSocketGateway

    server = start_server()

    async def main() -> None:
        undo = patch_praisonai(client(server, "gw"))
        try:
            ports = [free_port(), free_port()]
            gateways = [WebSocketGateway(host="127.0.0.1", port=p) for p in ports]
            tasks = [asyncio.create_task(g.start()) for g in gateways]
            for p in ports:
                health = f"http://127.0.0.1:{p}/health"

                async def serving(url: str = health) -> bool | None:
                    return await asyncio.to_thread(get_status, url) == 200 or None

                await until_async(f"the gateway on {p}", serving)
            # magic_link: 5 per minute per client address, counted on every /?link= request,
            # alternating between the two gateways: 5 in total, not 5 per gateway.
            codes = [await asyncio.to_thread(get_status, f"http://127.0.0.1:{ports[i % 2]}/?link=nope")
                     for i in range(8)]
            assert codes == [401] * 5 + [429] * 3, codes
            for g in gateways:
                await g.stop()
            for t in tasks:
                t.cancel()
        finally:
            undo.undo()

    asyncio.run(main())


def test_the_limiter_falls_back_to_a_local_bucket_and_never_fails_open(start_server: StartServer) -> None:
    server = start_server()
    limiter = AuthorityAuthLimiter(AdmissionClient(server.addr, host_id="gw"), max_attempts=5)
    # Shared: the authority counts, with the limiter's own numbers (5), not its built-in
    # `approval` bucket's 10.
    assert all(limiter.allow("approval_pending", "10.0.0.1") for _ in range(5))
    assert not limiter.allow("approval_pending", "10.0.0.1")
    assert limiter.time_until_allowed("approval_pending", "10.0.0.1") > 250
    # A verified success clears the bucket (pairing_verify counts failures only).
    assert all(limiter.allow("pairing_verify", "telegram") for _ in range(5))
    assert not limiter.allow("pairing_verify", "telegram")
    limiter.reset("pairing_verify", "telegram")
    assert limiter.allow("pairing_verify", "telegram")

    # A lockout earned through another replica shows here at once (a peek counts nothing).
    other = AuthorityAuthLimiter(AdmissionClient(server.addr, host_id="gw"))
    assert limiter.time_until_allowed("pairing_verify", "slack") == 0.0
    for _ in range(6):
        other.allow("pairing_verify", "slack")
    assert limiter.time_until_allowed("pairing_verify", "slack") > 250
    assert all(limiter.time_until_allowed("magic_link", "10.0.0.9") == 0.0 for _ in range(10))
    assert all(limiter.allow("magic_link", "10.0.0.9") for _ in range(5)), "peeks counted nothing"

    server.stop()
    started = time.monotonic()
    # A lockout the authority reported before the outage still holds without it.
    assert not limiter.allow("approval_pending", "10.0.0.1")
    decisions = [limiter.allow("magic_link", "10.0.0.2") for _ in range(8)]
    # The local fallback of the constructor's numbers (5): never more, never failing open.
    assert decisions == [True] * 5 + [False] * 3
    assert limiter.time_until_allowed("magic_link", "10.0.0.2") > 250, "a lockout earned locally"
    # One deadline (100 ms) spent on the first call, then the authority is skipped for 5 s.
    assert time.monotonic() - started < 2.0


def test_session_ids_the_authority_would_refuse_are_hashed_into_subjects(start_server: StartServer) -> None:
    server = start_server("--total", "2")

    async def main() -> None:
        gate = AuthorityGate(client(server, "r"))
        async with gate.admit(session_id="telegram:ユーザー" * 20):  # non-ASCII, > 128 bytes
            s = authority_stats(server.addr)
            assert s.in_flight == 1 and s.subjects[0].subject.startswith("sha256:")
        await gate.aclose()

    asyncio.run(main())


def test_install_puts_a_gateways_pairing_lockout_on_the_authority(start_server: StartServer) -> None:
    from praisonai_bot.gateway.server import WebSocketGateway

    server = start_server()
    a, b = WebSocketGateway(host="127.0.0.1", port=free_port()), WebSocketGateway(host="127.0.0.1", port=free_port())
    gate = install(a, client(server, "gw-a"))
    install(b, client(server, "gw-b"))
    assert a._admission_gate is gate and isinstance(a.pairing_store._lockout, AuthorityAuthLimiter)
    # Wrong codes through gateway A: five failures pass the budget, the sixth starts the lockout.
    for _ in range(6):
        assert not a.pairing_store.verify_and_pair("WRONG123", "chan-1", "telegram")
    # Gateway B refuses even a valid code for that channel type: the lockout is installation-wide.
    code = b.pairing_store.generate_code("telegram")
    assert not b.pairing_store.verify_and_pair(code, "chan-1", "telegram")
    code = b.pairing_store.generate_code("slack")
    assert b.pairing_store.verify_and_pair(code, "chan-2", "slack"), "another channel type is not locked"


def test_patch_praisonai_replaces_the_gate_factory_with_praisonais_meaning_of_the_config(
    start_server: StartServer,
) -> None:
    from praisonai_bot.bots import _admission

    server = start_server("--total", "1")
    original = _admission.build_admission_gate
    undo = patch_praisonai(client(server, "gw"), failure_mode="local")
    try:
        # BotOS builds its gate through the factory at call time, as config-driven starts do.
        bos = BotOS(max_concurrent_runs=3, queue_depth=2)
        assert isinstance(bos._admission_gate, AuthorityGate)
        assert (bos._admission_gate._local_max, bos._admission_gate._local_queue) == (3, 2)
        assert BotOS(reliability="off")._admission_gate is None, "unconfigured: no gate, as PraisonAI does"
        default = BotOS()._admission_gate  # PraisonAI's default preset asks for 8 runs, queue 32
        assert isinstance(default, AuthorityGate) and (default._local_max, default._local_queue) == (8, 32)
        with pytest.raises(ValueError, match="max_concurrent_runs"):
            _admission.build_admission_gate(max_concurrent_runs=-1)
    finally:
        undo.undo()
        undo.undo()  # twice: harmless
    assert _admission.build_admission_gate is original
    assert type(BotOS(max_concurrent_runs=3)._admission_gate) is _admission.AdmissionGate


def test_the_plain_client_never_imports_praisonai() -> None:
    import subprocess
    import sys

    code = "import sys, admission_authority_client as a; a.AdmissionClient; print('praisonai_bot' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_turn_that_ends_in_a_provider_rate_limit_reports_it(start_server: StartServer) -> None:
    server = start_server("--total", "3")
    gate = AuthorityGate(client(server, "r"))

    class RateLimitError(Exception):
        """As litellm and the provider SDKs name it."""

    async def main() -> None:
        ok = gate.admit(session_id="alice")
        await ok.__aenter__()
        await ok.__aexit__(None, None, None)
        limited = gate.admit(session_id="bob")
        await limited.__aenter__()
        await limited.__aexit__(RateLimitError, RateLimitError("429 Too Many Requests"), None)
        s = authority_stats(server.addr)
        assert (s.outcome_ok, s.outcome_rate_limited, s.released) == (1, 1, 2)
        await gate.aclose()

    asyncio.run(main())


# -- drop-ins that behave like what they replace ----------------------------------------------


def test_stats_are_the_authoritys_from_construction_or_the_replaced_gates_without_it(
    start_server: StartServer,
) -> None:
    server = start_server("--total", "6", "--per-subject", "2", "--queue-total", "3")
    bos = BotOS(max_concurrent_runs=8, queue_depth=4)
    install(bos, client(server, "r"))
    # Straight after install, before any turn or background refresh: the authority's figures.
    st = bos.admission_stats
    assert st is not None
    assert (st["max_concurrent_runs"], st["max_concurrent_runs_per_scope"], st["queue_depth"]) == (6, 2, 3)
    undo = patch_praisonai(client(server, "r"))
    try:
        st = BotOS(max_concurrent_runs=8).admission_stats
        assert st is not None and st["max_concurrent_runs"] == 6, "a gate built by the factory too"
    finally:
        undo.undo()
    # No authority to ask: what the replaced PraisonAI gate was configured with, not 0.
    nowhere = AsyncAdmissionClient(f"127.0.0.1:{free_port()}", host_id="gw", timeout=0.2)
    offline = BotOS(max_concurrent_runs=8, queue_depth=4)
    install(offline, nowhere)
    st = offline.admission_stats
    assert st is not None and (st["max_concurrent_runs"], st["queue_depth"]) == (8, 4)


def test_the_patched_factory_keeps_praisonais_disabled_gate(start_server: StartServer) -> None:
    from praisonai_bot.bots import _admission
    from praisonaiagents.gateway import MemoryPressurePolicy

    server = start_server()
    undo = patch_praisonai(client(server, "gw"))
    try:
        # A resource section with no ceiling: PraisonAI builds a gate that is not enabled.
        gate = _admission.build_admission_gate(resource_policy=MemoryPressurePolicy(0, 0))
        assert gate is not None and not gate.enabled and not isinstance(gate, AuthorityGate)
        assert _admission.build_admission_gate() is None
        # A memory-only gate (a ceiling, no concurrency cap) is enabled: the authority's.
        memory_only = _admission.build_admission_gate(resource_policy=MemoryPressurePolicy(900, 1000))
        assert isinstance(memory_only, AuthorityGate) and memory_only.enabled
    finally:
        undo.undo()


def test_a_replicas_own_memory_ceiling_keeps_applying(start_server: StartServer) -> None:
    server = start_server("--total", "4")
    undo = patch_praisonai(client(server, "gw"))
    try:
        roomy = BotOS(max_concurrent_runs=4, max_rss_mb=1024 * 1024)
        assert roomy.admission_stats["max_rss_mb"] == 1024.0 * 1024
        # A ceiling below this process's real resident memory: every turn is shed locally.
        tight = BotOS(max_concurrent_runs=4, max_rss_mb=1)
        gate = tight._admission_gate
        assert isinstance(gate, AuthorityGate) and gate.stats()["max_rss_mb"] == 1.0
    finally:
        undo.undo()

    async def main() -> None:
        with pytest.raises(AuthorityRejected) as refused:
            async with gate.admit(session_id="alice"):
                raise AssertionError("admitted above the replica's memory ceiling")
        assert refused.value.reason == "MEMORY_PRESSURE"
        async with roomy._admission_gate.admit(session_id="alice"):
            assert authority_stats(server.addr).in_flight == 1
        await gate.aclose()
        await roomy._admission_gate.aclose()

    asyncio.run(main())
    s = authority_stats(server.addr)
    assert (s.admitted, s.rejected, gate.stats()["rejected"]) == (1, 0, 1), "the shed turn never reached it"


def test_a_gates_resource_sampler_is_where_praisonai_keeps_it(start_server: StartServer) -> None:
    # PraisonAI's own gate test swaps the sampler of a built gate (`gate._resource_sampler`):
    # a hard memory breach then sheds the turn whatever the concurrency ceiling says.
    from praisonaiagents.gateway import ResourceSample
    from praisonai_bot.bots import _admission

    class Sampler:
        def __init__(self, rss_mb: float) -> None:
            self.rss_mb = rss_mb

        def read(self) -> ResourceSample:
            return ResourceSample(rss_mb=self.rss_mb)

    server = start_server("--total", "8")
    undo = patch_praisonai(client(server, "gw"))
    try:
        gate = _admission.build_admission_gate(
            max_concurrent_runs=8, resource_policy=_admission.build_memory_pressure_policy(550)
        )
    finally:
        undo.undo()
    assert isinstance(gate, AuthorityGate)

    async def main() -> None:
        gate._resource_sampler = Sampler(600)
        with pytest.raises(AuthorityRejected) as refused:
            async with gate.admit(session_id="u"):
                raise AssertionError("admitted above the hard memory ceiling")
        assert refused.value.reason == "MEMORY_PRESSURE"
        gate._resource_sampler = Sampler(100)
        async with gate.admit(session_id="u"):
            pass
        await gate.aclose()

    asyncio.run(main())


def test_a_limiter_enforces_the_numbers_it_was_built_with(start_server: StartServer) -> None:
    from praisonai_bot.gateway import rate_limiter

    server = start_server()
    undo = patch_praisonai(client(server, "gw"))
    try:
        # As WebSocketGateway.start() builds its limiters: through the factory.
        a = rate_limiter.build_auth_rate_limiter(max_attempts=3, window_seconds=60)
        b = rate_limiter.build_auth_rate_limiter(max_attempts=3, window_seconds=60)
        assert isinstance(a, AuthorityAuthLimiter)
        # Three attempts, counted across both replicas, on an endpoint the authority has no
        # bucket of its own for.
        assert [a.allow("custom_login", "10.0.0.1"), b.allow("custom_login", "10.0.0.1"),
                a.allow("custom_login", "10.0.0.1"), b.allow("custom_login", "10.0.0.1")] == [True] * 3 + [False]
        assert a.time_until_allowed("custom_login", "10.0.0.1") > 250
        # A built-in name gets the limiter's numbers too (3, not the built-in approval's 10).
        assert [a.allow("approval_pending", "u") for _ in range(4)] == [True] * 3 + [False]
        a.reset("custom_login", "10.0.0.1")
        assert a.allow("custom_login", "10.0.0.1")
    finally:
        undo.undo()
    with pytest.raises(ValueError, match="max_attempts: must be 1..1000000"):
        AuthorityAuthLimiter(AdmissionClient(server.addr, host_id="gw"), max_attempts=0)
    with pytest.raises(ValueError, match="window_seconds"):
        AuthorityAuthLimiter(AdmissionClient(server.addr, host_id="gw"), window_seconds=30 * 86400)


def test_the_operators_bucket_wins_and_the_limiter_says_so(
    start_server: StartServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("auth:\n  buckets:\n    ws_upgrade: { max_attempts: 2, window: 1m, lockout: 5m }\n")
    server = start_server("--config", str(config))
    limiter = AuthorityAuthLimiter(AdmissionClient(server.addr, host_id="gw"), max_attempts=10)
    assert [limiter.allow("ws_upgrade", "10.0.0.1") for _ in range(3)] == [True, True, False]
    limiter.allow("ws_upgrade", "10.0.0.2")
    said = [r.getMessage() for r in caplog.records if "ws_upgrade" in r.getMessage()]
    assert len(said) == 1 and "configured 2 attempts" in said[0], said


def test_patch_praisonai_puts_every_pairing_lockout_on_the_authority(start_server: StartServer) -> None:
    from praisonai_bot.gateway.pairing import PairingStore
    from praisonai_bot.gateway.rate_limiter import AuthRateLimiter

    server = start_server()
    undo = patch_praisonai(client(server, "gw"))
    try:
        # Two replicas' stores (built as a config- or CLI-driven gateway builds them).
        a = PairingStore(store_dir=tempfile.mkdtemp(), max_failures=3)
        b = PairingStore(store_dir=tempfile.mkdtemp(), max_failures=3)
        assert isinstance(a._lockout, AuthorityAuthLimiter)
        # As PraisonAI's own lockout: three failures pass, the fourth (across both replicas)
        # starts the lockout, which both then see.
        results = [store.verify_and_pair("WRONG123", "chan", "telegram") for store in (a, b, a)]
        assert not any(results)
        assert a._lockout.time_until_allowed("pairing_verify", "telegram") == 0
        assert not b.verify_and_pair("WRONG123", "chan", "telegram")
        assert a._lockout.time_until_allowed("pairing_verify", "telegram") > 0
        assert b._lockout.time_until_allowed("pairing_verify", "telegram") > 0
    finally:
        undo.undo()
    assert type(PairingStore(store_dir=tempfile.mkdtemp())._lockout) is AuthRateLimiter


def test_a_resource_only_gate_reports_no_concurrency_ceiling_as_praisonai_does(
    start_server: StartServer,
) -> None:
    from praisonai_bot.bots import _admission as praison_admission
    from praisonaiagents.gateway import MemoryPressurePolicy

    server = start_server("--total", "1000")
    undo = patch_praisonai(client(server, "gw"))
    try:
        policy = MemoryPressurePolicy(soft_rss_mb=100_000, hard_rss_mb=200_000)
        native = praison_admission.AdmissionGate(None, resource_policy=policy).stats()
        gate = praison_admission.build_admission_gate(0, resource_policy=policy)
        assert isinstance(gate, AuthorityGate)

        async def one_turn() -> None:
            async with gate.admit(session_id="alice"):
                pass
            await gate.refresh_stats()

        asyncio.run(one_turn())
        s = gate.stats()
        assert s["max_concurrent_runs"] == native["max_concurrent_runs"] == 0, s
        assert s["queue_depth"] == native["queue_depth"]
        assert s["installation_max_concurrent_runs"] == 1000
    finally:
        undo.undo()


def test_a_gate_built_in_the_loop_opens_its_channel_before_the_first_turn(
    start_server: StartServer,
) -> None:
    # The first turn does not pay the connection's handshakes (PraisonAI's tests pause 20 ms
    # between building a gate and asserting the first turn is in flight).
    server = start_server()

    async def main() -> None:
        c = client(server, "gw")
        gate = AuthorityGate(c)
        await until("the channel open before any turn", lambda: (
            c._channel is not None
            and c._channel.get_state() == grpc.ChannelConnectivity.READY) or None)
        await gate.aclose()
        await c.close()

    asyncio.run(main())


def test_patching_twice_replaces_the_first_patch_and_undo_restores_praisonai(
    start_server: StartServer,
) -> None:
    from praisonai_bot.bots import _admission as praison_admission
    from praisonai_bot.gateway.pairing import PairingStore
    from praisonai_bot.gateway.rate_limiter import AuthRateLimiter

    originals = (praison_admission.build_admission_gate, PairingStore.__init__)
    server = start_server()
    first = patch_praisonai(client(server, "gw"))
    second = patch_praisonai(client(server, "gw"))
    try:
        # One wrapper, not two: a store built now works and checks the authority.
        store = PairingStore(store_dir=tempfile.mkdtemp(), max_failures=3)
        assert isinstance(store._lockout, AuthorityAuthLimiter)
        assert not store.verify_and_pair("WRONG123", "chan", "telegram")
        first.undo()  # superseded: changes nothing
        assert isinstance(PairingStore(store_dir=tempfile.mkdtemp())._lockout, AuthorityAuthLimiter)
    finally:
        second.undo()
    assert (praison_admission.build_admission_gate, PairingStore.__init__) == originals
    assert type(PairingStore(store_dir=tempfile.mkdtemp())._lockout) is AuthRateLimiter


def test_a_turn_ending_as_asyncio_run_tears_down_gives_its_slot_back_at_once(start_server: StartServer) -> None:
    import subprocess
    import sys

    # A long lease: a slot that is not released stays held for the whole test.
    server = start_server("--total", "2", "--lease-ttl", "60s")
    script = f"""
import asyncio
from admission_authority_client import AsyncAdmissionClient
from admission_authority_client.praisonai import AuthorityGate

async def main(close_first):
    # With a budget check, the turn's exit settles before it releases: two calls to be cut.
    gate = AuthorityGate(AsyncAdmissionClient({server.addr!r}, host_id="gw"), authorize_output_tokens=100)
    body_done = asyncio.Event()
    async def turn():
        async with gate.admit(session_id="alice"):
            body_done.set()  # the body has finished: the gate's exit starts now
    task = asyncio.get_running_loop().create_task(turn())
    await body_done.wait()
    if close_first:
        await gate.aclose()  # waits for the turn's release
    # Returning now: asyncio.run cancels every task still running, the ending turn's too.

asyncio.run(main(False))
asyncio.run(main(True))
"""
    for run in range(3):
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        s = authority_stats(server.addr)
        assert (s.in_flight, s.released) == (0, 2 * (run + 1)), f"run {run}: {s}"


def test_the_praisonai_extra_pins_what_the_tests_run_and_includes_praisonai_code() -> None:
    import tomllib

    from packaging.requirements import Requirement

    here = Path(__file__).resolve().parents[1]
    extra = tomllib.loads((here / "pyproject.toml").read_text())["project"]["optional-dependencies"]["praisonai"]
    wanted = {Requirement(r).name: Requirement(r) for r in extra}
    tested = {}
    for line in (here / "requirements-praisonai.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            tested[name] = version
    assert set(wanted) == set(tested), "the extra installs exactly the packages the tests use"
    for name, req in wanted.items():
        assert req.specifier, f"{name} is unpinned"
        assert req.specifier.contains(tested[name]), f"{name} {tested[name]} (tested) is outside {req}"
        assert any(s.operator == "<" for s in req.specifier), f"{name} has no upper bound"


def test_one_patched_client_serves_gates_in_successive_event_loops(start_server: StartServer) -> None:
    from praisonai_bot.bots import _admission

    # As PraisonAI's own tests and CLIs do: each asyncio.run builds and uses its gate; the
    # client patch_praisonai was given opens a channel on each new loop.
    server = start_server("--total", "1")
    undo = patch_praisonai(client(server, "gw"))
    try:
        for _ in range(3):

            async def turn() -> None:
                gate = _admission.build_admission_gate(max_concurrent_runs=1)
                async with gate.admit(session_id="alice"):
                    assert gate.in_flight == 1
                await gate.aclose()

            asyncio.run(turn())
    finally:
        undo.undo()
    s = authority_stats(server.addr)
    assert (s.admitted, s.released, s.in_flight) == (3, 3, 0)


def test_a_gate_from_the_patched_factory_keeps_praisonais_gate_behaviour(start_server: StartServer) -> None:
    """What PraisonAI's own tests assert of its gate, through the drop-in, with the authority
    configured to the same numbers: the ceiling and a full queue's refusal, shed_oldest evicting
    the oldest waiter, a slot given back when the turn raises."""
    from praisonai_bot.bots import _admission

    async def ceiling(gate: Any) -> None:
        release = asyncio.Event()
        refused: list[str] = []

        async def turn(i: int) -> None:
            try:
                async with gate.admit(session_id=str(i)):
                    await release.wait()
            except AdmissionRejected as r:
                refused.append(r.message)

        tasks = [asyncio.create_task(turn(i)) for i in range(4)]
        await until("two running, one queued, one refused", lambda: (gate.in_flight, gate.queued, len(refused)) == (2, 1, 1) or None)
        release.set()
        await asyncio.gather(*tasks)
        assert (gate.in_flight, gate.stats()["rejected"], refused) == (0, 1, [BUSY])

    async def raises(gate: Any) -> None:
        with pytest.raises(RuntimeError):
            async with gate.admit(session_id="u"):
                raise RuntimeError("the turn failed")
        assert gate.in_flight == 0
        async with gate.admit(session_id="u2"):
            assert gate.in_flight == 1

    server = start_server("--total", "2", "--queue-total", "1")
    undo = patch_praisonai(client(server, "gw"))
    try:
        gate = _admission.build_admission_gate(max_concurrent_runs=2, queue_depth=1, overflow_policy="reject")
        asyncio.run(ceiling(gate))
        asyncio.run(raises(gate))
    finally:
        undo.undo()

    async def shed(gate: Any) -> None:
        release = asyncio.Event()
        shed: list[int] = []

        async def turn(i: int) -> None:
            try:
                async with gate.admit(session_id=str(i)):
                    await release.wait()
            except AdmissionRejected:
                shed.append(i)

        first = asyncio.create_task(turn(0))
        await until("the first turn running", lambda: gate.in_flight == 1 or None)
        oldest = asyncio.create_task(turn(1))
        await until("the oldest waiter queued", lambda: gate.queued == 1 or None)
        newest = asyncio.create_task(turn(2))
        await until("the oldest waiter shed", lambda: shed == [1] or None)
        assert (gate.queued, gate.stats()["shed"]) == (1, 1)
        release.set()
        await asyncio.gather(first, oldest, newest)
        assert gate.in_flight == 0

    server = start_server("--total", "1", "--queue-total", "1", "--overflow-policy", "shed_oldest")
    undo = patch_praisonai(client(server, "gw"))
    try:
        asyncio.run(shed(_admission.build_admission_gate(max_concurrent_runs=1, queue_depth=1,
                                                         overflow_policy="shed_oldest")))
    finally:
        undo.undo()


def test_the_newest_message_of_a_conversation_wins(start_server: StartServer) -> None:
    server = start_server("--total", "4", "--per-subject", "4", "--queue-total", "10")
    agents = Agents()

    async def main() -> None:
        a, b = Replica(agents), Replica(agents)
        gate_a = install(a.bos, client(server, "replica-a"), newest_message_wins=True)
        install(b.bos, client(server, "replica-b"), newest_message_wins=True)
        await a.start()
        await b.start()
        first = a.send("u1", "first")
        await until("the first message to run", lambda: agents.running == 1 or None)
        # Its conversation runs one turn at a time: the second message waits for its key.
        second = a.send("u1", "second")
        await until("the second to wait", lambda: gate_a.queued == 1 or None)
        other = b.send("u2", "elsewhere")
        await until("another conversation to run beside it", lambda: agents.running == 2 or None)
        # A third message, on the other replica, supersedes the waiting one at once.
        third = b.send("u1", "third")
        assert await asyncio.wait_for(second, 10) == SUPERSEDED_MESSAGE
        agents.go.set()
        assert await first == "done:first"
        assert await third == "done:third"
        assert await other == "done:elsewhere"
        s = authority_stats(server.addr)
        assert (s.superseded, s.in_flight, s.queued) == (1, 0, 0)
        assert gate_a.stats()["superseded"] == 1
        await a.stop()
        await b.stop()

    asyncio.run(main())
