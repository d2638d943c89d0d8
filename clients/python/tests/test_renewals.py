"""A held slot's renewals ride out an authority that cannot be reached for most of a lease: a
failed Renew is retried at once with backoff, not an interval later, and a channel of several
addresses sends it to another replica. The outage is real: a relay between the client and the
authority that cuts every connection and refuses new ones, or a replica killed (SIGKILL)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from admission_authority_client import AdmissionClient, AsyncAdmissionClient

from .conftest import Server, eventually

StartServer = Callable[..., Server]
#: A lease of 6 s: renewals every 2 s.
LEASE = "6s"
#: The outage: from just after the admission to 4.5 s into the lease. A client that waits a
#: whole interval after a failed Renew tries at 2 s and 4 s (both cut) and next at 6 s, when the
#: lease has run out; one that retries within the interval gets through soon after 4.5 s.
OUTAGE = 4.4


class Relay:
    """A TCP relay on a loopback port to ``upstream``; :meth:`cut` closes every connection
    through it and refuses new ones for a while, as an unreachable authority does."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.rpartition(":")
        self._upstream = (host, int(port))
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.addr = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._down_until = 0.0
        self._stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self, seconds: float) -> None:
        with self._lock:
            self._down_until = time.monotonic() + seconds
            for s in self._open:
                _close(s)
            self._open.clear()

    def stop(self) -> None:
        self._stopped = True
        _close(self._listener)
        self.cut(0)

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if time.monotonic() < self._down_until:
                    _close(client)
                    continue
                try:
                    server = socket.create_connection(self._upstream, timeout=2)
                except OSError:
                    _close(client)
                    continue
                self._open += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        _close(src)
        _close(dst)


def _close(s: socket.socket) -> None:
    # shutdown first: the other side sees the connection end at once.
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()


@pytest.fixture
def relay(start_server: StartServer) -> Iterator[tuple[Server, Relay]]:
    server = start_server("--total", "1", "--per-subject", "1", "--lease-ttl", LEASE)
    r = Relay(server.addr)
    yield server, r
    r.stop()


def _expired(server: Server) -> int:
    with AdmissionClient(server.addr, host_id="renew") as c:
        return c.stats().expired


def test_a_renewal_that_fails_is_retried_within_the_interval(relay: tuple[Server, Relay]) -> None:
    server, r = relay
    with AdmissionClient(r.addr, host_id="renew", timeout=5) as client:
        with client.slot("alice") as slot:
            r.cut(OUTAGE)
            # Held through the outage and past the lease it would have lapsed in.
            time.sleep(OUTAGE + 3.0)
            assert not slot.lost
            assert slot.reclaims == 0, "the lease never lapsed, so nothing was re-registered"
    assert _expired(server) == 0


def test_an_async_renewal_that_fails_is_retried_within_the_interval(relay: tuple[Server, Relay]) -> None:
    server, r = relay

    async def hold() -> None:
        client = AsyncAdmissionClient(r.addr, host_id="renew", timeout=5)
        try:
            async with client.slot("alice") as slot:
                r.cut(OUTAGE)
                await asyncio.sleep(OUTAGE + 3.0)
                assert not slot.lost
                assert slot.reclaims == 0
        finally:
            await client.close()

    asyncio.run(hold())
    assert _expired(server) == 0


def test_a_holder_keeps_its_slot_through_a_replica_frozen_or_killed_under_it(
    start_server: StartServer, tmp_path: Path
) -> None:
    url = os.environ.get("ADMISSION_TEST_REDIS_URL")
    if not url:
        pytest.fail("ADMISSION_TEST_REDIS_URL is unset (scripts/test starts a redis-server)")
    config = tmp_path / "replicas.yaml"
    config.write_text(
        "scheduling: { total: 1, per_subject: 1, lease_ttl: 3s, queue: { total: 4 } }\n"
        f'store:\n  redis: {{ url: "{url}", prefix: "renew-{os.getpid()}:" }}\n'
    )
    a, b = start_server("--config", str(config)), start_server("--config", str(config))
    # Both replicas in one target: the client's calls go to each in turn. One is frozen
    # (SIGSTOP: a Renew sent to it hangs, so each try takes at most half an interval and the
    # next goes to the other replica), then killed.
    with AdmissionClient(f"ipv4:{a.addr},{b.addr}", host_id="renew", timeout=5) as client:
        with client.slot("alice") as slot:
            os.kill(a.proc.pid, signal.SIGSTOP)
            time.sleep(6.5)  # two leases with one replica frozen
            assert not slot.lost
            assert slot.reclaims == 0, "the lease never lapsed, so nothing was re-registered"
            a.kill()
            time.sleep(3.5)  # a lease more with it dead
            assert not slot.lost
            assert slot.reclaims == 0
            with AdmissionClient(b.addr, host_id="renew") as other:
                assert other.stats().in_flight == 1
                assert other.stats().expired == 0
        with AdmissionClient(b.addr, host_id="renew") as other:
            eventually("the slot released through the live replica", lambda: other.stats().in_flight == 0 or None)


def test_a_slot_that_has_been_left_is_never_reclaimed(start_server: Callable[..., Server]) -> None:
    # The background renewer's Renew is in flight (held here until the lease has lapsed, so it
    # answers EXPIRED) when the run leaves its slot. Before, the renewer then re-registered the
    # finished run (Reclaim) and the exit released it again: for those moments a finished run
    # held its slot (and a serial key beside its new holder).
    server = start_server("--total", "2", "--lease-ttl", "300ms")
    with AdmissionClient(server.addr, host_id="h") as client, AdmissionClient(server.addr, host_id="h") as observer:
        renew = client.stub.Renew
        in_flight, left = threading.Event(), threading.Event()

        def held_renew(req: Any, **kw: Any) -> Any:
            in_flight.set()
            left.wait(5)
            eventually("the lease lapsed", lambda: observer.stats().expired == 1 or None)
            return renew(req, **kw)

        client.stub.Renew = held_renew  # type: ignore[assignment]
        with client.slot("alice", run_id="run-1"):
            assert in_flight.wait(5), "the renewer renews"
            left.set()
        s = observer.stats()
        assert (s.reclaimed, s.in_flight) == (0, 0), s
