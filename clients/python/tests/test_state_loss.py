"""A shared store that loses its state under running replicas: 16 workers through the client
on two authority replicas and one redis-server of the test's own, each run holding its slot
for a while; Redis emptied (FLUSHALL), and separately killed and restarted empty. Sampled every
50 ms from the workers' own view, no cap is ever exceeded counting the runs still running."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from admission_authority_client import AdmissionClient

from .conftest import Server, eventually

StartServer = Callable[..., Server]
TOTAL = 4
WORKERS = 16


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Redis:
    """A redis-server on a loopback port, stopped by PID."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
             "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
        )
        eventually("redis-server to listen", self._ping, deadline=10.0)

    def _ping(self) -> bool | None:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0 or None

    def cli(self, *args: str) -> None:
        subprocess.run(["redis-cli", "-p", str(self.port), *args], check=True,
                       stdout=subprocess.DEVNULL)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)


@pytest.fixture
def redis() -> Iterator[Callable[[int], Redis]]:
    started: list[Redis] = []

    def start(port: int) -> Redis:
        r = Redis(port)
        started.append(r)
        return r

    yield start
    for r in started:
        if r.proc.poll() is None:
            r.kill()


def _scenario(start_server: StartServer, tmp_path: Path, redis: Callable[[int], Redis],
              lose: Callable[[Redis, int], Redis]) -> None:
    port = _free_port()
    store = redis(port)
    config = tmp_path / "replicas.yaml"
    config.write_text(
        f"store:\n  redis: {{ url: \"redis://127.0.0.1:{port}/0\" }}\n"
        f"scheduling: {{ total: {TOTAL}, per_subject: {TOTAL}, lease_ttl: 900ms, "
        "queue: { total: 64 } }\n"
    )
    replicas = [start_server("--config", str(config)) for _ in range(2)]
    inside: dict[int, object] = {}
    lock = threading.Lock()
    errors: list[BaseException] = []
    peak = 0
    done = threading.Event()

    def worker(i: int, runs: int) -> None:
        try:
            with AdmissionClient(replicas[i % 2].addr, host_id="h") as client:
                for n in range(runs):
                    with client.slot(f"s{i % 5}", run_id=f"w{i}-{n}") as slot:
                        with lock:
                            inside[i] = slot
                        time.sleep(0.8)
                        with lock:
                            del inside[i]
        except BaseException as e:  # reported below
            errors.append(e)

    def sampler() -> None:
        nonlocal peak
        while not done.is_set():
            with lock:
                running = sum(1 for s in inside.values() if not getattr(s, "lost"))
            peak = max(peak, running)
            time.sleep(0.05)

    threads = [threading.Thread(target=worker, args=(i, 2)) for i in range(WORKERS)]
    watch = threading.Thread(target=sampler)
    watch.start()
    for t in threads:
        t.start()
    eventually("the caps full and a queue behind them",
               lambda: len(inside) == TOTAL or None, deadline=10.0)
    time.sleep(0.3)
    store = lose(store, port)
    # Newcomers right after the loss, before the holders' next Renew: the empty store would
    # admit them into the slots the holders still use.
    late = [threading.Thread(target=worker, args=(i, 1)) for i in range(WORKERS, WORKERS + 4)]
    for t in late:
        t.start()
    threads += late
    for t in threads:
        t.join(timeout=60)
    done.set()
    watch.join()
    assert not errors, errors
    assert all(not t.is_alive() for t in threads), "every worker finished"
    assert peak <= TOTAL, f"{peak} runs held slots at once against a cap of {TOTAL}"
    with AdmissionClient(replicas[0].addr, host_id="h") as client:
        eventually("no slot held after the last worker", lambda: client.stats().in_flight == 0
                   or None, deadline=2.0)
        s = client.stats()
        assert s.reclaimed >= 1, "holders re-registered"
    losses = [AdmissionClient(r.addr, host_id="h").stats().state_losses for r in replicas]
    assert max(losses) >= 1, losses


def test_no_cap_is_exceeded_when_redis_is_emptied_under_running_replicas(
    start_server: StartServer, tmp_path: Path, redis: Callable[[int], Redis]
) -> None:
    def flush(store: Redis, port: int) -> Redis:
        store.cli("FLUSHALL")
        return store

    _scenario(start_server, tmp_path, redis, flush)


def test_no_cap_is_exceeded_when_redis_restarts_empty_under_running_replicas(
    start_server: StartServer, tmp_path: Path, redis: Callable[[int], Redis]
) -> None:
    def restart(store: Redis, port: int) -> Redis:
        store.kill()
        return redis(port)

    _scenario(start_server, tmp_path, redis, restart)
