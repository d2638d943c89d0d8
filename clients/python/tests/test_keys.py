"""Keys from the Python clients against a real server: the newest message of a conversation
wins (Superseded), a busy key refuses (KeyBusy, naming its holder), a running slot hears that
a newer one superseded it, and the asyncio client the same."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from admission_authority_client import (
    AdmissionClient,
    AsyncAdmissionClient,
    KeyBusy,
    Superseded,
    TicketEnded,
)

from .conftest import Server, eventually

StartServer = Callable[..., Server]


def test_a_newer_message_supersedes_the_waiting_one(start_server: StartServer) -> None:
    server = start_server("--total", "1", "--queue-total", "10")
    with AdmissionClient(server.addr, host_id="h") as client:
        outcome: list[BaseException] = []
        newer_ids: list[str] = []

        def first() -> None:
            with AdmissionClient(server.addr, host_id="h") as c:
                try:
                    with c.slot("alice", run_id="m1", key="conv-1", key_policy="keep_newest"):
                        pass
                except TicketEnded as e:
                    outcome.append(e)

        def second() -> None:
            with AdmissionClient(server.addr, host_id="h") as c:
                with c.slot("alice", run_id="m2", key="conv-1", key_policy="keep_newest") as s:
                    newer_ids.append(s.ticket_id)

        with client.slot("bob", run_id="busy"):
            t1 = threading.Thread(target=first)
            t1.start()
            eventually("the first message to queue", lambda: client.stats().queued == 1 or None)
            t2 = threading.Thread(target=second)
            t2.start()
            t1.join(timeout=10)
            assert len(outcome) == 1 and isinstance(outcome[0], Superseded), outcome
            superseded = outcome[0]
            assert isinstance(superseded, Superseded)
            assert superseded.state == "SUPERSEDED" and superseded.superseded_by.startswith("h.")
        t2.join(timeout=10)
        assert newer_ids == [superseded.superseded_by]
        assert client.stats().superseded == 1


def test_a_busy_key_refuses_naming_its_holder(start_server: StartServer) -> None:
    server = start_server("--total", "4")
    with AdmissionClient(server.addr, host_id="h") as client:
        with client.slot("alice", run_id="r1", key="doc-7", key_policy="reject_new") as held:
            with pytest.raises(KeyBusy) as refused:
                with client.slot("alice", run_id="r2", key="doc-7", key_policy="reject_new"):
                    pass
            assert refused.value.reason == "KEY_BUSY"
            assert refused.value.holder == held.ticket_id
            assert refused.value.retry_after is not None
        # Free once the holder released.
        with client.slot("alice", run_id="r3", key="doc-7", key_policy="reject_new"):
            pass


def test_a_running_slot_hears_it_was_superseded(start_server: StartServer) -> None:
    server = start_server("--total", "2", "--queue-total", "10", "--lease-ttl", "600ms")
    with AdmissionClient(server.addr, host_id="h") as client:
        newer: list[str] = []
        with client.slot("alice", run_id="c1", key="chat", key_policy="serial_keep_newest") as running:
            def submit_newer() -> None:
                with AdmissionClient(server.addr, host_id="h") as c:
                    with c.slot("alice", run_id="c2", key="chat", key_policy="serial_keep_newest",
                                supersede_running=True) as s:
                        newer.append(s.ticket_id)

            t = threading.Thread(target=submit_newer)
            t.start()
            # The next renewal (every 200 ms) says who superseded it; the run stops.
            eventually("the running slot to hear of it", lambda: running.superseded_by or None)
        t.join(timeout=10)
        assert newer == [running.superseded_by]


def test_key_arguments_need_a_key() -> None:
    client = AdmissionClient("127.0.0.1:1", host_id="h")
    with pytest.raises(ValueError):
        with client.slot("alice", key_policy="serial"):
            pass
    client.close()


def test_the_async_client_surfaces_superseded(start_server: StartServer) -> None:
    server = start_server("--total", "1", "--queue-total", "10")

    async def main() -> None:
        async with AsyncAdmissionClient(server.addr, host_id="h") as client:
            async with client.slot("bob", run_id="busy"):
                async def waiter(run: str) -> str:
                    async with client.slot("alice", run_id=run, key="conv", key_policy="keep_newest",
                                           debounce=0.05) as s:
                        return s.ticket_id

                first = asyncio.create_task(waiter("m1"))
                while (await client.stats()).queued == 0:
                    await asyncio.sleep(0.02)
                second = asyncio.create_task(waiter("m2"))
                with pytest.raises(Superseded) as ended:
                    await first
            assert await second == ended.value.superseded_by

    asyncio.run(main())
