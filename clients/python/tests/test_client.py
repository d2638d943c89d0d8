"""The Python wrapper against a real server process."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import subprocess
import threading
import time
from pathlib import Path
from collections.abc import Awaitable, Callable, Iterator

import pytest

import grpc

from admission_authority_client import (
    AdmissionClient,
    AdmissionError,
    AsyncAdmissionClient,
    Busy,
    ClientClosed,
    OperatorClient,
    QueueFull,
)

from admission_authority_client.v1 import admission_pb2 as pb

from .conftest import Server, eventually

StartServer = Callable[..., Server]


def test_a_slot_is_held_inside_the_block_and_released_after(start_server: StartServer) -> None:
    server = start_server("--total", "2")
    with AdmissionClient(server.addr, host_id="h") as client:
        with client.slot("alice", run_id="r1") as slot:
            assert slot.grant > 0 and slot.ticket_id.startswith("h.")
            assert client.stats().in_flight == 1
        s = client.stats()
        assert (s.in_flight, s.released) == (0, 1)


def test_a_queued_slot_is_admitted_after_another_is_released(start_server: StartServer) -> None:
    server = start_server("--total", "1", "--queue-total", "4")
    client = AdmissionClient(server.addr, host_id="h")
    admitted = threading.Event()
    grants: list[int] = []

    def second() -> None:
        with AdmissionClient(server.addr, host_id="h") as other:
            with other.slot("bob", run_id="waiter") as slot:
                grants.append(slot.grant)
                admitted.set()

    with client.slot("alice", run_id="holder") as first:
        waiter = threading.Thread(target=second)
        waiter.start()
        eventually("bob to queue", lambda: client.stats().queued == 1 or None)
        assert not admitted.is_set()
    waiter.join(timeout=10)
    assert admitted.is_set() and grants[0] > first.grant
    assert client.stats().in_flight == 0
    client.close()


def test_an_exception_inside_the_block_still_releases(start_server: StartServer) -> None:
    server = start_server("--total", "1")
    with AdmissionClient(server.addr, host_id="h") as client:
        with pytest.raises(RuntimeError, match="tool failed"):
            with client.slot("alice"):
                raise RuntimeError("tool failed")
        s = client.stats()
        assert (s.in_flight, s.released) == (0, 1)
        with client.slot("alice"):
            pass  # the slot is free again


def test_refusals_are_typed_with_their_retry_delay(start_server: StartServer) -> None:
    server = start_server("--total", "1", "--queue-total", "1")
    with AdmissionClient(server.addr, host_id="h") as client:
        with client.slot("alice"):
            with pytest.raises(Busy) as busy:
                with client.slot("bob", mode="try"):
                    pass
            assert (busy.value.reason, busy.value.retry_after) == ("BUSY", 1.0)
            threading.Thread(
                target=lambda: _hold_queued(server.addr), daemon=True
            ).start()
            eventually("a waiter to queue", lambda: client.stats().queued == 1 or None)
            with pytest.raises(QueueFull) as full:
                with client.slot("carol"):
                    pass
            assert (full.value.reason, full.value.retry_after) == ("QUEUE_FULL", 2.0)


def _hold_queued(addr: str) -> None:
    """Wait in the queue until admitted, then leave at once."""
    with AdmissionClient(addr, host_id="h") as c, c.slot("dave", wait_timeout=10):
        pass


def test_cancelling_a_waiting_acquire_withdraws_its_ticket(start_server: StartServer) -> None:
    server = start_server("--total", "1", "--queue-total", "4")

    async def scenario() -> None:
        async with AsyncAdmissionClient(server.addr, host_id="h") as client:
            async with client.slot("alice") as held:
                entered = asyncio.Event()

                async def wait_for_slot() -> None:
                    async with client.slot("bob"):
                        entered.set()

                task = asyncio.create_task(wait_for_slot())
                await _until(lambda: _queued(client, 1))
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                assert not entered.is_set()
                await _until(lambda: _queued(client, 0))
                s = await client.stats()
                assert (s.in_flight, s.cancelled) == (1, 1), "withdrawn, not admitted"
                assert held.grant > 0

    asyncio.run(scenario())


async def _queued(client: AsyncAdmissionClient, n: int) -> bool:
    return (await client.stats()).queued == n


async def _until(check: Callable[[], Awaitable[bool]], deadline: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    while not await check():
        if loop.time() > end:
            raise AssertionError("timed out")
        await asyncio.sleep(0.02)


def test_async_slot_renews_past_its_lease(start_server: StartServer) -> None:
    server = start_server("--total", "1", "--lease-ttl", "300ms")

    async def scenario() -> None:
        async with AsyncAdmissionClient(server.addr, host_id="h") as client:
            async with client.slot("alice") as slot:
                await asyncio.sleep(1.0)  # three leases: only renewals keep it
                assert not slot.lost
                assert (await client.stats()).in_flight == 1
            assert (await client.stats()).expired == 0

    asyncio.run(scenario())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_slots_and_waits_carry_on_through_a_killed_and_restarted_authority(
    start_server: StartServer, tmp_path: Path
) -> None:
    # An authority on a data dir, SIGKILLed and started again on the same address: the holder
    # keeps its slot by renewing (the restart gives it one lease), the waiter's Wait stream is
    # reopened and keeps its place, and nobody is told the slot is lost.
    addr = f"127.0.0.1:{_free_port()}"
    flags = ("--data-dir", str(tmp_path / "data"), "--total", "1", "--queue-total", "4",
             "--lease-ttl", "2s")
    first = start_server(*flags, listen=addr)
    client = AdmissionClient(addr, host_id="h")
    admitted = threading.Event()

    def waiter() -> None:
        with AdmissionClient(addr, host_id="h") as other:
            with other.slot("bob", run_id="waiter"):
                admitted.set()

    with client.slot("alice", run_id="holder") as slot:
        t = threading.Thread(target=waiter)
        t.start()
        eventually("bob to queue", lambda: client.stats().queued == 1 or None)
        first.kill()
        start_server(*flags, listen=addr)
        restarted = time.monotonic()
        # Past the lease the restart gave: only the holder's renewals keep its slot.
        while time.monotonic() - restarted < 3.0:
            s = client.stats()
            assert (s.in_flight, s.queued, s.expired) == (1, 1, 0), s
            assert not slot.lost and not admitted.is_set()
            time.sleep(0.1)
    t.join(timeout=10)
    assert admitted.is_set(), "the waiter was admitted on its reopened Wait stream"
    s = client.stats()
    assert (s.in_flight, s.expired, s.released) == (0, 0, 2), s
    client.close()


def test_holders_re_register_after_an_authority_in_memory_restarts(
    start_server: StartServer,
) -> None:
    # Without a data dir a restart forgets every ticket. The holders' next Renew finds theirs
    # gone and re-registers it (Reclaim): within a renew interval both runs count again, the
    # slots are not marked lost, and a newcomer waits for real capacity.
    addr = f"127.0.0.1:{_free_port()}"
    flags = ("--total", "2", "--lease-ttl", "600ms")
    first = start_server(*flags, listen=addr)
    client = AdmissionClient(addr, host_id="h")
    with client.slot("alice", run_id="r1") as a, client.slot("bob", run_id="r2") as b:
        first.kill()
        start_server(*flags, listen=addr)
        eventually("both holders counted again",
                   lambda: client.stats().in_flight == 2 or None, deadline=3.0)
        assert client.stats().reclaimed == 2
        with pytest.raises(Busy):
            with client.slot("carol", run_id="newcomer", mode="try"):
                pass
        time.sleep(1.0)  # past the lease: renewals keep both
        assert not a.lost and not b.lost and (a.reclaims, b.reclaims) == (1, 1)
        assert client.stats().in_flight == 2
    s = client.stats()
    assert (s.in_flight, s.released, s.expired) == (0, 2, 0), s
    client.close()


_FROZEN_GATEWAY = """
import sys, time
from admission_authority_client import AdmissionClient
with AdmissionClient(sys.argv[1], host_id="h") as client:
    with client.slot("alice", run_id="frozen") as slot:
        print("holding", flush=True)
        sys.stdin.readline()
        print("lost" if slot.lost else f"held reclaims={slot.reclaims}", flush=True)
