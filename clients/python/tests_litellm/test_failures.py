"""Never open: an unreachable authority is a 503 before the upstream sees anything (unless the
local fallback is configured); a proxy killed mid-call frees its slot within one lease; wrong
settings stop the proxy, naming the variable."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time

import httpx

from conftest import HERE, HOST, REPO, OPERATOR_TOKEN, Authority, Extras, Fleet, burst, eventually

from admission_authority_client.v1 import admission_pb2 as pb


def test_the_authority_down_is_503_and_the_upstream_untouched(fleet: Fleet, extras: Extras) -> None:
    closed, local, doomed = extras.closed, extras.local, extras.doomed
    assert closed.chat("sk-down", "tag=down-before").status_code == 200  # it works while up
    port = doomed.port
    doomed.proc.kill()
    doomed.proc.wait(10)
    try:
        replies = burst(4, lambda i: closed.chat(f"sk-down-{i}", "tag=down-closed", timeout=30))
        assert [r.status_code for r in replies] == [503] * 4, [r.text for r in replies]
        assert all(r.headers.get("retry-after") for r in replies)
        assert fleet.upstream.tag("down-closed").total == 0

        # failure_mode local: the calls go on, at most ADMISSION_LOCAL_MAX_PARALLEL (1) at once.
        replies = burst(3, lambda i: local.chat(f"sk-down-{i}", "tag=down-local delay=0.3", timeout=30))
        assert [r.status_code for r in replies] == [200] * 3, [r.text for r in replies]
        assert fleet.upstream.tag("down-local").max == 1
    finally:
        # Back on the same address: the proxies use it again without a restart.
        extras.doomed = Authority(doomed.proc_dir, port=port)
        fleet.stoppers.append(extras.doomed.stop)
    eventually(
        "the closed proxy admitting again",
        lambda: closed.chat("sk-down", "tag=down-after").status_code == 200 or None,
        20,
    )


def test_a_proxy_killed_mid_call_frees_its_slot_within_a_lease(fleet: Fleet, extras: Extras) -> None:
    proxy = extras.killed
    fleet.authority.limits()
    fleet.authority.settled()
    expired = fleet.authority.stats().expired
    def call() -> None:
        with contextlib.suppress(httpx.HTTPError):  # the proxy dies under it
            proxy.chat("sk-killed", "tag=killed delay=30", timeout=10)

    t = threading.Thread(target=call, daemon=True)
    t.start()
    eventually("the call running", lambda: fleet.upstream.tag("killed").now == 1 or None)
    assert fleet.authority.stats().in_flight == 1
    killed_at = time.monotonic()
    proxy.kill()
    # Nobody renews the ticket: it lapses within the lease (2 s here), plus the sweep's delay.
    eventually("the slot freed", lambda: fleet.authority.stats().in_flight == 0 or None, 5)
    assert time.monotonic() - killed_at < 5
    assert fleet.authority.stats().expired == expired + 1
    # Its tokens stay reserved (nobody knows what the provider billed) until the reservation
    # turns uncertain and an operator resolves it, as an operator would after a crash.
    held = [r for r in fleet.authority.reservations() if r.run_id.startswith("proxy-killed/")]
    assert len(held) == 1, held
    eventually(
        "the reservation uncertain",
        lambda: [r for r in fleet.authority.reservations() if r.state == pb.RESERVATION_STATE_UNCERTAIN] or None,
    )
    fleet.authority.operator.stub.ResolveReservation(
        pb.ResolveReservationRequest(host_id=HOST, run_id=held[0].run_id, step=1, resolution=pb.RESOLUTION_RELEASED),
        metadata=(("authorization", f"Bearer {OPERATOR_TOKEN}"),),
    )
    fleet.authority.settled()


def test_wrong_settings_stop_the_proxy_naming_the_variable(fleet: Fleet) -> None:
    # What docs/litellm.md shows a wrong setting print.
    page = (REPO / "docs/litellm.md").read_text()
    shown = page.split("A wrong setting stops the proxy at start, naming the variable:")[1].split("```text\n")[1].split("\n")[0]
    env = {**fleet.env(), "ADMISSION_MODE": "sometimes"}
    proc = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "litellm"), "--config", str(fleet.workdir / "litellm.yaml"), "--port", "1"],
        env={**os.environ, "PYTHONPATH": str(HERE), "LITELLM_LOCAL_MODEL_COST_MAP": "True", **env},
        cwd=fleet.workdir,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert shown in (proc.stdout + proc.stderr).splitlines(), (shown, (proc.stdout + proc.stderr)[-3000:])
