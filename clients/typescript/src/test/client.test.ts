/** The TypeScript wrapper against a real server process. */

import assert from "node:assert/strict";
import { writeFileSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { status as grpcStatus } from "@grpc/grpc-js";

import { AdmissionClient, AdmissionError, AdmissionRefusedError } from "../index.js";
import { eventually, startServer } from "./server.js";

test("a slot is acquired and released", async () => {
  const server = await startServer("--total", "2");
  const client = new AdmissionClient(server.addr, { hostId: "h" });
  try {
    const slot = await client.acquire("alice", { runId: "r1" });
    assert.ok(slot.grant > 0 && slot.ticketId.startsWith("h."));
    assert.equal((await client.stats()).inFlight, 1);
    await slot.release();
    await slot.release(); // idempotent
    const s = await client.stats();
    assert.deepEqual([s.inFlight, s.released], [0, 1]);
  } finally {
    client.close();
    await server.stop();
  }
});

test("a queued slot is admitted after another is released", async () => {
  const server = await startServer("--total", "1", "--queue-total", "4");
  const client = new AdmissionClient(server.addr, { hostId: "h" });
  try {
    const first = await client.acquire("alice");
    const second = client.acquire("bob");
    await eventually("bob to queue", async () => (await client.stats()).queued === 1);
    await first.release();
    const slot = await second;
    assert.ok(slot.grant > first.grant);
    await slot.release();
  } finally {
    client.close();
    await server.stop();
  }
});

test("await using releases the slot when the block throws", async () => {
  const server = await startServer("--total", "1");
  const client = new AdmissionClient(server.addr, { hostId: "h" });
  try {
    await assert.rejects(async () => {
      await using slot = await client.acquire("alice");
      assert.ok(slot.grant > 0);
      throw new Error("tool failed");
    }, /tool failed/);
    const s = await client.stats();
    assert.deepEqual([s.inFlight, s.released], [0, 1]);
  } finally {
    client.close();
    await server.stop();
  }
});

test("aborting a waiting acquire withdraws its ticket", async () => {
  const server = await startServer("--total", "1", "--queue-total", "4");
  const client = new AdmissionClient(server.addr, { hostId: "h" });
  try {
    const holder = await client.acquire("alice");
    const abort = new AbortController();
    const waiting = client.acquire("bob", { signal: abort.signal });
    await eventually("bob to queue", async () => (await client.stats()).queued === 1);
    abort.abort(new Error("user went away"));
    await assert.rejects(waiting, /user went away/);
    await eventually("bob's ticket withdrawn", async () => {
      const s = await client.stats();
      return s.queued === 0 && s.cancelled === 1;
    });
    assert.equal((await client.stats()).inFlight, 1);
    await holder.release();
  } finally {
    client.close();
    await server.stop();
  }
});

test("BUSY and QUEUE_FULL reject with a typed error and retry delay", async () => {
  const server = await startServer("--total", "1", "--queue-total", "1");
  const client = new AdmissionClient(server.addr, { hostId: "h" });
  try {
    const holder = await client.acquire("alice");
    await assert.rejects(client.acquire("bob", { mode: "try" }), (e: unknown) => {
      assert.ok(e instanceof AdmissionRefusedError);
      assert.deepEqual([e.reason, e.retryAfterMs], ["BUSY", 1000]);
      return true;
    });
    const queued = client.acquire("carol");
    await eventually("carol to queue", async () => (await client.stats()).queued === 1);
    await assert.rejects(client.acquire("dave"), (e: unknown) => {
      assert.ok(e instanceof AdmissionRefusedError);
      assert.deepEqual([e.reason, e.retryAfterMs], ["QUEUE_FULL", 2000]);
      return true;
    });
    await holder.release();
    await (await queued).release();
  } finally {
    client.close();
    await server.stop();
  }
});

test("a held slot is renewed past its lease", async () => {
  const server = await startServer("--total", "1", "--lease-ttl", "300ms");
  const client = new AdmissionClient(server.addr, { hostId: "h" });
  try {
    const slot = await client.acquire("alice");
    await new Promise((r) => setTimeout(r, 1000)); // three leases: only renewals keep it
    assert.equal(slot.lost, false);
    const s = await client.stats();
    assert.deepEqual([s.inFlight, s.expired], [1, 0]);
    await slot.release();
  } finally {
    client.close();
    await server.stop();
  }
});

test("authorize, settle and auth checks round-trip", async () => {
  const dir = mkdtempSync(join(tmpdir(), "admission-ts-"));
  const config = join(dir, "budgets.yaml");
  writeFileSync(config, "resources:\n  default: { max_tokens: 1000 }\n");
  const server = await startServer("--config", config);
  const client = new AdmissionClient(server.addr, { hostId: "h" });
  try {
    const a = await client.authorize("run-1", 1, "alice", {
      requestedOutputTokens: 600,
      estimatedInputTokens: 100,
    });
    assert.deepEqual(
      [a.decision, a.grantedOutputTokens, a.remainingTokens, a.remainingCostUsd],
      ["allow", 600, 300, undefined],
    );
    assert.equal(await client.settle("run-1", 1, { inputTokens: 100, outputTokens: 500 }), false);
    assert.equal(await client.settle("run-1", 1, { inputTokens: 100, outputTokens: 500 }), true);
    const b = await client.authorize("run-1", 2, "alice", { requestedOutputTokens: 1000 });
    assert.equal(b.grantedOutputTokens, 400);

    const answers = [];
    for (let i = 0; i < 6; i++) answers.push(await client.checkAuthAttempt("magic_link", "eve"));
    assert.deepEqual(
      answers.map((x) => x.allowed),
      [true, true, true, true, true, false],
    );
    assert.equal(answers[5]!.locked, true);
    const peek = await client.checkAuthAttempt("magic_link", "eve", { peek: true });
    assert.deepEqual([peek.allowed, peek.locked, peek.retryAfterMs > 0], [false, true, true]);
    assert.equal(await client.resetAuthAttempts("magic_link", "eve"), true);
    assert.equal((await client.checkAuthAttempt("magic_link", "eve", { peek: true })).remaining, 5);
    assert.equal((await client.checkAuthAttempt("magic_link", "eve")).remaining, 4);
  } finally {
    client.close();
    await server.stop();
  }
});

test("a token is sent with every call", async () => {
  const { createHash } = await import("node:crypto");
  const digest = createHash("sha256").update("ts-gw-token").digest("hex");
  const dir = mkdtempSync(join(tmpdir(), "admission-ts-"));
  const config = join(dir, "credentials.yaml");
  writeFileSync(
    config,
    `credentials:\n  - { name: gw, role: gateway, host_ids: [h], token_sha256: "${digest}" }\n` +
      "scheduling: { total: 1, queue: { total: 2 } }\n",
  );
  const server = await startServer("--config", config);
  const client = new AdmissionClient(server.addr, { hostId: "h", token: "ts-gw-token" });
  const intruder = new AdmissionClient(server.addr, { hostId: "h", token: "wrong" });
  try {
    const holder = await client.acquire("alice");
    const queued = client.acquire("bob"); // its Wait stream carries the token too
    await eventually("bob to queue", async () => (await client.stats()).queued === 1);
    await holder.release();
    await (await queued).release();
    await assert.rejects(intruder.acquire("mallory"), (e: unknown) => {
      assert.ok(e instanceof AdmissionError);
      assert.equal(e.code, grpcStatus.UNAUTHENTICATED);
      return true;
    });
  } finally {
    client.close();
    intruder.close();
    await server.stop();
  }
});
