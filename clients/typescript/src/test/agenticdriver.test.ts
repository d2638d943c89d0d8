/** The AgenticDriver-shaped objects against a real server process. */

import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import {
  AdmissionClient,
  AdmissionError,
  AuthorityResourceAdmission,
  AuthorityScheduler,
  type Identity,
  SchedulerError,
  type Ticket,
} from "../index.js";
import { eventually, startServer } from "./server.js";

const who = (subject: string, accountId?: string, hostId = "h"): Identity => ({
  hostId,
  accountId,
  subject,
  provider: "anthropic",
});

function config(yaml: string): string {
  const path = join(mkdtempSync(join(tmpdir(), "admission-ad-")), "config.yaml");
  writeFileSync(path, yaml);
  return path;
}

test("round robin across subjects: releases admit a1, b1, a2, b2, a3", async () => {
  const server = await startServer("--total", "1", "--per-subject", "1", "--queue-total", "8");
  const client = new AdmissionClient(server.addr, { hostId: "h" });
  const scheduler = new AuthorityScheduler(client);
  try {
    const holder = scheduler.submit(who("alice"));
    await holder.wait();
    const order: string[] = [];
    const queued = new Map<string, Ticket>();
    // Queued in this order: a1 a2 a3 (alice), then b1 b2 (bob).
    for (const [name, subject] of [["a1", "alice"], ["a2", "alice"], ["a3", "alice"], ["b1", "bob"], ["b2", "bob"]]) {
      const ticket = scheduler.submit(who(subject));
      queued.set(name, ticket);
      void ticket.wait().then(() => order.push(name), () => {});
      const depth = queued.size;
      await eventually(`${name} to queue`, async () => (await client.stats()).queued === depth);
    }
    assert.deepEqual(scheduler.stats, { active: 1, queued: 5 });
    let running: Ticket = holder;
    for (const expected of ["a1", "b1", "a2", "b2", "a3"]) {
      await running.release();
      await eventually(`${expected} to be admitted`, async () => order.length === ["a1", "b1", "a2", "b2", "a3"].indexOf(expected) + 1);
      running = queued.get(order.at(-1)!)!;
    }
    assert.deepEqual(order, ["a1", "b1", "a2", "b2", "a3"]);
    await running.release();
    await running.release(); // idempotent
    assert.deepEqual(scheduler.stats, { active: 0, queued: 0 });
    const s = await client.stats();
    assert.deepEqual([s.inFlight, s.queued, s.released], [0, 0, 6]);
  } finally {
    client.close();
    await server.stop();
  }
});

test("tickets submitted back to back reach the authority in the order they were made", async () => {
  const server = await startServer("--total", "1", "--per-subject", "1", "--queue-total", "8");
  const client = new AdmissionClient(server.addr, { hostId: "h" });
  const scheduler = new AuthorityScheduler(client);
  try {
    for (let round = 0; round < 5; round++) {
      const holder = scheduler.submit(who("holder"));
      await holder.wait();
      const order: string[] = [];
      const tickets = new Map<string, Ticket>();
      // No pause between the Submits: the order is the scheduler's to keep.
      for (const [name, subject] of [["a1", "alice"], ["a2", "alice"], ["a3", "alice"], ["b1", "bob"], ["b2", "bob"]]) {
        const ticket = scheduler.submit(who(subject));
        tickets.set(name, ticket);
        void ticket.wait().then(() => order.push(name), () => {});
      }
      await eventually("all five to queue", async () => (await client.stats()).queued === 5);
      let running: Ticket = holder;
      for (let i = 0; i < 5; i++) {
        await running.release();
        await eventually(`admission ${i + 1}`, async () => order.length === i + 1);
        running = tickets.get(order.at(-1)!)!;
      }
      await running.release();
      assert.deepEqual(order, ["a1", "b1", "a2", "b2", "a3"], `round ${round}`);
    }
  } finally {
    client.close();
    await server.stop();
  }
});

