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
  ClientClosedError,
  type Identity,
  SchedulerError,
  type Ticket,
} from "../index.js";
import { DriverError, dispatchJob, foregroundRun, UsageMeter } from "./agenticdriver-shapes.js";
import { eventually, freePort, startServer } from "./server.js";

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

test("round robin across subjects: releases admit a1, b1, a2, b2, a3, then a4 that came later", async () => {
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
      // The authority counts it before its Submit answer reaches this object: wait for both.
      await eventually(
        `${name} to queue`,
        async () => (await client.stats()).queued === depth && scheduler.stats.queued === depth,
      );
    }
    assert.deepEqual(scheduler.stats, { active: 1, queued: 5 });
    const expected = ["a1", "b1", "a2", "b2", "a3", "a4"];
    let running: Ticket = holder;
    for (let i = 0; i < expected.length; i++) {
      await running.release();
      await eventually(`${expected[i]} to be admitted`, async () => order.length === i + 1);
      running = queued.get(order.at(-1)!)!;
      if (i === 0) {
        // A new arrival of alice's while a1 runs waits behind bob's turn and alice's backlog.
        const a4 = scheduler.submit(who("alice"));
        queued.set("a4", a4);
        void a4.wait().then(() => order.push("a4"), () => {});
        await eventually("a4 to queue", async () => (await client.stats()).queued === 5);
      }
    }
    assert.deepEqual(order, expected);
    await running.release();
    await running.release(); // idempotent
    assert.deepEqual(scheduler.stats, { active: 0, queued: 0 });
    const s = await client.stats();
    assert.deepEqual([s.inFlight, s.queued, s.released], [0, 0, 7]);
  } finally {
    client.close();
    await server.stop();
  }
});