"""


def test_a_gateway_frozen_past_its_lease_is_counted_again_when_it_resumes(
    start_server: StartServer,
) -> None:
    # A gateway SIGSTOPped longer than its lease: the authority expires its ticket and admits a
    # newcomer into the slot. Resumed, its renewal re-registers the ticket: its run, still
    # running, counts again (above the cap), and the next newcomer waits.
    server = start_server("--total", "1", "--queue-total", "4", "--lease-ttl", "500ms")
    gateway = subprocess.Popen(
        [sys.executable, "-c", _FROZEN_GATEWAY, server.addr],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert gateway.stdout is not None and gateway.stdin is not None
        assert gateway.stdout.readline().strip() == "holding"
        os.kill(gateway.pid, signal.SIGSTOP)
        with AdmissionClient(server.addr, host_id="h") as client:
            def newcomer_admitted() -> bool | None:
                try:
                    with client.slot("bob", run_id="newcomer", mode="try"):
                        return True
                except Busy:
                    return None
            # Holds the slot for a moment only; what matters is that it got in.
            eventually("the lapsed slot given to a newcomer", newcomer_admitted, deadline=5.0)
            with client.slot("bob", run_id="second") as second:
                os.kill(gateway.pid, signal.SIGCONT)
                eventually("the resumed gateway counted again",
                           lambda: client.stats().in_flight == 2 or None, deadline=3.0)
                assert client.stats().reclaimed == 1
                assert not second.lost
            gateway.stdin.write("\n")
            gateway.stdin.flush()
            assert gateway.stdout.readline().strip() == "held reclaims=1"
            assert gateway.wait(timeout=10) == 0
            assert client.stats().in_flight == 0
    finally:
        if gateway.poll() is None:
            os.kill(gateway.pid, signal.SIGCONT)
            gateway.kill()
            gateway.wait()


def test_authorize_and_settle_round_trip(start_server: StartServer, tmp_path: Path) -> None:
    config = tmp_path / "budgets.yaml"
    config.write_text("resources:\n  default: { max_tokens: 1000 }\n")
    server = start_server("--config", str(config))
    with AdmissionClient(server.addr, host_id="h") as client:
        a = client.authorize("run-1", 1, "alice", requested_output_tokens=600,
                             estimated_input_tokens=100)
        assert a.allowed and a.granted_output_tokens == 600 and a.remaining_tokens == 300
        assert a.remaining_cost_usd is None
        assert client.settle("run-1", 1, input_tokens=100, output_tokens=500) is False
        assert client.settle("run-1", 1, input_tokens=100, output_tokens=500) is True
        b = client.authorize("run-1", 2, "alice", requested_output_tokens=1000)
        assert (b.decision, b.granted_output_tokens) == ("allow", 400)
        client.settle("run-1", 2, input_tokens=0, output_tokens=400)
        c = client.authorize("run-1", 3, "alice", requested_output_tokens=10)
        assert (c.decision, c.reason) == ("deny", "RESOURCE_LIMIT")


def test_auth_attempts_round_trip(start_server: StartServer) -> None:
    server = start_server()
    with AdmissionClient(server.addr, host_id="h") as client:
        answers = [client.check_auth_attempt("magic_link", "mallory") for _ in range(6)]
        assert [a.allowed for a in answers] == [True] * 5 + [False]
        assert answers[-1].locked and answers[-1].retry_after_ms == 300_000
        peek = client.check_auth_attempt("magic_link", "mallory", peek=True)
        assert peek.locked and not peek.allowed
        assert client.reset_auth_attempts("magic_link", "mallory") is True
        assert client.check_auth_attempt("magic_link", "mallory").remaining == 4

    async def scenario() -> None:
        async with AsyncAdmissionClient(server.addr, host_id="h") as client:
            a = await client.check_auth_attempt("approval", "eve")
            assert (a.allowed, a.remaining) == (True, 9)
            p = await client.check_auth_attempt("approval", "eve", peek=True)
            assert (p.allowed, p.remaining) == (True, 9), "a peek counts nothing"

    asyncio.run(scenario())


def test_a_token_is_sent_with_every_call(start_server: StartServer, tmp_path: Path) -> None:
    import hashlib

    digest = hashlib.sha256(b"py-gw-token").hexdigest()
    config = tmp_path / "credentials.yaml"
    config.write_text(
        "credentials:\n"
        f"  - {{ name: gw, role: gateway, host_ids: [h], token_sha256: \"{digest}\" }}\n"
        "scheduling: { total: 1, queue: { total: 2 } }\n"
    )
    server = start_server("--config", str(config))
    with AdmissionClient(server.addr, host_id="h", token="py-gw-token") as client:
        with client.slot("alice"):
            assert client.stats().in_flight == 1
        assert client.check_auth_attempt("approval", "x").allowed
    with AdmissionClient(server.addr, host_id="h", token="wrong") as intruder:
        with pytest.raises(AdmissionError) as refused:
            with intruder.slot("mallory"):
                pass
        assert refused.value.code == grpc.StatusCode.UNAUTHENTICATED

    async def scenario() -> None:
        async with AsyncAdmissionClient(server.addr, host_id="h", token="py-gw-token") as c:
            async with c.slot("bob"):
                assert (await c.stats()).in_flight == 1

    asyncio.run(scenario())


@pytest.fixture
def redis_server() -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A redis-server of this test's own on a free loopback port, stopped (by PID) after it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )

    def up() -> bool | None:
        with socket.socket() as c:
            return True if c.connect_ex(("127.0.0.1", port)) == 0 else None

    eventually("redis-server to listen", up)
    yield proc, port
    os.kill(proc.pid, signal.SIGCONT)
    proc.kill()
    proc.wait()


def test_a_submit_during_a_store_stall_is_retried_and_takes_one_slot(
    start_server: StartServer, redis_server: tuple[subprocess.Popen[bytes], int]
) -> None:
    proc, port = redis_server
    server = start_server("--redis-url", f"redis://127.0.0.1:{port}/0", "--total", "4")
    client = AdmissionClient(server.addr, host_id="h", timeout=15.0)
    with client.slot("alice", run_id="warm-up"):
        pass
    # Redis stops answering; the Submit's first tries fail (OUTCOME_UNKNOWN or
    # STORE_UNAVAILABLE) and are repeated with the same run_id until Redis is back.
    os.kill(proc.pid, signal.SIGSTOP)
    threading.Timer(2.0, os.kill, (proc.pid, signal.SIGCONT)).start()
    with client.slot("alice", run_id="during-stall") as slot:
        assert slot.grant > 0
        s = client.stats()
        assert s.in_flight == 1, "one ticket for the run, however many tries"
    s = client.stats()
    assert (s.in_flight, s.admitted, s.released) == (0, 2, 2)


def test_a_submit_that_gives_up_releases_its_run(
    start_server: StartServer, redis_server: tuple[subprocess.Popen[bytes], int]
) -> None:
    proc, port = redis_server
    server = start_server("--redis-url", f"redis://127.0.0.1:{port}/0", "--total", "4")
    client = AdmissionClient(server.addr, host_id="h", timeout=1.5)
    with client.slot("alice", run_id="warm-up"):
        pass
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        with pytest.raises(AdmissionError) as failed:
            with client.slot("alice", run_id="gave-up"):
                pass
        assert failed.value.retryable
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    # Redis runs the stalled Submit when it resumes; the client, which gave up on it, keeps
    # releasing the run in the background, so its slot comes back at once, not a lease later.
    assert eventually(
        "the given-up run's slot to be free", lambda: True if client.stats().in_flight == 0 else None
    )
    assert client.release_run("gave-up") in ("RELEASED", "CANCELLED", "EXPIRED")


def test_two_replicas_under_load_free_every_finished_slot_soon_after_a_store_stall(
    start_server: StartServer, redis_server: tuple[subprocess.Popen[bytes], int]
) -> None:
    """16 workers on two authority replicas sharing one Redis run TRY slots back to back while
    Redis is SIGSTOPped for 3 s: once it resumes and every worker has finished, no slot is held
    (the clients retried with their run ids, or released by run what they gave up on)."""
    proc, port = redis_server
    url = f"redis://127.0.0.1:{port}/0"
    replicas = [start_server("--redis-url", url, "--total", "64") for _ in range(2)]
    clients = [AdmissionClient(r.addr, host_id="h", timeout=10.0) for r in replicas]
    stop = threading.Event()
    done = {"cycles": 0, "failed": 0}
    lock = threading.Lock()

    def work(n: int) -> None:
        client = clients[n % 2]
        i = 0
        while not stop.is_set():
            i += 1
            try:
                with client.slot(f"s{n}", run_id=f"w{n}-{i}", mode="try"):
                    pass
                with lock:
                    done["cycles"] += 1
            except AdmissionError:
                with lock:
                    done["failed"] += 1

    workers = [threading.Thread(target=work, args=(n,)) for n in range(16)]
    for w in workers:
        w.start()
    try:
        eventually("load running", lambda: True if done["cycles"] > 100 else None)
        os.kill(proc.pid, signal.SIGSTOP)
        time.sleep(3.0)  # the stall itself: its length is the scenario, not a wait for a state
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    eventually("load running again", lambda: True if done["cycles"] > 200 else None, deadline=15.0)
    stop.set()
    for w in workers:
        w.join(timeout=30)
    # Within 2 s of the last worker finishing, not a lease (30 s) later.
    assert eventually(
        "every finished slot free", lambda: True if clients[0].stats().in_flight == 0 else None,
        deadline=2.0,
    )
    assert done["failed"] < done["cycles"]


def test_an_operator_raises_a_cap_while_a_slot_waits_and_resets_it(start_server: StartServer) -> None:
    server = start_server("--total", "1", "--queue-total", "4")
    gw = AdmissionClient(server.addr, host_id="gw-1")
    op = OperatorClient(server.addr)
    with gw.slot("alice"):
        admitted = threading.Event()

        def second() -> None:
            with gw.slot("bob", wait_timeout=10):
                admitted.set()

        t = threading.Thread(target=second)
        t.start()
        eventually("bob queued", lambda: gw.stats().queued == 1 or None)
        before = op.get_limits("gw-1")
        assert before.source == pb.LIMITS_SOURCE_FILE and before.limits.total == 1
        after = op.update_limits("gw-1", total=2, queue_hard_total=8)
        assert after.source == pb.LIMITS_SOURCE_OPERATOR
        assert (after.limits.total, after.limits.queue.total, after.limits.queue.hard_total) == (2, 4, 8)
        assert after.revision == before.revision + 1
        assert admitted.wait(10), "the raised cap admitted bob at once"
        t.join(10)
        with pytest.raises(AdmissionError) as bad:
            op.update_limits("gw-1", total=0)
        assert bad.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "limits.total" in bad.value.message
        with pytest.raises(TypeError):
            op.update_limits("gw-1", total=None)
        with pytest.raises(AdmissionError) as stale:
            op.reset_limits("gw-1", expected_revision=before.revision)
        assert stale.value.code == grpc.StatusCode.FAILED_PRECONDITION
    reset = op.reset_limits("gw-1")
    assert (reset.source, reset.limits.total) == (pb.LIMITS_SOURCE_FILE, 1)
    op.close()
    gw.close()


def test_a_priority_slot_goes_first_and_reports_its_place_while_it_waits(
    start_server: StartServer,
) -> None:
    server = start_server("--total", "1", "--queue-total", "4")
    gw = AdmissionClient(server.addr, host_id="h")
    order: list[str] = []
    seen: list[tuple[int, int, str]] = []
    two_args: list[tuple[int, int]] = []

    def run(name: str, priority: int, report: bool) -> None:
        with AdmissionClient(server.addr, host_id="h") as c:
            # A callback of three arguments also hears what holds the ticket; one of two, as
            # before, does not.
            on_queued: Callable[..., None] = (
                (lambda p, eta, by: seen.append((p, eta, by))) if report
                else (lambda p, eta: two_args.append((p, eta)))
            )
            with c.slot(name, priority=priority, wait_timeout=10, on_queued=on_queued):
                order.append(name)

    with gw.slot("holder"):
        # A measured hold, so that waiters get an estimate.
        pass
    with gw.slot("holder"):
        low = threading.Thread(target=run, args=("batch", 5, True))
        low.start()
        eventually("batch queued", lambda: gw.stats().queued == 1 or None)
        high = threading.Thread(target=run, args=("interactive", 1, False))
        high.start()
        eventually("both queued", lambda: gw.stats().queued == 2 or None)
        eventually("batch told it moved back", lambda: any(p == 1 for p, _, _ in seen) or None)
    low.join(10)
    high.join(10)
    assert order == ["interactive", "batch"]
    assert seen[0][0] == 0 and seen[0][1] > 0 and seen[0][2] == "TOTAL", seen
    # Moved back behind interactive while the host is full: what holds it is still the full
    # host (TURN is only for a free slot that others take first).
    assert (1, "TOTAL") in [(p, by) for p, _, by in seen], "behind interactive, the host full"
    assert two_args and two_args[0][0] == 0, two_args
    gw.close()


def test_an_operator_turns_on_shadow_mode_and_weights(start_server: StartServer) -> None:
    server = start_server("--total", "1")
    gw = AdmissionClient(server.addr, host_id="gw-1")
    op = OperatorClient(server.addr)
    with pytest.raises(TypeError):
        op.update_limits("gw-1", weights=3)
    after = op.update_limits("gw-1", mode="shadow", weights={"alice": 4}, priority_aging_ms=60_000)
    assert (after.limits.mode, dict(after.limits.weights), after.limits.priority_aging_ms) == (
        "shadow",
        {"alice": 4},
        60_000,
    )
    with gw.slot("alice") as first, gw.slot("bob") as second:
        assert (first.shadow_reason, second.shadow_reason) == ("", "BUSY")
        s = gw.stats()
        assert (s.in_flight, s.shadow_busy, s.mode) == (2, 1, "shadow")
    with pytest.raises(AdmissionError) as bad:
        op.update_limits("gw-1", weights={"alice": 1001})
    assert "limits.weights.alice" in bad.value.message
    op.close()
    gw.close()


class _ProviderError(Exception):
    """An SDK error as openai's and anthropic's carry it."""

    def __init__(self, status_code: int) -> None:
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code


class _Response:
    status_code = 503


class _HttpxStatusError(Exception):
    response = _Response()


class APITimeoutError(Exception):
    pass


def test_provider_errors_map_to_outcomes() -> None:
    from admission_authority_client import outcome_of

    assert outcome_of(_ProviderError(429)) == "rate_limited"
    assert outcome_of(_ProviderError(500)) == "overloaded"
    assert outcome_of(_ProviderError(400)) == "failed"
    assert outcome_of(_HttpxStatusError()) == "overloaded"
    assert outcome_of(APITimeoutError()) == "overloaded"
    assert outcome_of(TimeoutError()) == "overloaded"
    assert outcome_of(ValueError("bad json")) == "failed"
    wrapped = RuntimeError("turn failed")
    wrapped.__cause__ = _ProviderError(429)
    assert outcome_of(wrapped) == "rate_limited"


def test_a_slot_reports_its_outcome_and_a_429_lowers_an_adaptive_cap(
    start_server: StartServer, tmp_path: Path
) -> None:
    config = tmp_path / "adaptive.yaml"
    config.write_text(
        "scheduling:\n  total: 10\n  per_subject: 10\n"
        "  accounts:\n    acct: { adaptive: { min: 1, max: 4, cooldown: 0s } }\n"
    )
    server = start_server("--config", str(config))
    with AdmissionClient(server.addr, host_id="h") as client:
        with pytest.raises(_ProviderError):
            with client.slot("alice", account_id="acct"):
                raise _ProviderError(429)
        with client.slot("alice", account_id="acct") as slot:
            slot.latency_ms = 250
        s = client.stats()
        assert (s.outcome_rate_limited, s.outcome_ok, s.latency_count) == (1, 1, 2)
        row = next(a for a in s.accounts if a.account_id == "acct")
        assert (row.cap, row.adaptive) == (2, True)


def test_a_closed_client_fails_every_call_at_once_and_never_reopens(start_server: StartServer) -> None:
    # A ticket stays admitted on purpose (nothing can release it once closed): a short drain.
    server = start_server("--total", "2", "--drain-grace", "100ms")
    observer = AdmissionClient(server.addr, host_id="h")
    client = AdmissionClient(server.addr, host_id="h")
    with client.slot("alice") as slot:
        client.close()
        for call in (client.stats, lambda: client.release_run("x"),
                     lambda: client.check_auth_attempt("approval", "carol")):
            with pytest.raises(ClientClosed, match="is closed") as e:
                call()
            assert e.value.code == grpc.StatusCode.CANCELLED and not e.value.retryable
        with pytest.raises(ClientClosed):
            with client.slot("bob"):
                pass
    # The block's Release went to the closed client: nothing reopened a connection to send it,
    # so the ticket is still admitted (its lease frees it), and the slot was not lost by it.
    s = observer.stats()
    assert (s.in_flight, s.released) == (1, 0)
    assert slot.ticket_id
    client.close()  # twice is harmless
    observer.close()

    async def main() -> None:
        aclient = AsyncAdmissionClient(server.addr, host_id="h")
        async with aclient.slot("dave"):
            await aclient.close()
            with pytest.raises(ClientClosed):
                await aclient.stats()
            with pytest.raises(ClientClosed):
                await aclient.release_run("y")
        aobserver = AsyncAdmissionClient(server.addr, host_id="h")
        s = await aobserver.stats()
        assert (s.in_flight, s.released) == (2, 0)
        await aobserver.close()

    asyncio.run(main())


class _ServerDeadline(grpc.RpcError):
    """A failed call as grpc raises it: tonic's answer to a grpc-timeout that passed there."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple[()]:
        return ()


def test_a_deadline_that_ran_out_on_the_server_is_deadline_exceeded() -> None:
    from admission_authority_client.errors import translate

    e = translate(_ServerDeadline(grpc.StatusCode.CANCELLED, "Timeout expired"))
    assert e.code == grpc.StatusCode.DEADLINE_EXCEEDED and e.retryable and e.may_have_applied
    other = translate(_ServerDeadline(grpc.StatusCode.CANCELLED, "gone"))
    assert other.code == grpc.StatusCode.CANCELLED and not other.retryable