test("a ticket's release passes the provider call's outcome through", async () => {
  const server = await startServer(
    "--config",
    config("scheduling:\n  accounts:\n    acme: { adaptive: { min: 1, max: 4, cooldown: 0s } }\n"),
  );
  const client = new AdmissionClient(server.addr, { hostId: "h" });
  const scheduler = new AuthorityScheduler(client);
  try {
    const ticket = scheduler.submit(who("alice", "acme"));
    await ticket.wait();
    await ticket.release({ error: Object.assign(new Error("429"), { status: 429 }) });
    const s = await client.stats();
    assert.equal(s.outcomeRateLimited, 1);
    assert.deepEqual(
      s.accounts.filter((a) => a.accountId === "acme").map((a) => [a.cap, a.adaptive]),
      [[2, true]],
    );
  } finally {
    client.close();
    await server.stop();
  }
});

test("account capacity is shared per (host, account)", async () => {
  const server = await startServer("--total", "10", "--per-account", "1");
  const client = new AdmissionClient(server.addr, { hostId: "h" });
  const scheduler = new AuthorityScheduler(client);
  try {
    const alice = await scheduler.trySubmit(who("alice", "acme"));
    assert.ok(alice, "the account's one slot");
    // Another subject of the same account on the same host: the account is full.
    assert.equal(await scheduler.trySubmit(who("bob", "acme")), undefined);
    // The same account id on another host is another account.
    const elsewhere = await scheduler.trySubmit(who("bob", "acme", "h2"));
    assert.ok(elsewhere);
    // An unbound run is not held back by the account.
    const unbound = await scheduler.trySubmit(who("carol"));
    assert.ok(unbound);
    await alice.release();
    const bob = await scheduler.trySubmit(who("bob", "acme"));
    assert.ok(bob, "the account's slot is free again");
    for (const t of [elsewhere, unbound, bob]) await t.release();
    assert.deepEqual(scheduler.stats, { active: 0, queued: 0 });
  } finally {
    client.close();
    await server.stop();
  }
});

test("trySubmit never queues; submit refuses with BUSY or QUEUE_FULL", async () => {
  const server = await startServer("--total", "1", "--queue-total", "1");
  const client = new AdmissionClient(server.addr, { hostId: "h" });
  const scheduler = new AuthorityScheduler(client);
  try {
    const holder = await scheduler.trySubmit(who("alice"));
    assert.ok(holder);
    assert.equal(await scheduler.trySubmit(who("bob")), undefined);
    assert.equal((await client.stats()).queued, 0, "trySubmit left nothing queued");
    const waiting = scheduler.submit(who("carol"));
    await eventually("carol to queue", async () => (await client.stats()).queued === 1);
    const refused = scheduler.submit(who("dave"));
    await assert.rejects(refused.wait(), (e: unknown) => {
      assert.ok(e instanceof SchedulerError);
      assert.deepEqual([e.code, e.retryable, e.retryAfterMs], ["QUEUE_FULL", true, 2000]);
      return true;
    });
    await refused.release(); // harmless after a refusal
    await holder.release();
    await waiting.wait();
    await waiting.release();
    const s = await client.stats();
    assert.deepEqual([s.inFlight, s.queued, s.rejected], [0, 0, 2]);
  } finally {
    client.close();
    await server.stop();
  }
  // No queue at all: a saturated submit is BUSY.
  const bare = await startServer("--total", "1");
  const c2 = new AdmissionClient(bare.addr, { hostId: "h" });
  try {
    const s2 = new AuthorityScheduler(c2);
    const holder = s2.submit(who("alice"));
    await holder.wait();
    await assert.rejects(s2.submit(who("bob")).wait(), (e: unknown) =>
      e instanceof SchedulerError && e.code === "BUSY" && e.retryable,
    );
    await holder.release();
  } finally {
    c2.close();
    await bare.stop();
  }
});

test("an aborted signal withdraws a queued ticket", async () => {
  const server = await startServer("--total", "1", "--queue-total", "4");
  const client = new AdmissionClient(server.addr, { hostId: "h" });
  const scheduler = new AuthorityScheduler(client);
  try {
    const holder = scheduler.submit(who("alice"));
    await holder.wait();
    const abort = new AbortController();
    const waiter = scheduler.submit(who("bob"), abort.signal);
    await eventually("bob to queue", async () => (await client.stats()).queued === 1);
    abort.abort(new Error("the user closed the tab"));
    await assert.rejects(waiter.wait(), (e: unknown) => {
      assert.ok(e instanceof SchedulerError);
      assert.deepEqual([e.code, e.retryable], ["CANCELLED", false]);
      return true;
    });
    await eventually("bob's ticket withdrawn", async () => {
      const s = await client.stats();
      return s.queued === 0 && s.cancelled === 1;
    });
    // An already aborted signal submits nothing.
    const never = scheduler.submit(who("carol"), abort.signal);
    await assert.rejects(never.wait(), (e: unknown) => e instanceof SchedulerError && e.code === "CANCELLED");
    await holder.release();
    const s = await client.stats();
    assert.deepEqual([s.inFlight, s.queued, s.admitted], [0, 0, 1]);
    assert.deepEqual(scheduler.stats, { active: 0, queued: 0 });
  } finally {
    client.close();
    await server.stop();
  }
});

