/** Keys from the TypeScript client against a real server: the newest message of a
 * conversation wins (SupersededError), a busy key refuses (KeyBusyError naming its holder), and
 * a running slot hears that a newer one superseded it. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { AdmissionClient, KeyBusyError, SupersededError } from "../index.js";
import { eventually, startServer } from "./server.js";

test("a newer message supersedes the waiting one", async () => {
  const server = await startServer("--total", "1", "--queue-total", "10");
  const client = new AdmissionClient(server.addr, { hostId: "h" });
  try {
    const busy = await client.acquire("bob");
    const first = client.acquire("alice", { runId: "m1", key: "conv", keyPolicy: "keep_newest", debounceMs: 50 });
    const firstEnded = first.then(
      () => assert.fail("the first message must not be admitted"),
      (e: unknown) => e,
    );
    await eventually("the first message to queue", async () => (await client.stats()).queued === 1);
    const second = client.acquire("alice", { runId: "m2", key: "conv", keyPolicy: "keep_newest" });
    const e = await firstEnded;
    assert.ok(e instanceof SupersededError, String(e));
    assert.equal(e.state, "SUPERSEDED");
    await busy.release();
    const slot = await second;
    assert.equal(slot.ticketId, e.supersededBy);
    await slot.release();
    assert.equal((await client.stats()).superseded, 1);
  } finally {
    client.close();
    await server.stop();
  }
});

test("a busy key refuses naming its holder", async () => {
  const server = await startServer("--total", "4");
  const client = new AdmissionClient(server.addr, { hostId: "h" });
  try {
    const held = await client.acquire("alice", { runId: "r1", key: "doc-7", keyPolicy: "reject_new" });
    await assert.rejects(
      client.acquire("alice", { runId: "r2", key: "doc-7", keyPolicy: "reject_new" }),
      (e: unknown) => e instanceof KeyBusyError && e.holder === held.ticketId && e.retryAfterMs !== undefined,
    );
    await held.release();
    const again = await client.acquire("alice", { runId: "r3", key: "doc-7", keyPolicy: "reject_new" });
    await again.release();
  } finally {
    client.close();
    await server.stop();
  }
});

test("a running slot hears it was superseded", async () => {
  const server = await startServer("--total", "2", "--queue-total", "10", "--lease-ttl", "600ms");
  const client = new AdmissionClient(server.addr, { hostId: "h" });
  try {
    const running = await client.acquire("alice", { runId: "c1", key: "chat", keyPolicy: "serial_keep_newest" });
    const newer = client.acquire("alice", {
      runId: "c2",
      key: "chat",
      keyPolicy: "serial_keep_newest",
      supersedeRunning: true,
    });
    // Its next renewal (every 200 ms) names the newer ticket; the run stops and releases.
    await eventually("the running slot to hear of it", async () => running.supersededBy !== "");
    await running.release();
    const next = await newer;
    assert.equal(next.ticketId, running.supersededBy);
    await next.release();
  } finally {
    client.close();
    await server.stop();
  }
});
