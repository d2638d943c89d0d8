"""Limits set in LiteLLM (on keys and teams) hold across both proxies, and tokens are reserved
before a call across both. LiteLLM alone counts each of these per proxy: two proxies let twice
the limit through."""

from __future__ import annotations

import hashlib
import threading
import time

from conftest import HOST, Extras, Fleet, Proxy, burst, eventually


def key_subject(key: str) -> str:
    """The subject a key counts against: its hash as LiteLLM keeps it, never the key."""
    return "key:" + hashlib.sha256(key.encode()).hexdigest()[:32]


def fresh_minute() -> None:
    """Start a test of per-minute windows early in a minute, so that it ends in the same one
    (the windows are aligned to the clock, as LiteLLM's and Envoy's are)."""
    left = 60 - time.time() % 60
    if left < 15:
        time.sleep(left + 0.05)


def test_a_keys_max_parallel_requests_holds_across_both_proxies(fleet: Fleet, a: Proxy, b: Proxy) -> None:
    fleet.authority.limits()
    fleet.authority.settled()
    # Two calls through each proxy: within LiteLLM's own count on each (2 per proxy), so
    # without the authority the upstream would see four at once.
    replies = burst(4, lambda i: (a, b)[i % 2].chat("sk-parallel-2", "tag=lim-parallel delay=0.5"))
    assert [r.status_code for r in replies] == [200] * 4, [r.text for r in replies]
    assert fleet.upstream.tag("lim-parallel").max == 2
    # The key's cap is in the host's limits, at most the host's per_subject.
    limits = fleet.authority.operator.get_limits(HOST).limits
    assert limits.subjects[key_subject("sk-parallel-2")] == 2
    assert limits.total == 64


def test_a_keys_cap_never_exceeds_the_hosts_per_subject(fleet: Fleet, a: Proxy) -> None:
    fleet.authority.limits(per_subject=1)
    fleet.authority.settled()
    replies = burst(2, lambda i: a.chat("sk-parallel-2", "tag=lim-ceiling delay=0.5"))
    assert [r.status_code for r in replies] == [200, 200]
    assert fleet.upstream.tag("lim-ceiling").max == 1
    assert fleet.authority.operator.get_limits(HOST).limits.subjects[key_subject("sk-parallel-2")] == 1


def test_a_deployments_max_parallel_requests_holds_across_both_proxies(fleet: Fleet, a: Proxy, b: Proxy) -> None:
    fleet.authority.limits()
    fleet.authority.settled()
    # The model group "capped" has one deployment with max_parallel_requests 1. LiteLLM alone
    # lets one call through each proxy and refuses the rest (429); with the drop-in the group's
    # account has cap 1 fleet-wide, and the other calls queue for it.
    replies = burst(4, lambda i: (a, b)[i % 2].chat(f"sk-capped-{i}", "tag=lim-deployment delay=0.3", model="capped"))
    assert [r.status_code for r in replies] == [200] * 4, [r.text for r in replies]
    assert fleet.upstream.tag("lim-deployment").max == 1
    assert fleet.authority.operator.get_limits(HOST).limits.accounts["model:capped"] == 1


def test_a_deployment_as_the_account_holds_each_deployments_cap(fleet: Fleet, extras: Extras) -> None:
    proxy = extras.by_deployment
    fleet.authority.limits()
    fleet.authority.settled()
    # ADMISSION_ACCOUNT=deployment: the group "pair" has two deployments with
    # max_parallel_requests 1 each. Each call takes a free deployment's slot (or queues for
    # one) and is called on it: both serve at once, neither ever twice at once.
    replies = burst(6, lambda i: proxy.chat(f"sk-pair-{i}", "tag=lim-pair delay=0.4", model="pair"))
    assert [r.status_code for r in replies] == [200] * 6, [r.text for r in replies]
    up = fleet.upstream
    assert up.tag("lim-pair").max == 2, up.tag("lim-pair")
    assert (up.tag("lim-pair@pair-a").max, up.tag("lim-pair@pair-b").max) == (1, 1)
    assert up.tag("lim-pair@pair-a").total + up.tag("lim-pair@pair-b").total == 6
    accounts = fleet.authority.operator.get_limits(HOST).limits.accounts
    assert (accounts["deployment:pair-a"], accounts["deployment:pair-b"]) == (1, 1)
    fleet.authority.settled()


def test_a_keys_rpm_limit_holds_across_both_proxies(fleet: Fleet, a: Proxy, b: Proxy) -> None:
    fleet.authority.limits()
    fresh_minute()
    # rpm_limit 3: four calls, two through each proxy (LiteLLM alone would pass all four).
    codes = [(a, b)[i % 2].chat("sk-rpm-3", "tag=lim-rpm").status_code for i in range(4)]
    assert codes == [200, 200, 200, 429], codes
    assert fleet.upstream.tag("lim-rpm").total == 3


def test_a_teams_rpm_limit_holds_across_its_keys_and_proxies(fleet: Fleet, a: Proxy, b: Proxy) -> None:
    fleet.authority.limits()
    fresh_minute()
    r1 = a.chat("sk-team-rpm-a", "tag=lim-team")
    r2 = b.chat("sk-team-rpm-b", "tag=lim-team")
    r3 = a.chat("sk-team-rpm-b", "tag=lim-team")
    assert (r1.status_code, r2.status_code, r3.status_code) == (200, 200, 429)
    assert int(r3.headers["retry-after"]) >= 1


def test_a_keys_tpm_limit_counts_the_tokens_of_both_proxies(fleet: Fleet, a: Proxy, b: Proxy) -> None:
    fleet.authority.limits()
    fresh_minute()
    # tpm_limit 40 and 18 tokens a call: looked at before each call, counted after it (as
    # LiteLLM counts tokens): 18, 36, 54; the fourth call finds the window over its limit.
    codes = [(a, b)[i % 2].chat("sk-tpm-40", "tag=lim-tpm").status_code for i in range(4)]
    assert codes == [200, 200, 200, 429], codes


def test_tokens_are_reserved_across_both_proxies(fleet: Fleet, a: Proxy, b: Proxy) -> None:
    fleet.authority.limits()
    fleet.authority.settled()
    left = fleet.authority.budget_left()
    first_max = left - 150
    # The first call reserves all but 150 tokens of the allowance and runs; the second, through
    # the other proxy, is granted what is left (its max_tokens lowered), not its 1000.
    hold = threading.Thread(
        target=a.chat, args=("sk-budget", "tag=lim-budget-1 delay=1"), kwargs={"model": "budgeted", "max_tokens": first_max}
    )
    hold.start()
    eventually("the first call running", lambda: fleet.upstream.tag("lim-budget-1").now == 1 or None)
    r = b.chat("sk-budget", "tag=lim-budget-2", model="budgeted", max_tokens=1000)
    assert r.status_code == 200, r.text
    hold.join(30)
    granted = fleet.upstream.tag("lim-budget-2").max_tokens[0]
    assert granted is not None and 0 < granted < 150, granted
    assert fleet.upstream.tag("lim-budget-1").max_tokens == [first_max]
    # Both settled with what they used (18 each): the rest is free again.
    fleet.authority.settled()
    assert left - fleet.authority.budget_left() == 36