test("authorize answers allow, deny and unknown from the server's budgets", async () => {
  const server = await startServer(
    "--config",
    config(
      [
        "resources:",
        "  subjects:",
        "    alice: { max_tokens: 1000 }",
        "    deferred: { max_tokens: 1000, unknown_usage: defer }",
      ].join("\n"),
    ),
  );
  const client = new AdmissionClient(server.addr, { hostId: "h" });
  const admission = new AuthorityResourceAdmission(client, { requestedOutputTokens: 400 });
  const step = (subject: string, runId: string, n: number, usage?: { inputTokens: number; outputTokens: number }) =>
    admission.authorize({ identity: who(subject), runId, model: "claude", step: n, usage });
  try {
    assert.equal(admission.unknown, "reject");
    assert.equal(await step("alice", "r1", 1), "allow");
    // The snapshot at step 2 settles step 1 (600 used): 400 more fit the 1,000 budget.
    assert.equal(await step("alice", "r1", 2, { inputTokens: 100, outputTokens: 500 }), "allow");
    // Step 2 used 500 more: 1,100 ≥ 1,000, the budget is spent.
    assert.equal(await step("alice", "r1", 3, { inputTokens: 200, outputTokens: 900 }), "deny");
    // An earlier step never settled (no snapshot): usage unknown; this budget defers.
    assert.equal(await step("deferred", "r2", 1), "allow");
    assert.equal(await step("deferred", "r2", 2), "unknown");
    // The driver's real shape: the meter's snapshot, nested, with its coverage.
    assert.equal(await step("alice", "r5", 1), "allow");
    assert.equal(
      await admission.authorize({
        identity: who("alice"),
        runId: "r5",
        model: "claude",
        step: 2,
        usage: { usage: { inputTokens: 400, outputTokens: 200 }, observedUsage: {}, coverage: "complete" },
      }),
      "allow",
    );
    assert.equal(
      await admission.authorize({
        identity: who("alice"),
        runId: "r5",
        model: "claude",
        step: 3,
        usage: { usage: { inputTokens: 900, outputTokens: 300 }, coverage: "complete" },
      }),
      "deny",
      "600 settled for step 1 and 600 more for step 2: the 1,000 budget is spent",
    );
    // A meter that says its usage is unknown is settled as unknown: this budget defers.
    assert.equal(await step("deferred", "r6", 1), "allow");
    assert.equal(
      await admission.authorize({
        identity: who("deferred"),
        runId: "r6",
        model: "claude",
        step: 2,
        usage: { usage: { inputTokens: 5, outputTokens: 5 }, coverage: "unknown" },
      }),
      "unknown",
    );
    // A run that finishes settles its last step.
    assert.equal(await step("alice", "r3", 1), "allow");
    await admission.finish(who("alice"), "r3", { inputTokens: 10, outputTokens: 20 });
    const s = await client.stats();
    assert.deepEqual([s.settled, s.authorizeAllowed, s.authorizeDenied, s.authorizeDeferred], [6, 7, 2, 2]);
  } finally {
    client.close();
    await server.stop();
  }
  // Unreachable: authorize throws (the host fails closed), the scheduler's wait rejects.
  const gone = new AdmissionClient(server.addr, { hostId: "h", timeoutMs: 2000 });
  try {
    const context = { identity: who("alice"), runId: "r4", model: "claude", step: 1 };
    await assert.rejects(new AuthorityResourceAdmission(gone).authorize(context), (e: unknown) => e instanceof AdmissionError);
    await assert.rejects(new AuthorityScheduler(gone).submit(who("alice")).wait(), (e: unknown) => e instanceof AdmissionError);
  } finally {
    gone.close();
  }
});
