"""Every way a call ends releases its slot exactly once, and settles its reservation: not by
the lease running out (``expired`` stays where it was)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from conftest import Fleet, Proxy, eventually
from admission_authority_client.v1 import admission_pb2 as pb


@dataclass
class Counts:
    released: int
    cancelled: int
    expired: int


@pytest.fixture
def before(fleet: Fleet) -> Iterator[Counts]:
    """The host's counters before the test; after it, nothing may be left held."""
    fleet.authority.limits()
    fleet.authority.settled()
    s = fleet.authority.stats()
    counts = Counts(s.released, s.cancelled, s.expired)
    yield counts
    fleet.authority.settled()
    assert fleet.authority.stats().expired == counts.expired, "a slot was left to expire"


def ended(fleet: Fleet, before: Counts, *, released: int = 0, cancelled: int = 0) -> pb.Stats:
    """Wait for the slot to be free, then check how it ended."""
    fleet.authority.settled()
    s = fleet.authority.stats()
    assert (s.released - before.released, s.cancelled - before.cancelled, s.expired - before.expired) == (
        released,
        cancelled,
        0,
    )
    return s


def test_success_releases_and_settles_its_usage(fleet: Fleet, a: Proxy, before: Counts) -> None:
    left = fleet.authority.budget_left()
    r = a.chat("sk-release", "tag=rel-ok", model="budgeted", max_tokens=500)
    assert r.status_code == 200, r.text
    ended(fleet, before, released=1)
    assert left - fleet.authority.budget_left() == 18


def test_the_end_of_a_stream_releases_and_settles_its_usage_chunk(fleet: Fleet, b: Proxy, before: Counts) -> None:
    left = fleet.authority.budget_left()
    # The client does not ask for usage: the proxy does (include_usage), and the drop-in
    # settles the upstream's final usage chunk (11 + 7 tokens).
    r = b.chat("sk-release", "tag=rel-stream delay=0.2", stream=True, model="budgeted")
    assert r.status_code == 200
    assert r.text.count("data: ") >= 6
    ended(fleet, before, released=1)
    assert left - fleet.authority.budget_left() == 18


def test_a_call_and_a_stream_longer_than_the_lease_keep_their_slots(fleet: Fleet, a: Proxy, b: Proxy, before: Counts) -> None:
    # The lease is 2 s: both run 4 s, renewed meanwhile, and end released, not expired.
    replies: list[int] = []
    t = threading.Thread(target=lambda: replies.append(b.chat("sk-release", "tag=rel-long-stream delay=4", stream=True).status_code))
    t.start()
    assert a.chat("sk-release", "tag=rel-long delay=4").status_code == 200
    t.join(30)
    assert replies == [200]
    ended(fleet, before, released=2)


def test_an_llm_error_releases_and_refunds(fleet: Fleet, a: Proxy, before: Counts) -> None:
    left = fleet.authority.budget_left()
    r = a.chat("sk-release", "tag=rel-fail fail", model="budgeted")
    assert r.status_code >= 500, r.text
    assert fleet.upstream.tag("rel-fail").total >= 1
    ended(fleet, before, released=1)
    assert fleet.authority.budget_left() == left  # the provider billed nothing


def test_a_rejection_after_admission_releases(fleet: Fleet, a: Proxy, before: Counts) -> None:
    # Admitted, then LiteLLM refuses the call: no deployment serves this model.
    r = a.chat("sk-release", "tag=rel-nomodel", model="no-such-model")
    assert r.status_code >= 400, r.text
    ended(fleet, before, released=1)


def test_a_client_gone_mid_stream_releases(fleet: Fleet, b: Proxy, before: Counts) -> None:
    with httpx.Client(timeout=30) as c:
        with c.stream(
            "POST",
            f"{b.url}/v1/chat/completions",
            # Five chunks two seconds apart: ten seconds unless the stream is cut.
            json={"model": "fake", "stream": True, "messages": [{"role": "user", "content": "tag=rel-cut delay=10"}]},
            headers={"authorization": "Bearer sk-release"},
        ) as r:
            assert r.status_code == 200
            next(r.iter_lines())  # the first chunk: the stream runs
            assert fleet.authority.stats().in_flight == 1
    # The connection is closed: the proxy ends the stream and the slot is released at once,
    # not when the upstream would have ended it, nor at the lease's end.
    eventually("the slot released", lambda: fleet.authority.stats().in_flight == 0 or None, 3.0)
    ended(fleet, before, released=1)


def test_a_client_gone_while_queued_withdraws_its_ticket(fleet: Fleet, a: Proxy, b: Proxy, before: Counts) -> None:
    fleet.authority.limits(total=1)
    hold = threading.Thread(target=a.chat, args=("sk-release", "tag=rel-hold delay=2"))
    hold.start()
    eventually("the first call running", lambda: fleet.upstream.tag("rel-hold").now == 1 or None)
    body = b'{"model":"fake","messages":[{"role":"user","content":"tag=rel-queued"}]}'
    s = socket.create_connection(("127.0.0.1", b.port))
    s.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer sk-release-2\r\n"
        b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    )
    eventually("the second call queued", lambda: fleet.authority.stats().queued == 1 or None)
    s.close()
    # Withdrawn while the first still runs, well before its lease could lapse.
    eventually("the queued ticket withdrawn", lambda: fleet.authority.stats().queued == 0 or None, 1.5)
    hold.join(30)
    ended(fleet, before, released=1, cancelled=1)
    assert fleet.upstream.tag("rel-queued").total == 0


def test_a_proxy_shutting_down_releases(fleet: Fleet, extras: object, before: Counts) -> None:
    proxy: Proxy = extras.stopped  # type: ignore[attr-defined]
    t = threading.Thread(target=lambda: proxy.chat("sk-release", "tag=rel-term delay=1", timeout=10))
    t.start()
    eventually("the call running", lambda: fleet.upstream.tag("rel-term").now == 1 or None)
    proxy.stop()  # SIGTERM: uvicorn lets the running call finish, and the slot is released
    t.join(30)
    ended(fleet, before, released=1)
