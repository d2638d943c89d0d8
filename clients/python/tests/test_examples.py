"""The client example the docs show, run as a reader runs it: again and again (more often than
its auth bucket allows attempts in a window), against a real
authority; and the error a reused run id gets says what happened."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from admission_authority_client import AdmissionClient, TicketEnded

from .conftest import Server

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "quickstart.py"


def test_the_quickstart_example_runs_again_and_again(start_server: Callable[..., Server]) -> None:
    server = start_server()
    for run in range(1, 8):  # the magic_link bucket allows 5 attempts a window
        done = subprocess.run([sys.executable, str(EXAMPLE), server.addr],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines[0].startswith("admitted: ticket installation-one."), done.stdout
        assert lines[1:3] == ["step 1: allowed, settled 500 tokens", "released"], done.stdout
        assert lines[3:5] == ["auth attempt: allowed=True remaining=4",
                              "credential verified: bucket cleared"], done.stdout
        assert lines[5] == f"installation-one: 0 running, {run} admitted so far", done.stdout


def test_a_reused_run_id_is_told_that_its_run_already_ended(start_server: Callable[..., Server]) -> None:
    server = start_server()
    with AdmissionClient(server.addr, host_id="h") as client:
        with client.slot("alice", run_id="run-1"):
            pass
        with pytest.raises(TicketEnded) as ended:
            with client.slot("alice", run_id="run-1"):
                raise AssertionError("a finished run's id admitted again")
    assert ended.value.run_id == "run-1" and ended.value.state == "RELEASED"
    assert str(ended.value).startswith("run_id run-1 already names ticket h."), str(ended.value)
    assert "give each new run a new run_id" in str(ended.value)
