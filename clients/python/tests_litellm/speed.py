"""What the LiteLLM drop-in costs a proxied request, measured against the same proxies without it.

    target/litellm-venv/bin/python clients/python/tests_litellm/speed.py [--requests N] [--seconds S]

Starts the authority (``$ADMISSION_BIN``, else the repo's release build), a fake upstream that
answers at once, and four LiteLLM proxies: two with the drop-in (default settings: a slot and a
token reservation per call) and two without. Then, alternating the two arms in rounds so that
both see the same machine:

* latency: one request at a time, ``--requests`` per round and arm, p50 and p99 in ms;
* throughput: ``--concurrency`` requests in flight spread over the arm's two proxies for
  ``--seconds`` per round, requests per second.

Prints each arm's figures and the ratios (with / without), and the authority's CPU per request.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import LITELLM_CONFIG, REPO, Authority, Fleet, Proxy, Upstream  # noqa: E402

WITHOUT = LITELLM_CONFIG.replace('  callbacks: ["admission_authority_client.litellm.handler"]\n', '  callbacks: []\n')


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def latencies(client: httpx.AsyncClient, proxies: list[Proxy], n: int) -> list[float]:
    out = []
    for i in range(n):
        p = proxies[i % len(proxies)]
        started = time.perf_counter()
        r = await client.post(
            f"{p.url}/v1/chat/completions",
            json={"model": "fake", "messages": [{"role": "user", "content": "delay=0"}]},
            headers={"authorization": f"Bearer sk-speed-{i % 8}"},
        )
        out.append(time.perf_counter() - started)
        assert r.status_code == 200, r.text
    return out


async def throughput(client: httpx.AsyncClient, proxies: list[Proxy], concurrency: int, seconds: float) -> float:
    done = 0
    end = time.perf_counter() + seconds

    async def worker(w: int) -> None:
        nonlocal done
        p = proxies[w % len(proxies)]
        while time.perf_counter() < end:
            r = await client.post(
                f"{p.url}/v1/chat/completions",
                json={"model": "fake", "messages": [{"role": "user", "content": "delay=0"}]},
                headers={"authorization": f"Bearer sk-speed-{w % 8}"},
            )
            assert r.status_code == 200, r.text
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return done / (time.perf_counter() - started)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


async def measure(args: argparse.Namespace, arms: dict[str, list[Proxy]], authority: Authority) -> None:
    lat: dict[str, list[float]] = {k: [] for k in arms}
    rps: dict[str, list[float]] = {k: [] for k in arms}
    cpu: dict[str, float] = {k: 0.0 for k in arms}
    proxy_cpu: dict[str, float] = {k: 0.0 for k in arms}
    count: dict[str, int] = {k: 0 for k in arms}
    limits = httpx.Limits(max_connections=args.concurrency * 2, max_keepalive_connections=args.concurrency * 2)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        for name, proxies in arms.items():  # warm up both arms
            await latencies(client, proxies, 20)
        for _ in range(args.rounds):
            for name, proxies in arms.items():
                before = cpu_seconds(authority.proc.pid)
                proxies_before = sum(cpu_seconds(p.proc.pid) for p in proxies)
                lat[name] += await latencies(client, proxies, args.requests)
                r = await throughput(client, proxies, args.concurrency, args.seconds)
                rps[name].append(r)
                cpu[name] += cpu_seconds(authority.proc.pid) - before
                proxy_cpu[name] += sum(cpu_seconds(p.proc.pid) for p in proxies) - proxies_before
                count[name] += args.requests + int(r * args.seconds)
    print(f"{'arm':<16} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>8} {'authority µs/req':>17} {'proxy µs/req':>13}")
    for name in arms:
        n = max(1, count[name])
        print(
            f"{name:<16} {pct(lat[name], 0.5):8.2f} {pct(lat[name], 0.99):8.2f} "
            f"{statistics.median(rps[name]):8.1f} {cpu[name] / n * 1e6:17.1f} {proxy_cpu[name] / n * 1e6:13.1f}"
        )
    w, wo = "with drop-in", "without"
    print(
        f"ratios (with / without): p50 {pct(lat[w], 0.5) / pct(lat[wo], 0.5):.2f}  "
        f"p99 {pct(lat[w], 0.99) / pct(lat[wo], 0.99):.2f}  "
        f"req/s {statistics.median(rps[w]) / statistics.median(rps[wo]):.2f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=300, help="sequential requests per round and arm")
    ap.add_argument("--seconds", type=float, default=10.0, help="throughput seconds per round and arm")
    ap.add_argument("--concurrency", type=int, default=16, help="requests in flight in the throughput phase")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workdir", help="keep the configurations and the proxies' logs here (default: a temporary directory)")
    args = ap.parse_args()
    os.environ.setdefault("ADMISSION_BIN", str(REPO / "target/release/admission-authority"))
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(args.workdir or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        upstream = Upstream()
        (workdir / "litellm.yaml").write_text(LITELLM_CONFIG.format(port=upstream.port))
        (workdir / "without.yaml").write_text(WITHOUT.format(port=upstream.port))
        authority = Authority(workdir)
        fleet = Fleet(upstream, authority, [], workdir)
        # The drop-in's defaults: no LiteLLM limits to hold, the default recheck and timeout.
        env = {
            **fleet.env(),
            "ADMISSION_LIMITS_TOKEN": "",
            "ADMISSION_RATE_LIMIT_DOMAIN": "",
            "ADMISSION_LIMITS_RECHECK": "",
            "ADMISSION_TIMEOUT": "",
        }
        try:
            with_ = [fleet.proxy("with-1", env), fleet.proxy("with-2", env)]
            without = [fleet.proxy("without-1", env, config="without.yaml"), fleet.proxy("without-2", env, config="without.yaml")]
            for p in with_ + without:
                p.wait_ready()
            asyncio.run(measure(args, {"with drop-in": with_, "without": without}, authority))
        finally:
            for p in fleet.proxies:
                p.stop()
            authority.stop()
            upstream.stop()


if __name__ == "__main__":
    main()
