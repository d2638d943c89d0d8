"""The speed script docs/litellm.md shows runs, here in a short version (its figures come from
the long one, in release mode)."""

from __future__ import annotations

import subprocess
import sys

from conftest import HERE


def test_the_speed_script_prints_both_arms_and_the_ratios() -> None:
    out = subprocess.run(
        [sys.executable, str(HERE / "speed.py"), "--requests", "5", "--seconds", "0.5", "--rounds", "1", "--concurrency", "4"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    lines = out.splitlines()
    assert lines[0].split() == ["arm", "p50", "ms", "p99", "ms", "req/s", "authority", "µs/req", "proxy", "µs/req"], out
    assert lines[1].startswith("with drop-in") and lines[2].startswith("without"), out
    assert lines[3].startswith("ratios (with / without): p50 "), out
