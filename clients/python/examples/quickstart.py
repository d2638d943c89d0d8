"""The Python client against a running authority: hold a slot, spend a model step's budget,
check an auth attempt. Every run is a new run (a new run_id), so run it as often as you like:

    python examples/quickstart.py [ADDRESS]        # default 127.0.0.1:50051
"""

from __future__ import annotations

import sys
import uuid

from admission_authority_client import AdmissionClient, AdmissionRefused


def main(address: str) -> None:
    with AdmissionClient(address, host_id="installation-one") as client:
        # A run's id is its idempotency key: a retried Submit with it answers the same ticket,
        # so each new run needs a new one.
        run_id = f"quickstart-{uuid.uuid4().hex[:12]}"
        try:
            # Waits in the installation-wide queue if every slot is taken (at most 30 s here).
            with client.slot("alice", run_id=run_id, wait_timeout=30) as slot:
                print(f"admitted: ticket {slot.ticket_id} (grant {slot.grant})")
                step = client.authorize(run_id, 1, "alice", requested_output_tokens=1024)
                if step.allowed:
                    client.settle(run_id, 1, input_tokens=300, output_tokens=200)
                    print("step 1: allowed, settled 500 tokens")
                else:
                    print(f"step 1: {step.decision} ({step.reason})")
            print("released")
        except AdmissionRefused as e:  # Busy, QueueFull, MemoryPressure, Draining
            print(f"refused: {e.reason}, retry in {e.retry_after or 1} s")
        # One attempt against the magic-link bucket of this identity, before checking the
        # credential; a verified one clears the bucket (flows that count only failures do
        # this), so the example never locks itself out however often it runs.
        attempt = client.check_auth_attempt("magic_link", "mallory@example.com")
        print(f"auth attempt: allowed={attempt.allowed} remaining={attempt.remaining}")
        client.reset_auth_attempts("magic_link", "mallory@example.com")
        print("credential verified: bucket cleared")
        stats = client.stats()
        print(f"installation-one: {stats.in_flight} running, {stats.admitted} admitted so far")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:50051")
