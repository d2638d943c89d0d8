/** The client example the docs show, run as a reader runs it: again and again (more often than
 * its auth bucket allows attempts in a window), against a real
 * authority; and the error a reused run id gets says what happened. */

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { AdmissionClient, TicketEndedError } from "../index.js";
import { startServer } from "./server.js";

const example = join(dirname(fileURLToPath(import.meta.url)), "..", "examples", "quickstart.js");

test("the quickstart example runs again and again", async () => {
  const server = await startServer();
  try {
    for (const run of [1, 2, 3, 4, 5, 6, 7]) {
      const out = execFileSync(process.execPath, [example, server.addr], { encoding: "utf8", timeout: 60_000 });
      const lines = out.trimEnd().split("\n");
      assert.match(lines[0]!, /^admitted: ticket installation-one\./, out);
      assert.deepEqual(lines.slice(1, 3), ["step 1: allowed, settled 500 tokens", "released"], out);
      assert.deepEqual(lines.slice(3, 5), ["auth attempt: allowed=true remaining=4", "credential verified: bucket cleared"], out);
      assert.equal(lines[5], `installation-one: 0 running, ${run} admitted so far`, out);
    }
  } finally {
    await server.stop();
  }
});

test("a reused run id is told that its run already ended", async () => {
  const server = await startServer();
  const client = new AdmissionClient(server.addr, { hostId: "h" });
  try {
    const slot = await client.acquire("alice", { runId: "run-1" });
    await slot.release();
    await assert.rejects(client.acquire("alice", { runId: "run-1" }), (e: unknown) => {
      assert.ok(e instanceof TicketEndedError);
      assert.deepEqual([e.runId, e.state], ["run-1", "RELEASED"]);
      assert.match(e.message, /^runId run-1 already names ticket h\..*give each new run a new run id$/);
      return true;
    });
  } finally {
    client.close();
    await server.stop();
  }
});
