"""An admission heard late must not start a run on a lapsed lease.

A waiter's connection goes through a TCP proxy the test holds (nothing the authority sends
reaches the waiter, as with a frozen replica or a stalled network) or cuts (as a killed
replica would) while the waiter is admitted, and lets through again after most of the lease,
or after all of it. Counted from the gateways' side (each run notes when it starts and ends),
no instant has more runs than the cap, every run runs, and none is re-registered with Reclaim
(Reclaim is for runs that already ran)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable

import grpc

from admission_authority_client import AdmissionClient, AsyncAdmissionClient

from .conftest import Server, eventually

StartServer = Callable[..., Server]

LEASE_MS = 1500


class Proxy:
    """A TCP proxy on a free loopback port. ``hold()`` keeps what the server sends until
    ``restore()`` (the connections stay up); ``cut()`` closes every connection through it and
    refuses new ones until ``restore()``."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.addr = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.open = True
        self.flowing = threading.Event()
        self.flowing.set()
        self.stopped = False
        self.lock = threading.Lock()
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.open:
                client.close()
                continue
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.sockets += [client, server]
            for a, b, held in ((client, server, False), (server, client, True)):
                threading.Thread(target=self._pump, args=(a, b, held), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, held: bool) -> None:
        try:
            while data := src.recv(65536):
                if held:
                    self.flowing.wait()
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        self.open = False
        with self.lock:
            for s in self.sockets:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                    s.close()
                except OSError:
                    pass
            self.sockets.clear()

    def hold(self) -> None:
        self.flowing.clear()

    def restore(self) -> None:
        self.open = True
        self.flowing.set()

    def stop(self) -> None:
        self.stopped = True
        self.cut()
        self.listener.close()


class Runs:
    """What the gateways see: how many runs run at once, at most, and which ran."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.done: list[str] = []

    def run(self, name: str, seconds: float) -> None:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(seconds)
        with self.lock:
            self.running -= 1
            self.done.append(name)


#: Channel options that reconnect promptly once the proxy lets them.
PROMPT = [
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 200),
]


def scenario(
    start_server: StartServer, fault: str, lease_share: float, asynchronous: bool = False
) -> tuple[Runs, int]:
    server = start_server(
        "--total", "1", "--per-subject", "1", "--queue-total", "4",
        "--lease-ttl", f"{LEASE_MS}ms", "--drain-grace", "100ms",
    )
    observer = AdmissionClient(server.addr, host_id="h")
    proxy = Proxy(server.addr)
    late = AdmissionClient(
        proxy.addr, host_id="h", channel=grpc.insecure_channel(proxy.addr, options=PROMPT)
    )
    direct = AdmissionClient(server.addr, host_id="h")
    runs = Runs()
    release_holder = threading.Event()
    errors: list[BaseException] = []

    def guarded(f: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                f()
            except BaseException as e:  # noqa: BLE001 - reported by the test
                errors.append(e)
        return run

    def holder() -> None:
        with direct.slot("holder", run_id="holder"):
            runs.run("holder", 0)
            release_holder.wait(10)

    def waiter() -> None:
        if not asynchronous:
            with late.slot("late", run_id="late-run"):
                runs.run("late", 0.5)
            return

        async def main() -> None:
            channel = grpc.aio.insecure_channel(proxy.addr, options=PROMPT)
            client = AsyncAdmissionClient(proxy.addr, host_id="h", channel=channel)
            async with client.slot("late", run_id="late-run"):
                await asyncio.to_thread(runs.run, "late", 0.5)
            await client.close()

        asyncio.run(main())

    def third() -> None:
        with direct.slot("third", run_id="third"):
            runs.run("third", 2.0)

    threads = [threading.Thread(target=guarded(holder))]
    threads[0].start()
    eventually("the holder admitted", lambda: observer.stats().in_flight == 1 or None)
    threads.append(threading.Thread(target=guarded(waiter)))
    threads[1].start()
    eventually("the late waiter queued", lambda: observer.stats().queued == 1 or None)
    # Its stream is held or cut; then the holder leaves and it is admitted where it cannot
    # hear it.
    proxy.hold() if fault == "hold" else proxy.cut()
    release_holder.set()
    eventually("the late waiter admitted", lambda: observer.stats().admitted >= 2 or None)
    threads.append(threading.Thread(target=guarded(third)))
    threads[2].start()
    # The fault lasts this share of the lease (the scenario itself, not a wait for a result).
    time.sleep(LEASE_MS * lease_share / 1000)
    proxy.restore()
    for t in threads:
        t.join(30)
    reclaimed = observer.stats().reclaimed
    for c in (late, direct, observer):
        c.close()
    proxy.stop()
    assert not errors, errors
    return runs, reclaimed


def test_an_admission_heard_after_most_of_its_lease_starts_no_run_on_a_lapsing_lease(
    start_server: StartServer,
) -> None:
    # Its Wait stream delivers ADMITTED after 80 % of the lease: the run may start only on a
    # lease renewed once it heard it.
    for asynchronous in (False, True):
        runs, reclaimed = scenario(start_server, "hold", 0.8, asynchronous)
        assert sorted(runs.done) == ["holder", "late", "third"]
        assert runs.most == 1, "a run started on a lease that then lapsed under it"
        assert reclaimed == 0


def test_an_admission_whose_lease_lapsed_before_it_was_heard_waits_again_under_its_run_id(
    start_server: StartServer,
) -> None:
    for fault, asynchronous in (("hold", False), ("cut", False), ("hold", True)):
        # Held: ADMITTED arrives after the lease ran out and its renewal answers EXPIRED. Cut:
        # the reopened stream says EXPIRED. Either way the run never started on that lease.
        runs, reclaimed = scenario(start_server, fault, 1.8, asynchronous)
        # The third run took the slot the lapsed admission left; the late one waited again
        # under its run id, and ran.
        assert sorted(runs.done) == ["holder", "late", "third"], fault
        assert runs.done.index("third") < runs.done.index("late"), fault
        assert runs.most == 1, fault
        assert reclaimed == 0, f"{fault}: a run that never started is not re-registered"
