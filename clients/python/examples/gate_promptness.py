"""How promptly the PraisonAI gate admits: a turn's first admission on a gate just built (the
host's 20 ms pause, then a turn: until the gate counts it in flight), and a release handing
the slot to the next waiter (until the gate counts the waiter in flight), 40 times each, on
hosts of their own, against a running authority with one slot and a queue of one:

    admission-authority serve --total 1 --queue-total 1 &
    python clients/python/examples/gate_promptness.py 127.0.0.1:50051

See docs/praisonai.md ("Promptness") for the figures and what bounds them.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Callable

from admission_authority_client import AsyncAdmissionClient
from admission_authority_client.praisonai import AuthorityGate

ROUNDS = 40


async def until(check: Callable[[], bool]) -> None:
    while not check():
        await asyncio.sleep(0.0005)


async def one_round(address: str, i: int) -> tuple[float, float]:
    gate = AuthorityGate(AsyncAdmissionClient(address, host_id=f"promptness-{i}"))
    await asyncio.sleep(0.02)  # the host's own pause after building its gate
    first_done, second_done = asyncio.Event(), asyncio.Event()

    async def turn(session: str, done: asyncio.Event) -> None:
        async with gate.admit(session_id=session):
            await done.wait()

    start = time.perf_counter()
    first = asyncio.create_task(turn("u0", first_done))
    await until(lambda: gate.in_flight == 1)
    admitted = time.perf_counter() - start

    second = asyncio.create_task(turn("u1", second_done))
    await until(lambda: gate.queued == 1)
    start = time.perf_counter()
    first_done.set()
    await until(lambda: gate.in_flight == 1 and gate.queued == 0)
    handed = time.perf_counter() - start

    second_done.set()
    await asyncio.gather(first, second)
    await gate.aclose()
    return admitted * 1000, handed * 1000


def p99(xs: list[float]) -> float:
    return sorted(xs)[int(len(xs) * 0.99) - 1]


async def main(address: str) -> None:
    rounds = [await one_round(address, i) for i in range(ROUNDS)]
    for name, xs in (("first admission", [r[0] for r in rounds]),
                     ("release -> next admitted", [r[1] for r in rounds])):
        print(f"{name} ms: p50 {statistics.median(xs):.1f} p99 {p99(xs):.1f} max {max(xs):.1f}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:50051"))
