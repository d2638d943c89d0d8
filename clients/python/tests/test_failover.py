"""A Redis failover seen from the Python client's side: a primary, a replica whose link to it runs
through a relay the test cuts (so it lags), a second replica straight from the primary, three
real sentinels that promote a replica when the primary is killed, and two authorities that find
the primary through them. Holders keep slots with ``slot()`` (its background renewer renews, and
re-registers with Reclaim when the store no longer knows its ticket); newcomers queue for slots.

- ``replicas_acked: 1``: at no moment do more runs believe they hold a slot than the cap, whatever
  the timing; every holder keeps counting; the newcomers are admitted once holders leave.
- without it, the replica the sentinels promote missed the last admissions: the first lost
  holder's renewal shows it, the loss is counted and the learning window opens."""

from __future__ import annotations

import subprocess
import threading
from functools import partial
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from admission_authority_client import AdmissionClient, Slot
from admission_authority_client.v1 import admission_pb2 as pb

from .conftest import Server, eventually
from .test_client import _free_port
from .test_renewals import Relay

StartServer = Callable[..., Server]
CAP = 4


def _cli(port: int, *args: str) -> str:
    return subprocess.run(
        ["redis-cli", "-p", str(port), *args], capture_output=True, text=True, timeout=10, check=True
    ).stdout.strip()


class Redis:
    def __init__(self, tmp: Path, *extra: str) -> None:
        self.port = _free_port()
        d = tmp / f"redis-{self.port}"
        d.mkdir()
        self.proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
             "--appendonly", "no", "--dir", str(d), *extra],
            stdout=subprocess.DEVNULL,
        )
        eventually("redis-server up", lambda: _ping(self.port), deadline=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def _ping(port: int) -> bool | None:
    return _answer(port, "PING") == "PONG" or None


def _answer(port: int, *args: str) -> str | None:
    """What ``port`` answers, or None while it does not listen yet."""
    try:
        return _cli(port, *args)
    except subprocess.CalledProcessError:
        return None


def _in_sync(port: int) -> bool | None:
    return "master_link_status:up" in _cli(port, "INFO", "replication") or None


class Topology:
    """The primary, a lagging-to-be replica behind ``link``, a direct replica, three sentinels."""

    def __init__(self, tmp: Path) -> None:
        self.started: list[subprocess.Popen[bytes]] = []
        self.redis: list[Redis] = []
        self.link: Relay | None = None
        try:
            self._start(tmp)
        except BaseException:
            # Nothing started is left running when the set-up fails half-way.
            self.stop()
            raise

    def _start(self, tmp: Path) -> None:
        self.primary = Redis(tmp)
        self.redis.append(self.primary)
        self.link = Relay(f"127.0.0.1:{self.primary.port}")
        link_port = self.link.addr.rsplit(":", 1)[1]
        self.lagging = Redis(tmp, "--replicaof", "127.0.0.1", link_port)
        self.redis.append(self.lagging)
        self.direct = Redis(tmp, "--replicaof", "127.0.0.1", str(self.primary.port))
        self.redis.append(self.direct)
        for port in (self.lagging.port, self.direct.port):
            eventually("a replica in sync", partial(_in_sync, port), deadline=20)
        self.sentinels: list[int] = []
        for _ in range(3):
            port = _free_port()
            d = tmp / f"sentinel-{port}"
            d.mkdir()
            conf = d / "sentinel.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {d}\n"
                f"sentinel monitor main 127.0.0.1 {self.primary.port} 2\n"
                "sentinel down-after-milliseconds main 1000\nsentinel failover-timeout main 3000\n"
            )
            self.started.append(subprocess.Popen(["redis-sentinel", str(conf)], stdout=subprocess.DEVNULL))
            self.sentinels.append(port)
        eventually(
            "the sentinels see both replicas",
            lambda: (_answer(self.sentinels[2], "SENTINEL", "replicas", "main") or "").count("name") >= 2 or None,
            deadline=20,
        )

    def primary_port(self) -> int:
        out = (_answer(self.sentinels[0], "SENTINEL", "get-master-addr-by-name", "main") or "").split()
        return int(out[1]) if len(out) == 2 else 0

    def caught_up(self) -> None:
        # A write and WAIT on one connection: both replicas hold everything written before.
        assert _cli(self.primary.port, "EVAL", "redis.call('INCR', 'sync') return 1", "0") == "1"
        assert int(_cli(self.primary.port, "WAIT", "2", "5000")) == 2

    def fail_over(self) -> None:
        self.primary.stop()
        eventually(
            "the sentinels promote a replica",
            lambda: self.primary_port() not in (0, self.primary.port) or None,
            deadline=30,
        )

    def cut_link(self) -> None:
        """Cut the lagging replica's link to the primary, for the rest of the test."""
        assert self.link is not None
        self.link.cut(3600)

    def stop(self) -> None:
        for p in self.started:
            p.kill()
            p.wait(timeout=10)
        for r in self.redis:
            r.stop()
        if self.link is not None:
            self.link.stop()


@pytest.fixture
def topology(tmp_path: Path) -> Iterator[Topology]:
    t = Topology(tmp_path)
    yield t
    t.stop()


