"""Limits set in LiteLLM (on keys and teams) hold across both proxies, and tokens are reserved
before a call across both. LiteLLM alone counts each of these per proxy: two proxies let twice
the limit through."""

from __future__ import annotations

import hashlib
import threading
import time

from conftest import HOST, REPO, Extras, Fleet, Proxy, burst, eventually


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
    def left(want: int) -> None:
        eventually(f"{want} tokens left", lambda: fleet.authority.tpm_left("sk-tpm-40", 40) == want or None)

    # tpm_limit 40 and 18 tokens a call, max_tokens 10: each call's estimate (3 + 10) is
    # charged before it and corrected to its 18 after it: 22 left, then 4.
    assert a.chat("sk-tpm-40", "tag=lim-tpm", max_tokens=10).status_code == 200
    left(22)
    assert b.chat("sk-tpm-40", "tag=lim-tpm", max_tokens=10).status_code == 200
    left(4)
    # The third's estimate (13) does not fit in 4: refused, and it takes nothing from the
    # window, so a call estimated at 4 (3 for its text, max_tokens 1) still fits.
    refused = a.chat("sk-tpm-40", "tag=lim-tpm", max_tokens=10)
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
    left(4)
    assert b.chat("sk-tpm-40", "usage=1+3", max_tokens=1).status_code == 200
    left(0)


def test_a_burst_never_passes_a_keys_tpm_limit(fleet: Fleet, a: Proxy, b: Proxy) -> None:
    fleet.authority.limits()
    fresh_minute()
    # tpm_limit 1000; ten calls at once through both proxies, each spending 300 tokens
    # (max_tokens 250). Each call's estimate, its input (from the text) plus 250, is charged
    # before it: three fit, the rest are refused and leave nothing in the window. LiteLLM
    # alone looks at the window before a call and counts after it, so calls that start
    # together all find it empty (six of ten succeeded with two proxies).
    text = "tag=tpm-burst delay=1 usage=50+250"
    estimate = -(-len(text) // 4) + 250
    results = burst(10, lambda i: (a, b)[i % 2].chat("sk-tpm-1000", text, max_tokens=250))
    codes = sorted(r.status_code for r in results)
    ok = codes.count(200)
    assert set(codes) <= {200, 429}, codes
    assert all(int(r.headers["retry-after"]) >= 1 for r in results if r.status_code == 429)
    assert ok == 1000 // estimate, (codes, estimate)
    assert fleet.upstream.tag("tpm-burst").total == ok
    # Never past the limit by more than the estimates' error (300 used for each estimate).
    assert ok * 300 <= 1000 + ok * (300 - estimate)
    # The window holds what the calls used, not their estimates, nor the refused calls'.
    eventually(
        "the window holds the usage",
        lambda: fleet.authority.tpm_left("sk-tpm-1000", 1000) == 1000 - 300 * ok or None,
    )


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


def test_each_proxy_says_at_start_which_limits_it_holds_fleet_wide(a: Proxy, extras: Extras) -> None:
    # The two lines docs/litellm.md shows: the three steps' proxy (the fleet's), and one
    # without ADMISSION_LIMITS_TOKEN and ADMISSION_RATE_LIMIT_DOMAIN.
    shown = [
        line.strip()
        for line in (REPO / "docs/litellm.md").read_text().splitlines()
        if line.strip().startswith("LiteLLM's limits held fleet-wide")
    ]
    assert len(shown) == 2, shown
    assert shown[0].endswith("Per proxy: none")
    assert shown[0] in a.log_path.read_text()
    assert shown[1] in extras.closed.log_path.read_text()
