/**
 * The TypeScript client against a running authority: hold a slot, spend a model step's budget,
 * check an auth attempt. Every run is a new run (a new run id), so run it as often as you like:
 *
 *     node dist/examples/quickstart.js [ADDRESS]     # default 127.0.0.1:50051
 */

import { randomUUID } from "node:crypto";

import { AdmissionClient, AdmissionRefusedError } from "../index.js";

async function main(address: string): Promise<void> {
  const client = new AdmissionClient(address, { hostId: "installation-one" });
  try {
    // A run's id is its idempotency key: a retried Submit with it answers the same ticket, so
    // each new run needs a new one.
    const runId = `quickstart-${randomUUID().slice(0, 12)}`;
    try {
      // Waits in the installation-wide queue if every slot is taken.
      const slot = await client.acquire("alice", { runId });
      try {
        console.log(`admitted: ticket ${slot.ticketId} (grant ${slot.grant})`);
        const step = await client.authorize(runId, 1, "alice", { requestedOutputTokens: 1024 });
        if (step.decision === "allow") {
          await client.settle(runId, 1, { inputTokens: 300, outputTokens: 200 });
          console.log("step 1: allowed, settled 500 tokens");
        } else {
          console.log(`step 1: ${step.decision} (${step.reason})`);
        }
      } finally {
        await slot.release({ outcome: "ok" });
      }
      console.log("released");
    } catch (e) {
      if (!(e instanceof AdmissionRefusedError)) throw e;
      console.log(`refused: ${e.reason}, retry in ${e.retryAfterMs ?? 1000} ms`); // BUSY, QUEUE_FULL, ...
    }
    // One attempt against the magic-link bucket of this identity, before checking the
    // credential; a verified one clears the bucket (flows that count only failures do this),
    // so the example never locks itself out however often it runs.
    const attempt = await client.checkAuthAttempt("magic_link", "mallory@example.com");
    console.log(`auth attempt: allowed=${attempt.allowed} remaining=${attempt.remaining}`);
    await client.resetAuthAttempts("magic_link", "mallory@example.com");
    console.log("credential verified: bucket cleared");
    const stats = await client.stats();
    console.log(`installation-one: ${stats.inFlight} running, ${stats.admitted} admitted so far`);
  } finally {
    client.close();
  }
}

await main(process.argv[2] ?? "127.0.0.1:50051");