test("running and queued tickets carry on through a killed and restarted authority", async () => {
  // An authority on a data dir, SIGKILLed and started again on the same address: the running
  // ticket keeps its slot by renewing, the queued one's Wait is reopened and keeps its place.
  const probe = await startServer();
  const port = probe.addr.split(":").at(-1)!;
  await probe.stop();
  const addr = `127.0.0.1:${port}`;
  const dir = mkdtempSync(join(tmpdir(), "admission-ad-data-"));
  const flags = ["--listen", addr, "--data-dir", join(dir, "data"), "--total", "1",
    "--queue-total", "4", "--lease-ttl", "2s"];
  let server = await startServer(...flags);
  const client = new AdmissionClient(addr, { hostId: "h" });
  const scheduler = new AuthorityScheduler(client);
  try {
    const running = scheduler.submit(who("alice"));
    await running.wait();
    const waiting = scheduler.submit(who("bob"));
    let admitted = false;
    const waited = waiting.wait().then(() => {
      admitted = true;
    });
    await eventually("bob to queue", async () => (await client.stats()).queued === 1);
    await server.kill();
    server = await startServer(...flags);
    const restarted = Date.now();
    // Past the lease the restart gave: only the renewals keep alice's slot.
    while (Date.now() - restarted < 3000) {
      const s = await client.stats();
      assert.deepEqual([s.inFlight, s.queued, s.expired], [1, 1, 0]);
      assert.equal(admitted, false);
      await new Promise((r) => setTimeout(r, 100));
    }
    await running.release();
    await waited;
    await waiting.release();
    const s = await client.stats();
    assert.deepEqual([s.inFlight, s.expired, s.released], [0, 0, 2]);
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

test("a release made right after submits reaches the authority after them", async () => {
  // AgenticDriver's own fairness test, as its host calls: five submits and the holder's
  // release with no pause between them, then each admitted run released at once and a new
  // arrival. A release that overtook the submits would give alice's a2 bob's turn.
  const server = await startServer("--total", "1", "--per-subject", "1", "--queue-total", "12");
  const client = new AdmissionClient(server.addr, { hostId: "h" });
  const scheduler = new AuthorityScheduler(client);
  try {
    for (let round = 0; round < 3; round++) {
      const holder = scheduler.submit(who("alice"));
      await holder.wait();
      const order: string[] = [];
      const admitted = new Map<string, Promise<void>>();
      const tickets = new Map<string, Ticket>();
      const enqueue = (name: string, subject: string) => {
        const t = scheduler.submit(who(subject));
        tickets.set(name, t);
        admitted.set(name, t.wait().then(() => void order.push(name)));
      };
      for (const [name, subject] of [["a1", "alice"], ["a2", "alice"], ["a3", "alice"], ["b1", "bob"], ["b2", "bob"]]) {
        enqueue(name, subject);
      }
      void holder.release();
      const expected = ["a1", "b1", "a2", "b2", "a3", "a4"];
      for (const name of expected) {
        await Promise.race([
          admitted.get(name),
          new Promise((_, fail) => setTimeout(() => fail(new Error(`${name} not admitted: ${order}`)), 5000)),
        ]);
        if (name === "a1") enqueue("a4", "alice");
        void tickets.get(name)!.release();
      }
      assert.deepEqual(order, expected, `round ${round}`);
    }
    await eventually("every slot free", async () => (await client.stats()).inFlight === 0);
  } finally {
    client.close();
    await server.stop();
  }
});

test("failure mode local admits on the replica's own cap while the authority is down, then goes back", async () => {
  const port = await freePort();
  const addr = `127.0.0.1:${port}`;
  const client = new AdmissionClient(addr, { hostId: "h", timeoutMs: 300 });
  const local = new AuthorityScheduler(client, { failureMode: "local", localMaxConcurrent: 1, localQueueDepth: 1 });
  const closed = new AuthorityScheduler(client);
  let server: Awaited<ReturnType<typeof startServer>> | undefined;
  try {
    // Nothing listens: the closed scheduler refuses, the local one admits one and queues one.
    await assert.rejects(closed.submit(who("alice")).wait(), (e: unknown) => {
      assert.ok(e instanceof SchedulerError);
      assert.deepEqual([e.code, e.reason], ["BUSY", "UNAVAILABLE"]);
      return true;
    });
    const first = local.submit(who("alice"));
    await first.wait();
    const second = local.submit(who("bob"));
    let secondIn = false;
    void second.wait().then(() => (secondIn = true));
    await eventually("bob to queue locally", async () => local.stats.queued === 0 && !secondIn);
    await assert.rejects(local.trySubmit(who("carol")).wait(), (e: unknown) => {
      assert.ok(e instanceof SchedulerError);
      assert.deepEqual([e.code, e.reason], ["BUSY", "UNAVAILABLE"]);
      return true;
    });
    assert.equal(secondIn, false, "the local cap is 1");
    await first.release();
    await eventually("bob admitted on the local cap", async () => secondIn);
    assert.deepEqual([local.localAdmitted, local.stats.active], [2, 1]);
    await second.release();
    // The authority answers again: the next ticket is its.
    server = await startServer("--listen", addr, "--total", "1");
    await eventually("the client to reach it", () => client.stats().then(() => true, () => false), 10_000);
    const back = local.submit(who("dave"));
    await back.wait();
    assert.equal((await client.stats()).inFlight, 1, "admitted by the authority");
    assert.equal(local.localAdmitted, 2);
    await back.release();
  } finally {
    client.close();
    await server?.stop();
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
    const alice = scheduler.trySubmit(who("alice", "acme"));
    await alice.wait();
    // Another subject of the same account on the same host: the account is full.
    const bob = scheduler.trySubmit(who("bob", "acme"));
    await assert.rejects(bob.wait(), (e: unknown) => e instanceof SchedulerError && e.code === "BUSY");
    // The same account id on another host is another account.
    const elsewhere = scheduler.trySubmit(who("bob", "acme", "h2"));
    await elsewhere.wait();
    // A run with no provider (retrieval admission) needs no account binding.
    const retrieval = scheduler.trySubmit({ hostId: "h", subject: "carol" });
    await retrieval.wait();
    await alice.release();
    const again = scheduler.trySubmit(who("bob", "acme"));
    await again.wait();
    for (const t of [elsewhere, retrieval, again]) await t.release();
    assert.deepEqual(scheduler.stats, { active: 0, queued: 0 });
  } finally {
    client.close();
    await server.stop();
  }
});

test("a run blocked on its account does not stall its subject's next run on another account", async () => {
  const server = await startServer("--total", "3", "--per-subject", "2", "--per-account", "1", "--queue-total", "8");
  const client = new AdmissionClient(server.addr, { hostId: "host" });
  const scheduler = new AuthorityScheduler(client, { errorClass: DriverError });
  const identity = { hostId: "host", subject: "alice", accountId: "shared", provider: "first" };
  try {
    const first = scheduler.submit(identity);
    await first.wait();
    // The same account through a provider alias and another subject: held by the account cap.
    const blocked = scheduler.submit({ ...identity, provider: "alias", subject: "bob" });
    await eventually(
      "the blocked run to queue",
      async () => (await client.stats()).queued === 1 && scheduler.stats.queued === 1,
    );
    // bob's next run, on another account, is not stuck behind it.
    const second = scheduler.submit({ ...identity, accountId: "other", subject: "bob" });
    const separateHost = scheduler.submit({ ...identity, hostId: "other-host" });
    await Promise.all([second.wait(), separateHost.wait()]);
    assert.deepEqual(scheduler.stats, { active: 3, queued: 1 });
    await first.release();
    await blocked.wait();
    for (const t of [first, second, separateHost, blocked]) await t.release();
    assert.deepEqual(scheduler.stats, { active: 0, queued: 0 });
  } finally {
    client.close();
    await server.stop();
  }
});

test("a provider run without an account is refused where accounts are capped, admitted where not", async () => {
  const capped = await startServer("--total", "10", "--per-account", "1");
  const client = new AdmissionClient(capped.addr, { hostId: "h" });
  try {
    const scheduler = new AuthorityScheduler(client, { errorClass: DriverError });
    const unbound = scheduler.submit({ hostId: "h", subject: "alice", provider: "unbound" });
    await assert.rejects(unbound.wait(), (e: unknown) => {
      assert.ok(e instanceof DriverError, "AgenticDriver's own error type");
      assert.deepEqual([e.code, e.retryable], ["ADMISSION_IDENTITY_REQUIRED", false]);
      return true;
    });
    const s = await client.stats();
    assert.deepEqual([s.accountsCapped, s.inFlight, s.queued, s.rejected], [true, 0, 0, 0], "nothing was submitted");
    // Now that the host is known to cap accounts, submit() itself refuses, as AgenticDriver's
    // own scheduler does (its test "account limits span provider aliases ..." expects it).
    assert.throws(
      () => scheduler.submit({ hostId: "h", subject: "alice", provider: "unbound" }),
      (e: unknown) => e instanceof DriverError && e.code === "ADMISSION_IDENTITY_REQUIRED",
    );
    // A bound run is submitted as usual.
    const bound = scheduler.submit({ hostId: "h", subject: "alice", provider: "p", accountId: "acct" });
    await bound.wait();
    await bound.release();
  } finally {
    client.close();
    await capped.stop();
  }
  const open = await startServer("--total", "10");
  const c2 = new AdmissionClient(open.addr, { hostId: "h" });
  try {
    const ticket = new AuthorityScheduler(c2).submit({ hostId: "h", subject: "alice", provider: "unbound" });
    await ticket.wait();
    await ticket.release();
  } finally {
    c2.close();
    await open.stop();
  }
});

test("submit and trySubmit refuse from wait(): BUSY, QUEUE_FULL, and trySubmit never queues", async () => {
  const server = await startServer("--total", "1", "--queue-total", "1");
  const client = new AdmissionClient(server.addr, { hostId: "h" });
  const scheduler = new AuthorityScheduler(client);
  try {
    const holder = scheduler.trySubmit(who("alice"));
    await holder.wait();
    const busy = scheduler.trySubmit(who("bob"));
    await assert.rejects(busy.wait(), (e: unknown) => {
      assert.ok(e instanceof SchedulerError);
      assert.deepEqual([e.code, e.retryable, e.reason], ["BUSY", true, "BUSY"]);
      return true;
    });
    busy.release(); // harmless after a refusal, and never an unhandled rejection
    assert.equal((await client.stats()).queued, 0, "trySubmit left nothing queued");
    const waiting = scheduler.submit(who("carol"));
    await eventually("carol to queue", async () => (await client.stats()).queued === 1);
    const refused = scheduler.submit(who("dave"));
    await assert.rejects(refused.wait(), (e: unknown) => {
      assert.ok(e instanceof SchedulerError);
      assert.deepEqual([e.code, e.retryable, e.retryAfterMs], ["QUEUE_FULL", true, 2000]);
      return true;
    });
    await refused.release();
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

test("a job worker given the drop-in keeps a job queued on BUSY and runs it once a slot is free", async () => {
  const server = await startServer("--total", "1");
  const client = new AdmissionClient(server.addr, { hostId: "h" });
  const identity = { hostId: "h", accountId: "acme", subject: "alice", provider: "anthropic" };
  try {
    const holder = new AuthorityScheduler(client).submit(who("holder"));
    await holder.wait();
    // Without AgenticDriver's error class its worker cannot tell BUSY from a failure.
    const plain = await dispatchJob(new AuthorityScheduler(client), identity, async () => {});
    assert.deepEqual(plain, { state: "failed", error: { code: "INTERNAL_ERROR", message: "The operation failed.", retryable: false } });
    // With it, BUSY keeps the job queued for the next poll.
    const scheduler = new AuthorityScheduler(client, { errorClass: DriverError });
    let ran = 0;
    assert.deepEqual(await dispatchJob(scheduler, identity, async () => void ran++), { state: "queued" });
    assert.equal(ran, 0);
    await holder.release();
    assert.deepEqual(await dispatchJob(scheduler, identity, async () => void ran++), { state: "done" });
    assert.equal(ran, 1);
    await eventually("the job's slot released", async () => (await client.stats()).inFlight === 0);
    assert.deepEqual(scheduler.stats, { active: 0, queued: 0 });
  } finally {
    client.close();
    await server.stop();
  }
});

test("a foreground run admitted through the drop-in: QUEUE_FULL and cancellation keep their codes", async () => {
  const server = await startServer("--total", "1", "--queue-total", "1");
  const client = new AdmissionClient(server.addr, { hostId: "h" });
  const scheduler = new AuthorityScheduler(client, { errorClass: DriverError });
  const identity = (subject: string) => ({ hostId: "h", accountId: "acme", subject, provider: "anthropic" });
  try {
    let finishWork = () => {};
    const work = new Promise<void>((resolve) => (finishWork = resolve));
    const first = foregroundRun(scheduler, identity("alice"), new AbortController().signal, () => work);
    await eventually("alice admitted", async () => (await client.stats()).inFlight === 1);
    const abort = new AbortController();
    const queued = foregroundRun(scheduler, identity("bob"), abort.signal, async () => {});
    await eventually("bob queued", async () => (await client.stats()).queued === 1);
    const full = await foregroundRun(scheduler, identity("carol"), new AbortController().signal, async () => {});
    assert.deepEqual(full.type === "run.failed" && [full.error.code, full.error.retryable], ["QUEUE_FULL", true]);
    // The job service aborts with its own DriverError: the ticket is withdrawn, the reason kept.
    abort.abort(new DriverError("CANCELLED", "The application cancelled this detached job."));
    const cancelled = await queued;
    assert.deepEqual(cancelled.type === "run.cancelled" && cancelled.error.message, "The application cancelled this detached job.");
    await eventually("bob's ticket withdrawn", async () => (await client.stats()).cancelled === 1);
    finishWork();
    assert.deepEqual(await first, { type: "run.completed" });
    await eventually("every slot free", async () => (await client.stats()).inFlight === 0);
  } finally {
    client.close();
    await server.stop();
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
    // The driver's real shape: its meter's snapshot, as it passes it before every step.
    const meter = new UsageMeter();
    const driverStep = (subject: string, runId: string, n: number) =>
      admission.authorize({ identity: who(subject), runId, model: "claude", step: n, usage: meter.snapshot() });
    assert.equal(await driverStep("alice", "r5", 1), "allow");
    meter.start();
    meter.add({ inputTokens: 400, outputTokens: 200 });
    assert.equal(await driverStep("alice", "r5", 2), "allow", "600 settled for step 1: 400 more fit");
    meter.start();
    meter.add({ inputTokens: 500, outputTokens: 100 });
    assert.equal(await driverStep("alice", "r5", 3), "deny", "600 more for step 2: the 1,000 budget is spent");
    // A step whose provider reported only part of its usage is settled as partial: the run's
    // usage becomes unknown, and this budget defers.
    const partial = new UsageMeter();
    assert.equal(
      await admission.authorize({ identity: who("deferred"), runId: "r6", model: "claude", step: 1, usage: partial.snapshot() }),
      "allow",
    );
    partial.start();
    partial.add({ inputTokens: 5 });
    assert.equal(
      await admission.authorize({ identity: who("deferred"), runId: "r6", model: "claude", step: 2, usage: partial.snapshot() }),
      "unknown",
    );
    // With requireCost, a step whose provider reported tokens but no cost is partial.
    const costly = new AuthorityResourceAdmission(client, { requestedOutputTokens: 400, requireCost: true });
    for (const [admission_, runId, expected] of [
      [admission, "r8", "allow"],
      [costly, "r9", "unknown"],
    ] as const) {
      const m = new UsageMeter();
      const ctx = { identity: who("deferred"), runId, model: "claude" };
      assert.equal(await admission_.authorize({ ...ctx, step: 1, usage: m.snapshot() }), "allow");
      m.start();
      m.add({ inputTokens: 10, outputTokens: 10 });
      assert.equal(await admission_.authorize({ ...ctx, step: 2, usage: m.snapshot() }), expected, runId);
    }
    // A run that finishes settles its last step: by finish(), or from the usage record the
    // driver hands its onUsage hook.
    assert.equal(await step("alice", "r3", 1), "allow");
    await admission.finish(who("alice"), "r3", { inputTokens: 10, outputTokens: 20 });
    const last = new UsageMeter();
    const r7 = { identity: who("alice"), runId: "r7", model: "claude" };
    assert.equal(await admission.authorize({ ...r7, step: 1, usage: last.snapshot() }), "allow");
    last.start();
    last.add({ inputTokens: 300, outputTokens: 300 });
    assert.equal(await admission.authorize({ ...r7, step: 2, usage: last.snapshot() }), "allow");
    last.start();
    last.add({ inputTokens: 200, outputTokens: 250 });
    await admission.settleRun({ runId: "r7", hostId: "h", subject: "alice", provider: "anthropic", ...last.snapshot() });
    // Step 1 settled 600 and the record 450 for step 2: 1,050 spent.
    assert.equal(await admission.authorize({ ...r7, step: 3, usage: last.snapshot() }), "deny");
    const s = await client.stats();
    assert.deepEqual([s.settled, s.authorizeAllowed, s.authorizeDenied, s.authorizeDeferred], [10, 12, 3, 3]);
  } finally {
    client.close();
    await server.stop();
  }
  // Unreachable: authorize throws (the host fails closed), the scheduler's wait rejects.
  const gone = new AdmissionClient(server.addr, { hostId: "h", timeoutMs: 2000 });
  try {
    const context = { identity: who("alice"), runId: "r4", model: "claude", step: 1 };
    await assert.rejects(new AuthorityResourceAdmission(gone).authorize(context), (e: unknown) => e instanceof AdmissionError);
    // The scheduler's wait rejects as BUSY (retry later), never admitting without the authority.
    await assert.rejects(new AuthorityScheduler(gone, { errorClass: DriverError }).submit(who("alice", "acme")).wait(), (e: unknown) => {
      assert.ok(e instanceof DriverError);
      assert.deepEqual([e.code, e.retryable, (e as unknown as { reason: string }).reason], ["BUSY", true, "UNAVAILABLE"]);
      return true;
    });
  } finally {
    gone.close();
  }
});

test("the drop-in on a closed client: releases and submits fail at once, no retry reopens it", async () => {
  const server = await startServer("--total", "2", "--drain-grace", "100ms");
  const client = new AdmissionClient(server.addr, { hostId: "h" });
  const observer = new AdmissionClient(server.addr, { hostId: "h" });
  const scheduler = new AuthorityScheduler(client);
  try {
    const running = scheduler.submit(who("alice"));
    await running.wait();
    client.close();
    // Its Release does not reopen the connection to retry: the ticket stays admitted.
    await running.release();
    assert.deepEqual(scheduler.stats, { active: 0, queued: 0 });
    const s = await observer.stats();
    assert.deepEqual([s.inFlight, s.released], [1, 0]);
    // A new run is refused with the closed client's own error, not a retryable BUSY.
    await assert.rejects(scheduler.submit(who("bob")).wait(), (e) => e instanceof ClientClosedError);
  } finally {
    observer.close();
    await server.stop();
  }
});
