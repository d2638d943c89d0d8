"""Start the real admission-authority binary for the tests, on a free loopback port.

The binary is ``$ADMISSION_BIN`` (the test command sets it), else the repo's debug build.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

REPO = Path(__file__).resolve().parents[3]
T = TypeVar("T")


class Server:
    def __init__(self, *args: str, listen: str = "127.0.0.1:0") -> None:
        binary = os.environ.get("ADMISSION_BIN", str(REPO / "target/debug/admission-authority"))
        self.proc = subprocess.Popen(
            [binary, "serve", "--listen", listen, *args],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "RUST_LOG": "warn"},
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith("listening on "), f"unexpected first line: {line!r}"
        self.addr = line.removeprefix("listening on ").strip()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)

    def kill(self) -> None:
        """SIGKILL, as an OOM kill or a lost node would."""
        self.proc.kill()
        self.proc.wait(timeout=10)


@pytest.fixture
def start_server() -> Iterator[Callable[..., Server]]:
    """Start servers with the given flags; each is stopped (by PID) after the test."""
    started: list[Server] = []

    def start(*args: str, listen: str = "127.0.0.1:0") -> Server:
        s = Server(*args, listen=listen)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


def eventually(what: str, check: Callable[[], T | None], deadline: float = 5.0) -> T:
    """Poll ``check`` until it returns something other than None, or fail after ``deadline``."""
    end = time.monotonic() + deadline
    while True:
        value = check()
        if value is not None:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {deadline} s waiting for: {what}")
        time.sleep(0.02)