def _authorities(start_server: StartServer, tmp: Path, t: Topology, acked: int) -> tuple[str, str]:
    nodes = ", ".join(f'"127.0.0.1:{p}"' for p in t.sentinels)
    config = tmp / f"failover-{acked}.yaml"
    config.write_text(
        f"scheduling: {{ total: {CAP}, per_subject: {CAP}, lease_ttl: 3s, queue: {{ total: 50 }} }}\n"
        "store:\n  redis:\n    url: redis://main/0\n"
        f'    prefix: "py-failover-{acked}:"\n    replicas_acked: {acked}\n    replication_timeout: 500ms\n'
        f"    sentinel: {{ master: main, nodes: [{nodes}] }}\n"
    )
    a, b = start_server("--config", str(config)), start_server("--config", str(config))
    return a.addr, b.addr


class Runs:
    """Runs in slots: each holds until told to leave; ``peak`` is the most that believed they
    held a slot at once (sampled every 10 ms)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.lock = threading.Lock()
        self.held: set[str] = set()
        self.peak = 0
        self.slots: dict[str, Slot] = {}
        self.leave: dict[str, threading.Event] = {}
        self.admitted: dict[str, threading.Event] = {}
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while not self._stop.wait(0.01):
            with self.lock:
                now = sum(1 for r in self.held if not self.slots[r].lost)
                self.peak = max(self.peak, now)

    def start(self, run: str) -> None:
        self.leave[run], self.admitted[run] = threading.Event(), threading.Event()

        def hold() -> None:
            try:
                with AdmissionClient(self.target, host_id="h", timeout=30) as c:
                    with c.slot(f"s-{run}", run_id=run) as slot:
                        with self.lock:
                            self.slots[run] = slot
                            self.held.add(run)
                        self.admitted[run].set()
                        self.leave[run].wait(60)
                        with self.lock:
                            self.held.discard(run)
            except BaseException as e:  # noqa: BLE001 - reported by the test
                self.errors.append(e)
                self.admitted[run].set()

        t = threading.Thread(target=hold, daemon=True)
        t.start()
        self.threads.append(t)

    def stop(self) -> None:
        for e in self.leave.values():
            e.set()
        for t in self.threads:
            t.join(30)
        self._stop.set()


def test_with_replicas_acked_no_more_runs_hold_than_the_cap(
    start_server: StartServer, tmp_path: Path, topology: Topology
) -> None:
    a, b = _authorities(start_server, tmp_path, topology, 1)
    runs = Runs(f"ipv4:{a},{b}")
    try:
        runs.start("h1")
        assert runs.admitted["h1"].wait(20)
        topology.cut_link()
        for r in ("h2", "h3", "h4"):
            runs.start(r)
            assert runs.admitted[r].wait(20)
        topology.fail_over()
        # Newcomers at once, whatever the timing of the holders' renewals.
        for r in ("n1", "n2"):
            runs.start(r)
        time.sleep(4)  # past a lease: every holder renewed (or re-registered) meanwhile
        assert not runs.errors, runs.errors
        assert all(not runs.slots[r].lost for r in ("h1", "h2", "h3", "h4"))
        assert not runs.admitted["n1"].is_set() and not runs.admitted["n2"].is_set()
        runs.leave["h1"].set()
        runs.leave["h2"].set()
        assert runs.admitted["n1"].wait(20) and runs.admitted["n2"].wait(20)
        assert not runs.errors, runs.errors
        assert runs.peak <= CAP, runs.peak
        with AdmissionClient(b, host_id="h") as c:
            assert c.stats().state_losses == 0
    finally:
        runs.stop()


def test_without_replicas_acked_the_first_lost_renewal_opens_the_learning_window(
    start_server: StartServer, tmp_path: Path, topology: Topology
) -> None:
    a, b = _authorities(start_server, tmp_path, topology, 0)
    runs = Runs(f"ipv4:{a},{b}")
    try:
        for r in ("h1", "h2"):
            runs.start(r)
            assert runs.admitted[r].wait(20)
        topology.caught_up()
        topology.cut_link()
        # The direct replica sees these; stop it, so the sentinels promote the lagging one.
        topology.direct.stop()
        for r in ("h3", "h4"):
            runs.start(r)
            assert runs.admitted[r].wait(20)
        topology.fail_over()
        with AdmissionClient(b, host_id="h") as c:

            def counted() -> pb.Stats | None:
                s = c.stats()
                return s if s.state_losses == 1 else None

            eventually("the loss counted", counted, deadline=20)
            eventually("every holder counted again", lambda: c.stats().in_flight == CAP or None, deadline=20)
        assert all(not runs.slots[r].lost for r in ("h1", "h2", "h3", "h4"))
        assert [runs.slots[r].reclaims for r in ("h3", "h4")] == [1, 1]
        runs.start("n1")
        assert not runs.admitted["n1"].wait(2), "a newcomer waits while every holder holds"
        runs.leave["h1"].set()
        assert runs.admitted["n1"].wait(20)
        assert not runs.errors, runs.errors
    finally:
        runs.stop()
