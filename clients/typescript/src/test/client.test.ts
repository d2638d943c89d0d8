/** The TypeScript wrapper against a real server process. */

import assert from "node:assert/strict";
import { writeFileSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { connect, createServer } from "node:net";
import { test } from "node:test";

import { Metadata, status as grpcStatus } from "@grpc/grpc-js";

import { AdmissionClient, AdmissionError, AdmissionRefusedError, ClientClosedError, OperatorClient, translate } from "../index.js";
import { LimitsSource } from "../gen/admission/v1/admission.js";
import { eventually, freePort, startServer } from "./server.js";

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

/** A loopback port that was free a moment ago. */
test("slots and waits carry on through a killed and restarted authority", async () => {
  // An authority on a data dir, SIGKILLed and started again on the same address: the holder
  // keeps its slot by renewing (the restart gives it one lease), the waiter's Wait stream is
  // reopened and keeps its place, and nobody is told the slot is lost.
  const addr = `127.0.0.1:${await freePort()}`;
  const dir = mkdtempSync(join(tmpdir(), "aa-ts-data-"));
  const flags = ["--listen", addr, "--data-dir", join(dir, "data"), "--total", "1",
    "--queue-total", "4", "--lease-ttl", "2s"];
  let server = await startServer(...flags);
  const client = new AdmissionClient(addr, { hostId: "h" });
  try {
    const holder = await client.acquire("alice", { runId: "holder" });
    let admitted = false;
    const waiter = client.acquire("bob", { runId: "waiter" }).then((s) => {
      admitted = true;
      return s;
    });
    await eventually("bob to queue", async () => (await client.stats()).queued === 1);
    await server.kill();
    server = await startServer(...flags);
    const restarted = Date.now();
    // Past the lease the restart gave: only the holder's renewals keep its slot.
    while (Date.now() - restarted < 3000) {
      const s = await client.stats();
      assert.deepEqual([s.inFlight, s.queued, s.expired], [1, 1, 0]);
      assert.equal(holder.lost, false);
      assert.equal(admitted, false);
      await new Promise((r) => setTimeout(r, 100));
    }
    await holder.release();
    const second = await waiter;
    assert.ok(second.grant > holder.grant, "admitted on its reopened Wait stream");
    await second.release();
    const s = await client.stats();
    assert.deepEqual([s.inFlight, s.expired, s.released], [0, 0, 2]);
  } finally {
    client.close();
    await server.stop();
  }
});

test("holders re-register and newcomers wait when Redis is emptied under two replicas", async () => {
  // A redis-server of this test's own, emptied by FLUSHALL while four runs hold the four slots
  // through replica A: their renewals re-register them (Reclaim), and newcomers through
  // replica B right after the loss wait for real capacity. Sampled every 50 ms from the
  // clients' own view, no more than four runs ever hold slots.
  const port = await freePort();
  const redis = spawn("redis-server", ["--bind", "127.0.0.1", "--port", String(port), "--save", "",
    "--appendonly", "no"], { stdio: "ignore" });
  const dir = mkdtempSync(join(tmpdir(), "aa-ts-loss-"));
  const config = join(dir, "replicas.yaml");
  writeFileSync(config, `store:\n  redis: { url: "redis://127.0.0.1:${port}/0" }\n` +
    "scheduling: { total: 4, per_subject: 4, lease_ttl: 900ms, queue: { total: 16 } }\n");
  await eventually("redis-server to listen", async () => {
    const s = connect(port, "127.0.0.1");
    const ok = await new Promise<boolean>((r) => { s.once("connect", () => r(true)); s.once("error", () => r(false)); });
    s.destroy();
    return ok;
  }, 10_000);
  const a = await startServer("--config", config);
  const b = await startServer("--config", config);
  const ca = new AdmissionClient(a.addr, { hostId: "h" });
  const cb = new AdmissionClient(b.addr, { hostId: "h" });
  const running = new Set<{ lost: boolean }>();
  let peak = 0;
  const sampler = setInterval(() => {
    peak = Math.max(peak, [...running].filter((s) => !s.lost).length);
  }, 50);
  try {
    const holders = await Promise.all([0, 1, 2, 3].map((i) => ca.acquire(`s${i}`, { runId: `holder-${i}` })));
    holders.forEach((h) => running.add(h));
    const flush = spawn("redis-cli", ["-p", String(port), "FLUSHALL"], { stdio: "ignore" });
    await once(flush, "exit");
    const newcomers = [0, 1, 2, 3].map((i) =>
      cb.acquire(`n${i}`, { runId: `newcomer-${i}` }).then((s) => {
        running.add(s);
        return s;
      }),
    );
    await eventually("the holders counted again", async () => (await cb.stats()).reclaimed === 4, 5000);
    // Past the learning window (a lease and a third): the slots are the holders' still.
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal(peak, 4);
    assert.ok(holders.every((h) => !h.lost && h.reclaims === 1));
    assert.deepEqual([(await cb.stats()).inFlight, (await cb.stats()).queued], [4, 4]);
    for (const h of holders) {
      running.delete(h);
      await h.release();
    }
    const admitted = await Promise.all(newcomers);
    assert.ok(peak <= 4, `${peak} runs held slots at once against a cap of 4`);
    for (const n of admitted) {
      running.delete(n);
      await n.release();
    }
    await eventually("no slot held", async () => (await ca.stats()).inFlight === 0, 2000);
    assert.ok((await ca.stats()).stateLosses + (await cb.stats()).stateLosses >= 1);
  } finally {
    clearInterval(sampler);
    ca.close();
    cb.close();
    await a.stop();
    await b.stop();
    redis.kill("SIGKILL");
    await once(redis, "exit");
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

/** A redis-server of the test's own on a free loopback port. */
async function startRedis(): Promise<{ port: number; pid: number; stop(): Promise<void> }> {
  const probe = createServer();
  await new Promise<void>((r) => probe.listen(0, "127.0.0.1", r));
  const port = (probe.address() as { port: number }).port;
  await new Promise<void>((r) => probe.close(() => r()));
  const child = spawn("redis-server", ["--bind", "127.0.0.1", "--port", String(port), "--save", "", "--appendonly", "no"], {
    stdio: "ignore",
  });
  await eventually("redis-server to listen", async () =>
    new Promise<boolean>((resolve) => {
      const s = connect(port, "127.0.0.1");
      s.on("connect", () => (s.destroy(), resolve(true)));
      s.on("error", () => resolve(false));
    }),
  );
  return {
    port,
    pid: child.pid!,
    async stop() {
      process.kill(child.pid!, "SIGCONT");
      child.kill("SIGKILL");
      if (child.exitCode === null) await once(child, "exit");
    },
  };
}

test("a Submit during a store stall is retried with its run id and takes one slot", async () => {
  const redis = await startRedis();
  const server = await startServer("--redis-url", `redis://127.0.0.1:${redis.port}/0`, "--total", "4");
  const client = new AdmissionClient(server.addr, { hostId: "h", timeoutMs: 15_000 });
  try {
    await (await client.acquire("alice", { runId: "warm-up" })).release();
    process.kill(redis.pid, "SIGSTOP");
    setTimeout(() => process.kill(redis.pid, "SIGCONT"), 2000);
    const slot = await client.acquire("alice", { runId: "during-stall" });
    assert.equal((await client.stats()).inFlight, 1, "one ticket for the run, however many tries");
    await slot.release();
    const s = await client.stats();
    assert.deepEqual([s.inFlight, s.admitted, s.released], [0, 2, 2]);
  } finally {
    client.close();
    await server.stop();
    await redis.stop();
  }
});

test("a Submit given up on is released by run once the store answers", async () => {
  const redis = await startRedis();
  const server = await startServer("--redis-url", `redis://127.0.0.1:${redis.port}/0`, "--total", "4");
  const client = new AdmissionClient(server.addr, { hostId: "h", timeoutMs: 1500 });
  try {
    await (await client.acquire("alice", { runId: "warm-up" })).release();
    process.kill(redis.pid, "SIGSTOP");
    try {
      await assert.rejects(client.acquire("alice", { runId: "gave-up" }), (e: unknown) => {
        assert.ok(e instanceof AdmissionError && e.retryable, String(e));
        return true;
      });
    } finally {
      process.kill(redis.pid, "SIGCONT");
    }
    await eventually("the given-up run's slot to be free", async () => (await client.stats()).inFlight === 0);
  } finally {
    client.close();
    await server.stop();
    await redis.stop();
  }
});

test("an operator raises a cap while a slot waits, and resets it", async () => {
  const server = await startServer("--total", "1", "--queue-total", "4");
  const client = new AdmissionClient(server.addr, { hostId: "h" });
  const op = new OperatorClient(server.addr);
  try {
    const first = await client.acquire("alice");
    const second = client.acquire("bob");
    await eventually("bob to queue", async () => (await client.stats()).queued === 1);
    const before = await op.getLimits("h");
    assert.deepEqual([before.source, before.limits?.total], [LimitsSource.LIMITS_SOURCE_FILE, 1]);
    const after = await op.updateLimits("h", { total: 2, queueHardTotal: 8 });
    assert.deepEqual(
      [after.source, after.revision, after.limits?.total, after.limits?.queue?.total, after.limits?.queue?.hardTotal],
      [LimitsSource.LIMITS_SOURCE_OPERATOR, before.revision + 1, 2, 4, 8],
    );
    const admitted = await second; // the raised cap admitted bob at once
    await assert.rejects(op.updateLimits("h", { total: 0 }), (e: AdmissionError) => {
      assert.equal(e.code, grpcStatus.INVALID_ARGUMENT);
      assert.match(e.message, /limits\.total/);
      return true;
    });
    await assert.rejects(op.resetLimits("h", before.revision), (e: AdmissionError) => e.code === grpcStatus.FAILED_PRECONDITION);
    const reset = await op.resetLimits("h");
    assert.deepEqual([reset.source, reset.limits?.total], [LimitsSource.LIMITS_SOURCE_FILE, 1]);
    await admitted.release();
    await first.release();
  } finally {
    op.close();
    client.close();
    await server.stop();
  }
});

test("a priority slot goes first and hears its place and wait estimate while queued", async () => {
  const server = await startServer("--total", "1", "--queue-total", "4");
  const client = new AdmissionClient(server.addr, { hostId: "h" });
  try {
    // A measured hold, so waiters get an estimate.
    await (await client.acquire("holder")).release();
    const holder = await client.acquire("holder");
    const seen: [number, number, string][] = [];
    const order: string[] = [];
    const low = client.acquire("batch", { priority: 5, onQueued: (p, eta, by) => seen.push([p, eta, by]) }).then((s) => {
      order.push("batch");
      return s;
    });
    await eventually("batch to queue", async () => (await client.stats()).queued === 1);
    const high = client.acquire("interactive", { priority: 1 }).then((s) => {
      order.push("interactive");
      return s;
    });
    await eventually("both to queue", async () => (await client.stats()).queued === 2);
    await eventually("batch to hear it moved back", async () => seen.some(([p]) => p === 1));
    assert.ok(seen[0][0] === 0 && seen[0][1] > 0 && seen[0][2] === "TOTAL", JSON.stringify(seen));
    // Moved back behind interactive while the host is full: still the full host that holds it
    // (TURN is only for a free slot that others take first).
    assert.ok(seen.some(([p, , by]) => p === 1 && by === "TOTAL"), "behind interactive, the host full");
    await holder.release();
    await (await high).release();
    await (await low).release();
    assert.deepEqual(order, ["interactive", "batch"]);
  } finally {
    client.close();
    await server.stop();
  }
});

test("an operator turns on shadow mode and weights", async () => {
  const server = await startServer("--total", "1");
  const client = new AdmissionClient(server.addr, { hostId: "h" });
  const op = new OperatorClient(server.addr);
  try {
    const after = await op.updateLimits("h", { mode: "shadow", weights: { alice: 4 }, priorityAgingMs: 60_000 });
    assert.deepEqual([after.limits?.mode, after.limits?.weights, after.limits?.priorityAgingMs], ["shadow", { alice: 4 }, 60_000]);
    const first = await client.acquire("alice");
    const second = await client.acquire("bob");
    assert.deepEqual([first.shadowReason, second.shadowReason], ["", "BUSY"]);
    const s = await client.stats();
    assert.deepEqual([s.inFlight, s.shadowBusy, s.mode], [2, 1, "shadow"]);
    await assert.rejects(op.updateLimits("h", { weights: { alice: 1001 } }), (e: AdmissionError) => {
      assert.match(e.message, /limits\.weights\.alice/);
      return true;
    });
    await first.release();
    await second.release();
  } finally {
    op.close();
    client.close();
    await server.stop();
  }
});

test("provider errors map to outcomes, and a 429 lowers an adaptive account cap", async () => {
  const { outcomeOf } = await import("../index.js");
  class RateLimitError extends Error {}
  assert.equal(outcomeOf(Object.assign(new Error("x"), { status: 429 })), "rate_limited");
  assert.equal(outcomeOf({ response: { status: 503 } }), "overloaded");
  assert.equal(outcomeOf(Object.assign(new Error("x"), { status: 400 })), "failed");
  assert.equal(outcomeOf(new RateLimitError("slow down")), "rate_limited");
  assert.equal(outcomeOf(new DOMException("timed out", "TimeoutError")), "overloaded");
  assert.equal(outcomeOf(new Error("wrapped", { cause: { statusCode: 429 } })), "rate_limited");
  assert.equal(outcomeOf(new TypeError("bad json")), "failed");

  const dir = mkdtempSync(join(tmpdir(), "adaptive-"));
  const config = join(dir, "adaptive.yaml");
  writeFileSync(
    config,
    "scheduling:\n  total: 10\n  per_subject: 10\n  accounts:\n    acct: { adaptive: { min: 1, max: 4, cooldown: 0s } }\n",
  );
  const server = await startServer("--config", config);
  const client = new AdmissionClient(server.addr, { hostId: "h" });
  try {
    await assert.rejects(
      client.withSlot(
        "alice",
        async () => {
          throw Object.assign(new Error("429 Too Many Requests"), { status: 429 });
        },
        { accountId: "acct" },
      ),
      /429/,
    );
    assert.equal(await client.withSlot("alice", async () => 7, { accountId: "acct" }), 7);
    const s = await client.stats();
    assert.deepEqual([s.outcomeRateLimited, s.outcomeOk, s.latencyCount], [1, 1, 2]);
    const row = s.accounts.find((a) => a.accountId === "acct");
    assert.deepEqual([row?.cap, row?.adaptive], [2, true]);
  } finally {
    client.close();
    await server.stop();
  }
});

test("a closed client fails every call at once and never reopens its connection", async () => {
  const server = await startServer("--total", "2", "--queue-total", "4", "--drain-grace", "100ms");
  const client = new AdmissionClient(server.addr, { hostId: "h" });
  const observer = new AdmissionClient(server.addr, { hostId: "h" });
  try {
    const slot = await client.acquire("alice", { runId: "held" });
    client.close();
    const closed = (e: unknown) => e instanceof ClientClosedError && e.code === grpcStatus.CANCELLED && /is closed/.test(e.message);
    await assert.rejects(client.stats(), closed);
    await assert.rejects(client.acquire("bob"), closed);
    await assert.rejects(client.releaseRun("held"), closed);
    await assert.rejects(client.checkAuthAttempt("approval", "carol"), closed);
    await assert.rejects(client.waitAdmitted(slot.ticketId, undefined), closed);
    assert.equal(new ClientClosedError("AdmissionClient").retryable, false);
    // The handle's release goes through the closed client: it settles and frees nothing (a
    // reopened connection would have released the ticket), so the lease is what frees it.
    await slot.release();
    const s = await observer.stats();
    assert.deepEqual([s.inFlight, s.released], [1, 0]);
    // Closing twice is harmless. (The ticket left admitted is why the server's drain grace is
    // short here.)
    client.close();
  } finally {
    observer.close();
    await server.stop();
  }
});

/** A TCP proxy to `upstream` that can hold what the server sends (the connections stay up)
 * until restored. */
async function holdingProxy(upstream: string): Promise<{ addr: string; hold(): void; restore(): void; close(): void }> {
  const [host, port] = [upstream.slice(0, upstream.lastIndexOf(":")), Number(upstream.slice(upstream.lastIndexOf(":") + 1))];
  let held = false;
  const waiting: Array<() => void> = [];
  const sockets = new Set<import("node:net").Socket>();
  const proxy = createServer((client) => {
    const server = connect(port, host);
    sockets.add(client).add(server);
    client.pipe(server);
    server.on("data", (chunk: Buffer) => {
      if (held) waiting.push(() => client.write(chunk));
      else client.write(chunk);
    });
    const end = () => {
      client.destroy();
      server.destroy();
    };
    client.on("close", end).on("error", end);
    server.on("close", end).on("error", end);
  });
  proxy.listen(0, "127.0.0.1");
  await once(proxy, "listening");
  return {
    addr: `127.0.0.1:${(proxy.address() as { port: number }).port}`,
    hold: () => {
      held = true;
    },
    restore: () => {
      held = false;
      for (const f of waiting.splice(0)) f();
    },
    close: () => {
      for (const s of sockets) s.destroy();
      proxy.close();
    },
  };
}

test("an admission heard after its lease lapsed waits again under its run id, and no run overlaps", async () => {
  const lease = 1500;
  const server = await startServer(
    "--total", "1", "--per-subject", "1", "--queue-total", "4", "--lease-ttl", `${lease}ms`, "--drain-grace", "100ms",
  );
  const proxy = await holdingProxy(server.addr);
  const direct = new AdmissionClient(server.addr, { hostId: "h" });
  const late = new AdmissionClient(proxy.addr, { hostId: "h" });
  let running = 0;
  let most = 0;
  const done: string[] = [];
  const run = async (name: string, ms: number) => {
    most = Math.max(most, ++running);
    await new Promise((r) => setTimeout(r, ms));
    running -= 1;
    done.push(name);
  };
  try {
    const holder = await direct.acquire("holder");
    const waiting = late.withSlot("late", () => run("late", 300), { runId: "late-run" });
    await eventually("the late run to queue", async () => (await direct.stats()).queued === 1);
    // What the authority sends it is held; the holder leaves and it is admitted unheard.
    proxy.hold();
    await holder.release();
    await eventually("its admission", async () => (await direct.stats()).admitted === 2);
    // Still running when the late admission is heard: starting on it would overlap.
    const third = direct.withSlot("third", () => run("third", 2000));
    // The hold outlasts the lease (the scenario, not a wait for a result).
    await new Promise((r) => setTimeout(r, lease * 1.8));
    proxy.restore();
    await Promise.all([waiting, third]);
    assert.deepEqual(done, ["third", "late"], "the third took the lapsed slot; the late run asked again");
    assert.equal(most, 1, "no two runs at once");
    assert.equal((await direct.stats()).reclaimed, 0, "a run that never started is not re-registered");
  } finally {
    direct.close();
    late.close();
    proxy.close();
    await server.stop();
  }
});

/** A TCP relay to `upstream` whose `cut(ms)` closes every connection through it and refuses
 * new ones for that long, as an unreachable authority does. */
async function cuttingRelay(upstream: string): Promise<{ addr: string; cut(ms: number): void; close(): void }> {
  const [host, port] = [upstream.slice(0, upstream.lastIndexOf(":")), Number(upstream.slice(upstream.lastIndexOf(":") + 1))];
  let downUntil = 0;
  const sockets = new Set<import("node:net").Socket>();
  const relay = createServer((client) => {
    if (Date.now() < downUntil) {
      client.destroy();
      return;
    }
    const server = connect(port, host);
    sockets.add(client).add(server);
    client.pipe(server);
    server.pipe(client);
    const end = () => {
      client.destroy();
      server.destroy();
      sockets.delete(client);
      sockets.delete(server);
    };
    client.on("close", end).on("error", end);
    server.on("close", end).on("error", end);
  });
  relay.listen(0, "127.0.0.1");
  await once(relay, "listening");
  return {
    addr: `127.0.0.1:${(relay.address() as { port: number }).port}`,
    cut: (ms: number) => {
      downUntil = Date.now() + ms;
      for (const s of sockets) s.destroy();
    },
    close: () => {
      for (const s of sockets) s.destroy();
      relay.close();
    },
  };
}

test("a renewal that fails is retried within the interval, not an interval later", async () => {
  // A 6 s lease (renewals every 2 s), the authority unreachable from just after the admission
  // to 4.4 s into it: a client that waits a whole interval after a failed Renew tries at 2 s
  // and 4 s (both cut) and next at 6 s, when the lease has run out (it would re-register).
  const server = await startServer("--total", "1", "--per-subject", "1", "--lease-ttl", "6s");
  const relay = await cuttingRelay(server.addr);
  const client = new AdmissionClient(relay.addr, { hostId: "h", timeoutMs: 5000 });
  const direct = new AdmissionClient(server.addr, { hostId: "h" });
  try {
    const slot = await client.acquire("alice");
    relay.cut(4400);
    await new Promise((r) => setTimeout(r, 7400));
    assert.equal(slot.lost, false);
    assert.equal(slot.reclaims, 0, "the lease never lapsed, so nothing was re-registered");
    assert.equal((await direct.stats()).expired, 0);
    await slot.release();
  } finally {
    client.close();
    direct.close();
    relay.close();
    await server.stop();
  }
});

test("a holder keeps its slot through a replica frozen or killed under it", async () => {
  // Two replicas on one Redis in one target, so the client's calls go to each in turn; one is
  // frozen (SIGSTOP: a Renew sent to it hangs, so each try may take only half an interval,
  // and the next goes to the other replica), then killed.
  const url = process.env.ADMISSION_TEST_REDIS_URL;
  assert.ok(url, "ADMISSION_TEST_REDIS_URL (scripts/test starts a redis-server)");
  const dir = mkdtempSync(join(tmpdir(), "aa-ts-kill-"));
  const config = join(dir, "replicas.yaml");
  writeFileSync(config, `store:\n  redis: { url: "${url}", prefix: "ts-kill-${process.pid}:" }\n` +
    "scheduling: { total: 1, per_subject: 1, lease_ttl: 3s, queue: { total: 4 } }\n");
  const a = await startServer("--config", config);
  const b = await startServer("--config", config);
  const client = new AdmissionClient(`ipv4:${a.addr},${b.addr}`, { hostId: "h", timeoutMs: 5000 });
  const survivor = new AdmissionClient(b.addr, { hostId: "h" });
  try {
    const slot = await client.acquire("alice");
    process.kill(a.pid, "SIGSTOP");
    await new Promise((r) => setTimeout(r, 6500)); // two leases with one replica frozen
    assert.equal(slot.lost, false);
    assert.equal(slot.reclaims, 0, "the lease never lapsed, so nothing was re-registered");
    await a.kill();
    await new Promise((r) => setTimeout(r, 3500)); // a lease more with it dead
    assert.equal(slot.lost, false);
    assert.equal(slot.reclaims, 0);
    const s = await survivor.stats();
    assert.deepEqual([s.inFlight, s.expired], [1, 0]);
    await slot.release();
    assert.equal((await survivor.stats()).inFlight, 0);
  } finally {
    client.close();
    survivor.close();
    await a.kill();
    await b.stop();
  }
});

test("a deadline that ran out on the server is DEADLINE_EXCEEDED, as one that ran out here", () => {
  // tonic answers a call whose grpc-timeout passed on the server CANCELLED "Timeout expired";
  // the client's own timer answers DEADLINE_EXCEEDED. Whichever wins, the call may have
  // been applied and is retried (or released by run) the same way.
  const fromServer = Object.assign(new Error("1 CANCELLED: Timeout expired"), {
    code: grpcStatus.CANCELLED,
    details: "Timeout expired",
    metadata: new Metadata(),
  });
  const e = translate(fromServer);
  assert.equal(e.code, grpcStatus.DEADLINE_EXCEEDED);
  assert.ok(e.retryable && e.mayHaveApplied);
  // A call cancelled for any other reason stays CANCELLED, not retried.
  const other = translate(Object.assign(new Error("1 CANCELLED: gone"), { code: grpcStatus.CANCELLED, details: "gone", metadata: new Metadata() }));
  assert.equal(other.code, grpcStatus.CANCELLED);
  assert.ok(!other.retryable);
});

test("a slot that has been left is never reclaimed by its renewer", async () => {
  // The renewer's Renew is under way when the authority (in memory) restarts and forgets the
  // ticket, and the run leaves its slot meanwhile (its Release finds nothing to free). Before,
  // the renewer then heard EXPIRED and re-registered the finished run (Reclaim): it held its
  // slot (and a serial key) until its lease ran out.
  const addr = `127.0.0.1:${await freePort()}`;
  const flags = ["--total", "2", "--lease-ttl", "600ms", "--listen", addr];
  const first = await startServer(...flags);
  let second: Awaited<ReturnType<typeof startServer>> | undefined;
  const client = new AdmissionClient(addr, { hostId: "h" });
  try {
    const slot = await client.acquire("alice", { runId: "run-1" });
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    const stub = client.stub as any;
    const renew = stub.renew;
    let reclaims = 0;
    const reclaim = stub.reclaim;
    stub.reclaim = function (...args: unknown[]) {
      reclaims += 1;
      return reclaim.apply(stub, args);
    };
    let entered!: () => void;
    const inFlight = new Promise<void>((r) => (entered = r));
    let go!: () => void;
    const proceed = new Promise<void>((r) => (go = r));
    let answered!: () => void;
    const heard = new Promise<void>((r) => (answered = r));
    stub.renew = function (req: unknown, md: unknown, opts: unknown, cb: (e: unknown, r: unknown) => void) {
      entered();
      void proceed.then(() =>
        renew.call(stub, req, md, opts, (e: unknown, r: unknown) => {
          cb(e, r);
          answered();
        }),
      );
      return {};
    };
    await inFlight;
    await first.kill();
    second = await startServer(...flags);
    await slot.release();
    go();
    await heard;
    // What the renewer does on the answer runs in the microtasks before this.
    await new Promise((r) => setImmediate(r));
    assert.equal(reclaims, 0, "no Reclaim once the slot was left");
    const s = await client.stats();
    assert.deepEqual([s.reclaimed, s.inFlight], [0, 0]);
  } finally {
    client.close();
    await first.stop();
    await second?.stop();
  }
});
