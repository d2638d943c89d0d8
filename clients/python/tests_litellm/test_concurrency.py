"""One cap and one fair queue across two LiteLLM proxies."""

from __future__ import annotations

import threading
import time

from conftest import Fleet, Proxy, burst, eventually


def test_a_cap_holds_across_both_proxies_under_a_burst(fleet: Fleet, a: Proxy, b: Proxy) -> None:
    fleet.authority.limits(total=3)
    # 12 calls at once, half through each proxy, four keys: more than the cap on each proxy.
    replies = burst(12, lambda i: (a, b)[i % 2].chat(f"sk-burst-{i % 4}", "tag=burst delay=0.3"))
    assert [r.status_code for r in replies] == [200] * 12, [r.text for r in replies if r.status_code != 200]
    tag = fleet.upstream.tag("burst")
    assert tag.total == 12
    # Never more than the cap at the upstream, and the cap was used (the calls queued, not failed).
    assert tag.max == 3, tag
    eventually("every slot released", lambda: fleet.authority.stats().in_flight == 0 or None)


def test_the_queue_is_fair_across_keys(fleet: Fleet, a: Proxy, b: Proxy) -> None:
    fleet.authority.limits(total=1)
    stats0 = fleet.authority.stats()
    results: dict[str, int] = {}

    def call(proxy: Proxy, key: str, tag: str, name: str) -> None:
        results[name] = proxy.chat(key, f"tag={tag} delay=0.3").status_code

    # One key floods the queue through proxy a; then another key asks through proxy b.
    flood = [
        threading.Thread(target=call, args=(a, "sk-fair-flood", "fair-flood", f"flood{i}")) for i in range(5)
    ]
    for t in flood:
        t.start()
    eventually("the flood queued", lambda: fleet.authority.stats().queued >= 4 or None)
    other = threading.Thread(target=call, args=(b, "sk-fair-other", "fair-other", "other"))
    other.start()
    for t in [*flood, other]:
        t.join(60)
    assert set(results.values()) == {200}, results
    order = [t for t in fleet.upstream.order if t.startswith("fair-")]
    # The other key is served at its turn (round robin over keys), not after the whole flood:
    # at most the call running and the one whose turn came before it go first.
    assert order.index("fair-other") <= 2, order
    assert fleet.authority.stats().admitted - stats0.admitted == 6


def test_reject_mode_answers_429_with_retry_after(fleet: Fleet, reject: Proxy) -> None:
    fleet.authority.limits(total=1)
    hold = threading.Thread(target=reject.chat, args=("sk-reject-hold", "tag=reject-hold delay=1.5"))
    hold.start()
    eventually("the first call admitted", lambda: fleet.upstream.tag("reject-hold").now == 1 or None)
    started = time.monotonic()
    r = reject.chat("sk-reject-other", "tag=reject-other")
    assert r.status_code == 429, r.text
    assert int(r.headers["retry-after"]) >= 1
    assert time.monotonic() - started < 1.0, "reject mode must not queue"
    # A burst of refusals leaks nothing: no ticket, no reservation, no slot left behind.
    replies = burst(8, lambda i: reject.chat(f"sk-reject-{i}", "tag=reject-other"))
    assert {r.status_code for r in replies} == {429}
    hold.join(30)
    assert fleet.upstream.tag("reject-other").total == 0
    fleet.authority.settled()
    assert fleet.authority.stats().released >= 1


def test_the_newest_call_of_a_conversation_wins(fleet: Fleet, a: Proxy, b: Proxy) -> None:
    # ADMISSION_KEY_HEADER=x-conversation-id (serial, keep newest): one call per conversation
    # at a time, the newest waiting; an older waiting call answers 409 at once.
    fleet.authority.limits(total=4)
    stats0 = fleet.authority.stats()
    conv = {"x-conversation-id": "conv-42"}
    replies: dict[str, int] = {}

    def call(proxy: Proxy, name: str, delay: float) -> None:
        replies[name] = proxy.chat("sk-conv", f"tag=conv-{name} delay={delay}", headers=conv).status_code

    first = threading.Thread(target=call, args=(a, "first", 1.0))
    first.start()
    eventually("the first call at the upstream", lambda: fleet.upstream.tag("conv-first").now == 1 or None)
    second = threading.Thread(target=call, args=(a, "second", 0))
    second.start()
    eventually("the second waiting for its conversation", lambda: fleet.authority.stats().queued == 1 or None)
    third = threading.Thread(target=call, args=(b, "third", 0))
    third.start()
    second.join(10)
    assert replies.get("second") == 409, replies
    for t in (first, third):
        t.join(30)
    assert replies == {"first": 200, "second": 409, "third": 200}, replies
    assert fleet.upstream.tag("conv-second").total == 0, "the superseded call never reached the upstream"
    assert fleet.upstream.tag("conv-third").max == 1
    assert fleet.authority.stats().superseded - stats0.superseded == 1
    eventually("every slot released", lambda: fleet.authority.stats().in_flight == 0 or None)
