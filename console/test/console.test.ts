// The console in a real browser (Debian's chromium, driven by playwright-core) against the
// real binary: sign in, see why a waiter waits, release a holder, change a cap, unlock an
// identity, open and cancel the drain confirmation; and the host view with 10,000 tickets.
// Tickets and auth attempts are made by a gateway through the generated gRPC client.

import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { once } from "node:events";
import { mkdtempSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { after, before, describe, test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";
import { type Browser, type Page, chromium } from "playwright-core";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
/** With CONSOLE_SCREENSHOTS=DIR the tests save the pictures docs/operations.md shows. */
const shots = process.env.CONSOLE_SCREENSHOTS;

async function screenshot(page: Page, name: string): Promise<void> {
  if (shots !== undefined) await page.screenshot({ path: join(shots, `console-${name}.png`), fullPage: true });
}
const OPS = "ops-token-for-the-console-test";
const GW = "gateway-token-for-the-console-test";

// The generated Node stubs of the TypeScript client (built by its own tests before these).
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Any = any;
const grpc: Any = createRequire(join(repo, "clients/typescript/package.json"))("@grpc/grpc-js");
const gen: Any = await import(pathToFileURL(join(repo, "clients/typescript/dist/gen/admission/v1/admission.js")).href);

function sha(text: string): string {
  return createHash("sha256").update(text).digest("hex");
}

async function freePort(): Promise<number> {
  const s = createServer();
  s.listen(0, "127.0.0.1");
  await once(s, "listening");
  const port = (s.address() as { port: number }).port;
  s.close();
  await once(s, "close");
  return port;
}

interface Authority {
  grpc: string;
  console: string;
  stop(): Promise<void>;
}

async function startAuthority(yaml: string): Promise<Authority> {
  const dir = mkdtempSync(join(tmpdir(), "console-test-"));
  const admin = await freePort();
  const file = join(dir, "admission.yaml");
  writeFileSync(file, `admin_listen: 127.0.0.1:${admin}\n${yaml}`);
  const bin = process.env.ADMISSION_BIN ?? join(repo, "target/debug/admission-authority");
  const args = ["serve", "--listen", "127.0.0.1:0", "--drain-grace", "100ms", "--config", file];
  const child: ChildProcess = spawn(bin, args, {
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, RUST_LOG: "warn" },
  });
  const lines = createInterface({ input: child.stdout! });
  const [line] = (await once(lines, "line")) as [string];
  assert.match(line, /^listening on /);
  return {
    grpc: line.slice("listening on ".length).trim(),
    console: `http://127.0.0.1:${admin}/console`,
    async stop() {
      lines.close();
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill("SIGTERM");
      await once(child, "exit");
    },
  };
}

/** Unary calls of `service` ("AdmissionClient" or "OperatorClient") with `token` (or none). */
function stub(addr: string, service: string, token?: string) {
  const client = new gen[service](addr, grpc.credentials.createInsecure());
  const md = new grpc.Metadata();
  if (token !== undefined) md.set("authorization", `Bearer ${token}`);
  const call = (method: string, request: object): Promise<Any> =>
    new Promise((ok, fail) => client[method](request, md, (err: Error | null, res: Any) => (err ? fail(err) : ok(res))));
  return { call, close: () => client.close() };
}

/** An operator's calls over gRPC (another operator, or grpcurl, acting beside the page). */
async function operatorCall(addr: string, method: string, request: object): Promise<Any> {
  const op = stub(addr, "OperatorClient", OPS);
  try {
    return await op.call(method, request);
  } finally {
    op.close();
  }
}

/** A gateway's unary calls, with `token` (or none). */
function gateway(addr: string, token?: string) {
  const { call, close } = stub(addr, "AdmissionClient", token);
  return {
    submit: (hostId: string, subject: string, runId: string, mode = gen.SubmitMode.SUBMIT_MODE_QUEUE, instanceId = "gw-test") =>
      call("submit", gen.SubmitRequest.fromPartial({ hostId, subject, runId, instanceId, mode })),
    authorize: (hostId: string, runId: string, step: number, subject: string) =>
      call("authorize", gen.AuthorizeRequest.fromPartial({ hostId, runId, step, subject, requestedOutputTokens: 100 })),
    attempt: (endpoint: string, identity: string, peek = false) =>
      call("checkAuthAttempt", gen.AuthAttemptRequest.fromPartial({ endpoint, identity, peek })),
    releaseRun: (hostId: string, runId: string) => call("release", gen.ReleaseRequest.fromPartial({ hostId, runId })),
    submitKeyed: (hostId: string, subject: string, runId: string, key: string, keyPolicy: number, supersedeRunning = false) =>
      call("submit", gen.SubmitRequest.fromPartial({ hostId, subject, runId, instanceId: "gw-test", key, keyPolicy, supersedeRunning })),
    close,
  };
}

async function launch(): Promise<Browser> {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    // As root (the test machines) Chromium's sandbox cannot start.
    args: ["--no-sandbox", "--disable-dev-shm-usage"],
  });
}

/** What `read` gives, polled until `want` matches it or the deadline passes. */
async function poll(what: string, read: () => Promise<string>, want: RegExp, deadlineMs: number): Promise<string> {
  const end = Date.now() + deadlineMs;
  for (;;) {
    const text = await read();
    if (want.test(text)) return text;
    if (Date.now() > end) throw new Error(`${what}: wanted ${want}, the page shows ${JSON.stringify(text)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The page's text at `selector`, polled until `want` matches. */
function until(page: Page, selector: string, want: RegExp, deadlineMs = 10_000): Promise<string> {
  const text = async () => (await page.locator(selector).first().textContent({ timeout: 1000 }).catch(() => null)) ?? "";
  return poll(selector, text, want, deadlineMs);
}

/** The value of the input at `selector`, polled until `want` matches. */
function untilValue(page: Page, selector: string, want: RegExp, deadlineMs = 10_000): Promise<string> {
  return poll(selector, () => page.inputValue(selector), want, deadlineMs);
}

async function signIn(page: Page, token: string): Promise<void> {
  await page.fill("#token", token);
  await page.click("#sign-in");
}

describe("the console with operator credentials", () => {
  let authority: Authority;
  let browser: Browser;
  let page: Page;
  const problems: string[] = [];

  before(async () => {
    authority = await startAuthority(`credentials:
  - { name: gw, role: gateway, host_ids: [shop], token_sha256: "${sha(GW)}" }
  - { name: ops, role: operator, token_sha256: "${sha(OPS)}" }
scheduling: { total: 1, per_subject: 1, queue: { total: 10 }, lease_ttl: 60s }
auth:
  buckets:
    login: { max_attempts: 2, window: 60s, lockout: 300s }
resources:
  reservation_ttl: 50ms
http_admission:
  policies:
    - { name: chat, host_id: shop, subject: { header: x-tenant }, max_wait: 20s, key: { header: x-conversation-id }, key_policy: serial }
    - { name: completions, host_id: shop, subject: { header: x-tenant }, account: { body: model }, tokens: openai }
`);
    browser = await launch();
    page = await browser.newPage();
    // A script or style the policy blocked, or a script error, shows here.
    page.on("console", (m) => {
      if (m.type() === "error") problems.push(m.text());
    });
    page.on("pageerror", (e) => problems.push(String(e)));
  });

  after(async () => {
    await browser?.close();
    await authority?.stop();
  });

  test("the page carries a policy that allows only its own assets", async () => {
    const r = await fetch(authority.console);
    assert.equal(r.status, 200);
    const csp = r.headers.get("content-security-policy") ?? "";
    assert.match(csp, /default-src 'none'/);
    assert.match(csp, /script-src 'self'/);
    assert.match(csp, /connect-src 'self'/);
    assert.doesNotMatch(csp, /unsafe-inline|https?:/);
    assert.equal(r.headers.get("set-cookie"), null);
  });

  test("a wrong token, a gateway token and no token are refused on the page", async () => {
    await page.goto(authority.console);
    for (const [token, why] of [
      ["not-a-token", /Refused: .*(credential|token)/i],
      [GW, /Refused: .*operator credential/i],
      ["", /Refused/],
    ] as const) {
      await signIn(page, token);
      await until(page, "#login-error", why);
      assert.equal(await page.isVisible("#app"), false);
    }
  });

  test("signed in, a queued waiter shows its place and what holds it; releasing the holder admits it", async () => {
    const gw = gateway(authority.grpc, GW);
    const held = await gw.submit("shop", "alice", "run-alice");
    assert.equal(held.state, gen.TicketState.TICKET_STATE_ADMITTED);
    const waiting = await gw.submit("shop", "bob", "run-bob");
    assert.equal(waiting.state, gen.TicketState.TICKET_STATE_QUEUED);

    await signIn(page, OPS);
    await until(page, '#hosts tr[data-host="shop"]', /shop\s*1 \/ 1\s*1 \/ 10/);
    assert.equal(await page.evaluate(() => sessionStorage.getItem("admission-console-token")), OPS);
    assert.equal(await page.evaluate(() => document.cookie), "");

    await screenshot(page, "hosts");
    await page.click('#hosts a[href="#/host/shop"]');
    const queued = `#queue tr[data-ticket="${waiting.ticketId}"]`;
    const row = await until(page, queued, /run-bob/);
    assert.match(row, /^1/, "its place: first in line");
    assert.match(row, /host total cap/);
    // No slot was freed on the host yet: its estimate says it has no basis, not "1 ms".
    assert.match(row, /no basis: no slot freed yet/);
    await until(page, `#holders tr[data-ticket="${held.ticketId}"]`, /run-alice.*admitted/);
    await screenshot(page, "host");

    // Release asks first, naming the run; Cancel releases nothing.
    await page.click(`#holders tr[data-ticket="${held.ticketId}"] button.release`);
    await until(page, "#confirm-text", /Release run run-alice \(ticket .*, subject alice\)\?/);
    await page.click("#confirm-no");
    await until(page, `#holders tr[data-ticket="${held.ticketId}"]`, /run-alice.*admitted/);
    await page.click(`#holders tr[data-ticket="${held.ticketId}"] button.release`);
    await page.click("#confirm-yes");
    await until(page, "#holders-result", /Released .* \(run run-alice\); it was admitted/);
    await until(page, `#holders tr[data-ticket="${waiting.ticketId}"]`, /run-bob.*admitted/);
    await until(page, "#queue", /Nobody waits/);
    gw.close();
  });

  test("Envoy's requests are counted per policy beside the holders", async () => {
    // Tickets of the external processor carry their policy as their instance (envoy:<policy>).
    const gw = gateway(authority.grpc, GW);
    const queue = gen.SubmitMode.SUBMIT_MODE_QUEUE;
    await gw.submit("shop", "erin", "run-envoy-1", queue, "envoy:chat");
    await gw.submit("shop", "fay", "run-envoy-2", queue, "envoy:chat");
    // Both of them, holding or waiting (the policy is listed before any request, with 0 and 0).
    await until(page, '#envoy-policies li[data-policy="chat"]', /Envoy policy chat: (0 holding, 2 waiting|1 holding, 1 waiting|2 holding, 0 waiting)/);
    const line = await page.textContent('#envoy-policies li[data-policy="chat"]');
    const [holding, waiting] = [...line!.matchAll(/(\d+) (holding|waiting)/g)].map((m) => Number(m[1]));
    assert.equal(holding + waiting, 2, line!);
    assert.match(line!, /subject from header x-tenant · max wait 20\.0 s · no token reservation · key from header x-conversation-id \(serial\)/);
    // A policy with no request in flight is listed too, with its settings.
    await until(
      page,
      '#envoy-policies li[data-policy="completions"]',
      /Envoy policy completions: 0 holding, 0 waiting · subject from header x-tenant · account from body model · max wait .* · tokens: openai \(default max tokens \d+\)/,
    );
    await gw.releaseRun("shop", "run-envoy-1");
    await gw.releaseRun("shop", "run-envoy-2");
    gw.close();
  });

  test("keys: each waiter shows its key, and one waiting behind its key's earlier ticket says so", async () => {
    // The host is full (bob holds its one slot): the key's first ticket waits for the total,
    // the second for its key.
    const gw = gateway(authority.grpc, GW);
    const first = await gw.submitKeyed("shop", "gina", "run-key-1", "conv-9", gen.KeyPolicy.KEY_POLICY_SERIAL);
    const second = await gw.submitKeyed("shop", "gina", "run-key-2", "conv-9", gen.KeyPolicy.KEY_POLICY_SERIAL);
    assert.equal(second.state, gen.TicketState.TICKET_STATE_QUEUED);
    await until(page, `#queue tr[data-ticket="${first.ticketId}"]`, /conv-9 \(serial\)host total cap/);
    // It names the ticket its key waits behind.
    await until(page, `#queue tr[data-ticket="${second.ticketId}"]`, /conv-9 \(serial\)its key: ticket \S+ \(run run-key-1, queued\) is ahead/);
    await gw.releaseRun("shop", "run-key-1");
    await gw.releaseRun("shop", "run-key-2");

    // The host's totals count the superseded and those refused for a busy key.
    await gw.submitKeyed("shop", "gina", "run-key-3", "conv-10", gen.KeyPolicy.KEY_POLICY_SERIAL_KEEP_NEWEST);
    await gw.submitKeyed("shop", "gina", "run-key-4", "conv-10", gen.KeyPolicy.KEY_POLICY_SERIAL_KEEP_NEWEST);
    await gw.submitKeyed("shop", "gina", "run-key-5", "conv-11", gen.KeyPolicy.KEY_POLICY_REJECT_NEW);
    await assert.rejects(gw.submitKeyed("shop", "gina", "run-key-6", "conv-11", gen.KeyPolicy.KEY_POLICY_REJECT_NEW), /KEY_BUSY/);
    await until(page, "#caps .summary", /refused \d+ \(1 for a busy key\) · shed \d+ · expired \d+ · superseded 1/);
    for (const run of ["run-key-4", "run-key-5"]) await gw.releaseRun("shop", run);
    gw.close();
  });

  test("the limits are a form: a changed cap is applied and moves the revision", async () => {
    const before = await until(page, "#limits-revision", /revision \d+/);
    const revision = Number(/\d+/.exec(before)![0]);
    assert.equal(await page.inputValue("#limit-total"), "1");
    // Durations as the file writes them.
    assert.match(await page.inputValue("#limit-lease_ttl_ms"), /^\d+(ms|s|m|h)$/);
    await page.fill("#limit-total", "3");
    // A subject's cap as a row.
    await page.click('button[data-add="subjects"]');
    await page.fill('[data-map="subjects"] tr:last-child .map-key', "vip");
    await page.fill('[data-map="subjects"] tr:last-child .map-value', "2");
    await page.click("#limits-apply");
    await until(page, "#limits-result", new RegExp(`Applied: now revision ${revision + 1}`));
    await until(page, "#limits-revision", new RegExp(`revision ${revision + 1}\\b`));
    await until(page, '#caps tr[data-cap="total"]', /1 \/ 3/);
    const read = await operatorCall(authority.grpc, "getLimits", { hostId: "shop" });
    assert.equal(read.limits.total, 3);
    assert.deepEqual(read.limits.subjects, { vip: 2 });
  });

  test("a bad value is refused beside its field, and changes nothing", async () => {
    const before = Number(/\d+/.exec(await until(page, "#limits-revision", /revision \d+/))![0]);
    // The server's own validation: a lease of 5 ms is below 10 ms.
    await page.fill("#limit-lease_ttl_ms", "5ms");
    await page.fill("#limit-queue-hard_total", "1");
    await page.click("#limits-apply");
    await until(page, "#limits-result", /Not applied: the authority refused 2 fields, marked beside them/);
    await until(page, '[data-error="lease_ttl_ms"]', /./);
    await until(page, '[data-error="queue.hard_total"]', /./);
    // One the console cannot read is named before anything is sent.
    await page.fill("#limit-lease_ttl_ms", "soon");
    await page.click("#limits-apply");
    await until(page, '[data-error="lease_ttl_ms"]', /"soon" is not a duration/);
    const read = await operatorCall(authority.grpc, "getLimits", { hostId: "shop" });
    assert.equal(Number(read.revision), before);
    await page.click("#limits-reload");
    await untilValue(page, "#limit-queue-hard_total", /^(?!1$)\d+$/);
  });

  test("a stale editor is refused, naming the revision it read, and reloaded", async () => {
    const before = Number(/\d+/.exec(await until(page, "#limits-revision", /revision \d+/))![0]);
    const current = await operatorCall(authority.grpc, "getLimits", { hostId: "shop" });
    // Another operator changes the limits behind the page's back.
    const req = gen.SetLimitsRequest.fromPartial({ hostId: "shop", limits: { ...current.limits, total: 4 } });
    await operatorCall(authority.grpc, "setLimits", req);
    await page.fill("#limit-total", "5");
    await page.click("#limits-apply");
    await until(page, "#limits-result", new RegExp(`Not applied: the limits changed since you read them at revision ${before}`));
    await untilValue(page, "#limit-total", /^4$/);
  });

  test("the JSON view takes the file's spelling", async () => {
    await page.check("#limits-as-json");
    assert.match(await page.inputValue("#limits-json"), /"total": 4/);
    const file = {
      total: 2,
      per_subject: 1,
      queue: { total: 10, per_subject: 0, hard_total: 10 },
      overflow_policy: "reject",
      lease_ttl: "1h",
      retention: "10m",
      max_retained: 1000,
      priority_aging: "0",
    };
    await page.fill("#limits-json", JSON.stringify(file, null, 2));
    await page.click("#limits-apply");
    await until(page, "#limits-result", /Applied: now revision \d+/);
    const read = await operatorCall(authority.grpc, "getLimits", { hostId: "shop" });
    assert.equal(read.limits.total, 2);
    assert.equal(Number(read.limits.leaseTtlMs), 3_600_000);
    await page.uncheck("#limits-as-json");
    await untilValue(page, "#limit-lease_ttl_ms", /^1h$/);
  });

  test("an uncertain reservation is resolved from the page", async () => {
    const gw = gateway(authority.grpc, GW);
    const r = await gw.authorize("shop", "run-erin", 1, "erin");
    assert.equal(r.decision, gen.Decision.DECISION_ALLOW);
    gw.close();
    // Unsettled past resources.reservation_ttl (50 ms): uncertain, with its two resolutions.
    const row = '#reservations tr[data-reservation="run-erin/1"]';
    await until(page, row, /run-erin.*uncertain/);
    await page.click(`${row} button:has-text("released")`);
    await until(page, "#reservations-result", /Resolved run-erin step 1 as released/);
    await until(page, "#reservations", /No open reservation/);
  });

  test("unlocking a locked-out identity", async () => {
    const gw = gateway(authority.grpc, GW);
    for (let i = 0; i < 3; i++) await gw.attempt("login", "mallory@example.com");
    assert.equal((await gw.attempt("login", "mallory@example.com", true)).allowed, false);
    await page.fill("#unlock-endpoint", "login");
    await page.fill("#unlock-identity", "mallory@example.com");
    await page.click("#unlock-form button");
    await until(page, "#unlock-result", /Unlocked: mallory@example.com was locked out of login/);
    assert.equal((await gw.attempt("login", "mallory@example.com", true)).allowed, true);
    gw.close();
  });

  test("Reset asks first, then returns the host to the file's limits", async () => {
    const before = Number(/\d+/.exec(await until(page, "#limits-revision", /revision \d+/))![0]);
    await until(page, "#limits-info", /set by an operator/);
    await page.click("#limits-reset");
    await until(page, "#confirm-text", /Return this host to the configured limits/);
    await page.click("#confirm-yes");
    await until(page, "#limits-result", new RegExp(`Reset to the file's limits: now revision ${before + 1}`));
    await until(page, "#limits-info", /from the configuration \(file, flags, built-in defaults\)/);
    await untilValue(page, "#limit-total", /^1$/);
  });

  test("a mistyped host's page says there is no such host, and makes none", async () => {
    await until(page, "#limits-result", /Reset to the file's limits/);
    await page.evaluate(() => (location.hash = "#/host/shopp"));
    await until(page, "#no-host-text", /The authority has no host named “shopp”/);
    assert.equal(await page.isVisible("#host-view"), false);
    const hosts = await operatorCall(authority.grpc, "listHosts", {});
    assert.ok(hosts.hostIds.includes("shop") && !hosts.hostIds.includes("shopp"), String(hosts.hostIds));
    // What an action on a host said stays with that visit: back on shop, Reset's message is gone.
    await page.evaluate(() => (location.hash = "#/host/shop"));
    await page.waitForSelector("#host-view", { state: "visible" });
    assert.equal(await page.textContent("#limits-result"), "");
  });

  test("tickets are found by run, subject or state, sorted by a column, with clock times on hover", async () => {
    const gw = gateway(authority.grpc, GW);
    const one = await gw.submit("shop", "fiona", "run-find-1");
    const two = await gw.submit("shop", "gus", "run-find-2");
    assert.equal(two.state, gen.TicketState.TICKET_STATE_QUEUED);
    await until(page, `#queue tr[data-ticket="${two.ticketId}"]`, /run-find-2/);

    await page.fill("#filter-text", "FIONA");
    await page.waitForFunction(() => document.querySelectorAll("#queue tbody tr").length === 1, undefined, { timeout: 10_000 });
    await until(page, `#queue tr[data-ticket="${one.ticketId}"]`, /run-find-1/);
    await until(page, "#holders", /No holder matches the filter/);
    await page.fill("#filter-text", "");
    await page.selectOption("#filter-state", "admitted");
    await until(page, "#queue", /No waiter matches the filter/);
    await page.selectOption("#filter-state", "");

    // By run, then the other way.
    await until(page, `#queue tr[data-ticket="${two.ticketId}"]`, /run-find-2/);
    await page.click('#queue th button[data-sort="run"]');
    await until(page, '#queue th[aria-sort="ascending"]', /run/);
    await page.click('#queue th button[data-sort="run"]');
    await until(page, '#queue th[aria-sort="descending"]', /run/);
    const runs = (await page.locator("#queue tbody tr td:nth-child(3)").allTextContents()).filter((r) => r.startsWith("run-find"));
    assert.deepEqual(runs, ["run-find-2", "run-find-1"]);
    // When it entered its state, as a clock time.
    const title = await page.getAttribute(`#queue tr[data-ticket="${one.ticketId}"] td:nth-child(7)`, "title");
    assert.match(title ?? "", /^queued at \d{1,2}:\d\d:\d\d/);

    await gw.releaseRun("shop", "run-find-1");
    await gw.releaseRun("shop", "run-find-2");
    gw.close();
  });

  test("recently ended tickets are listed with how they ended, and found by state and run", async () => {
    const gw = gateway(authority.grpc, GW);
    // A key that refuses a second ticket while its first lives; the first is then withdrawn
    // or released; a keep-newest key's waiter is superseded by a newer one.
    const first = await gw.submitKeyed("shop", "hana", "run-end-1", "end-key", gen.KeyPolicy.KEY_POLICY_REJECT_NEW);
    await assert.rejects(gw.submitKeyed("shop", "hana", "run-end-2", "end-key", gen.KeyPolicy.KEY_POLICY_REJECT_NEW), /KEY_BUSY/);
    await gw.releaseRun("shop", "run-end-1");
    await gw.submitKeyed("shop", "ivan", "run-end-3", "end-conv", gen.KeyPolicy.KEY_POLICY_SERIAL_KEEP_NEWEST);
    await gw.submitKeyed("shop", "ivan", "run-end-4", "end-conv", gen.KeyPolicy.KEY_POLICY_SERIAL_KEEP_NEWEST);
    await gw.submitKeyed("shop", "ivan", "run-end-5", "end-conv", gen.KeyPolicy.KEY_POLICY_SERIAL_KEEP_NEWEST);

    await page.fill("#filter-text", "run-end");
    await page.selectOption("#filter-state", "refused");
    // Only the refusal passes the filter (once the page has refreshed with it).
    await page.waitForFunction(() => document.querySelectorAll("#ended tbody tr").length === 1, undefined, { timeout: 10_000 });
    const refused = await until(page, '#ended tr[data-state="refused"]', /run-end-2/);
    assert.match(refused, /hana.*end-key.*refused KEY_BUSY/);
    await until(page, "#holders", /No holder matches the filter/);

    await page.selectOption("#filter-state", "superseded");
    const superseded = await until(page, '#ended tr[data-state="superseded"]', /run-end-4/);
    assert.match(superseded, /superseded by run run-end-5/, "who superseded it, by its run");

    await page.selectOption("#filter-state", "");
    await page.fill("#filter-text", "run-end-1");
    const ended = await until(page, `#ended tr[data-ended="${first.ticketId}"]`, /run-end-1/);
    assert.match(ended, first.state === gen.TicketState.TICKET_STATE_ADMITTED ? /released/ : /cancelled/);
    const title = await page.getAttribute(`#ended tr[data-ended="${first.ticketId}"] td:first-child`, "title");
    assert.match(title ?? "", /ago$/);
    // Sorted by run, newest-first order aside.
    await page.fill("#filter-text", "run-end");
    await page.click('#ended th button[data-sort="run"]');
    await until(page, '#ended th[aria-sort="ascending"]', /run/);
    const runs = await page.locator("#ended tbody tr td:nth-child(2)").allTextContents();
    assert.deepEqual(runs, [...runs].sort());

    await page.fill("#filter-text", "");
    await gw.releaseRun("shop", "run-end-3");
    await gw.releaseRun("shop", "run-end-5");
    gw.close();
  });

  test("the drain confirmation says it cannot be undone, and Cancel drains nothing", async () => {
    await page.click("#drain");
    await until(page, "#confirm-text", /cannot be undone/);
    assert.equal(await page.isVisible("#confirm"), true);
    await screenshot(page, "drain");
    await page.click("#confirm-no");
    assert.equal(await page.isVisible("#confirm"), false);
    // Still admitting: with the host's one slot free a gateway's TRY Submit is admitted, not
    // refused DRAINING.
    const gw = gateway(authority.grpc, GW);
    await gw.releaseRun("shop", "run-bob");
    const r = await gw.submit("shop", "carol", "run-carol", gen.SubmitMode.SUBMIT_MODE_TRY);
    assert.equal(r.state, gen.TicketState.TICKET_STATE_ADMITTED);
    assert.equal(await page.isVisible("#banner-drain"), false);

    // Drained from elsewhere (SIGTERM, grpcurl): the page says so within a refresh.
    await operatorCall(authority.grpc, "drain", {});
    await until(page, "#banner-drain", /draining: it admits nothing new/);
    await assert.rejects(gw.submit("shop", "dave", "run-dave", gen.SubmitMode.SUBMIT_MODE_TRY), /DRAINING|draining/);
    gw.close();
  });

  test("nothing was blocked by the page's policy and no script failed", () => {
    assert.deepEqual(problems, []);
  });
});

describe("the console with 10,000 tickets on a host", () => {
  let authority: Authority;
  let browser: Browser;

  before(async () => {
    // An hour's worth of buckets (360) in 7.2 s: 20 ms buckets.
    authority = await startAuthority(
      "scheduling: { total: 1000, per_subject: 1000, queue: { total: 9000 }, lease_ttl: 10m }\n" +
        "hosts: { solo: { scheduling: { queue: { total: 0 } } } }\n" +
        "history: { bucket: 20ms, keep: 7200ms }\n",
    );
    browser = await launch();
  });

  after(async () => {
    await browser?.close();
    await authority?.stop();
  });

  test("the host view renders, and the figure is reported", async () => {
    const gw = gateway(authority.grpc);
    const runs = Array.from({ length: 10_000 }, (_, i) => i);
    for (let at = 0; at < runs.length; at += 500) {
      await Promise.all(runs.slice(at, at + 500).map((i) => gw.submit("big", `subject-${i % 40}`, `run-${i}`)));
    }
    await gw.submit("solo", "alice", "run-solo");
    gw.close();

    const page = await browser.newPage();
    await page.goto(authority.console);
    // No credentials are configured: the empty token is the open server's, and the page says so.
    await until(page, "#login .hint", /no credentials configured, an empty token signs in/);
    await signIn(page, "");
    await until(page, '#hosts tr[data-host="big"]', /1000 \/ 1000\s*9000 \/ 9000/);
    // A host without a queue says so (a queue bound of 0 is no queue, not an unbounded one).
    const solo = await until(page, '#hosts tr[data-host="solo"]', /solo\s*1 \/ 1000/);
    assert.match(solo, /no queue/);
    assert.doesNotMatch(solo, /∞/);
    // The hour is full before the page is timed (a bucket the busy sampler missed is one less
    // in it, its neighbour longer).
    await poll(
      "360 buckets of history",
      async () => {
        const op = stub(authority.grpc, "OperatorClient");
        try {
          return String((await op.call("getHostHistory", { hostId: "big" })).buckets.length);
        } finally {
          op.close();
        }
      },
      /^(3[3-5]\d|360)$/,
      20_000,
    );
    const start = Date.now();
    await page.evaluate(() => (location.hash = "#/host/big"));
    await until(page, "#queue-pager", /page 1 of 180 \(9000\)/);
    await until(page, "#holder-pager", /page 1 of 20 \(1000\)/);
    // (A bucket the sampler missed while 10,000 tickets kept it busy is one less in the hour.)
    await until(page, "#history-summary", /^(3[0-5]\d|360) of 360 buckets of 20 ms/);
    const ms = Date.now() - start;
    console.log(`console: host view with 10,000 live tickets and 360 buckets of history rendered in ${ms} ms`);
    assert.equal(await page.locator("#history canvas").count() >= 4, true, "four charts drawn");
    // The first page of the queue is in dispatch order, with places; the host is full and no
    // waiter's own subject cap binds, so every one of them waits for the host's total cap.
    assert.match(await until(page, "#queue tbody tr", /^1/), /host total cap/);
    const reasons = await page.locator("#queue tbody tr").allTextContents();
    assert.equal(reasons.length, 50);
    assert.deepEqual(
      reasons.filter((r) => !/host total cap/.test(r)),
      [],
      "every waiter of a full host not held by its own cap says host total cap",
    );
    await page.click("#queue-pager button:last-child");
    await until(page, "#queue-pager", /page 2 of 180/);
  });
});

describe("the console's last hour", () => {
  let authority: Authority;
  let browser: Browser;

  before(async () => {
    authority = await startAuthority(
      "history: { bucket: 250ms, keep: 30s }\n" +
        "scheduling: { total: 1, per_subject: 1, queue: { total: 1 }, lease_ttl: 60s }\n",
    );
    browser = await launch();
  });

  after(async () => {
    await browser?.close();
    await authority?.stop();
  });

  test("a burst of admissions and refusals appears in its buckets, charted and as a table", async () => {
    const gw = gateway(authority.grpc);
    const holder = await gw.submit("burst", "alice", "run-0");
    const page = await browser.newPage();
    await page.goto(authority.console);
    await signIn(page, "");
    // The host's small chart on the hosts page, once it has a bucket.
    await poll(
      "a small chart with buckets",
      async () => (await page.locator('#hosts tr[data-host="burst"] .small-chart').getAttribute("data-buckets", { timeout: 1000 }).catch(() => null)) ?? "",
      /^[1-9]/,
      10_000,
    );
    assert.equal(await page.locator('#hosts tr[data-host="burst"] .small-chart canvas').count() > 0, true);
    await page.evaluate(() => (location.hash = "#/host/burst"));
    await until(page, "#history-summary", /^\d+ of 120 buckets of 250 ms/);

    // The burst: one waiter, two refused BUSY (try mode), three refused QUEUE_FULL, then the
    // holder leaves and the waiter is admitted after waiting.
    const started = Date.now();
    await gw.submit("burst", "alice", "run-1");
    for (const run of ["run-2", "run-3"]) {
      await assert.rejects(gw.submit("burst", "alice", run, gen.SubmitMode.SUBMIT_MODE_TRY), /BUSY/);
    }
    for (const run of ["run-4", "run-5", "run-6"]) {
      await assert.rejects(gw.submit("burst", "alice", run), /QUEUE_FULL/);
    }
    await gw.releaseRun("burst", "run-0");
    const ended = Date.now();
    assert.ok(holder.ticketId);
    gw.close();

    // Every bucket the table lists, summed, holds the burst; the refusals sit in buckets that
    // overlap it, and the newest bucket shows the waiter running and nobody queued.
    await page.click("#history-details summary");
    const rows = async () =>
      page.locator("#history-table tbody tr").evaluateAll((trs) =>
        trs.map((tr) => ({ end: Number((tr as HTMLElement).dataset.end), cells: [...tr.children].map((td) => td.textContent ?? "") })),
      );
    const totals = async () => {
      const all = await rows();
      const refused = all.filter((r) => !/^0 /.test(r.cells[4]));
      const sum = (i: number) => all.reduce((n, r) => n + Number(r.cells[i].split(" ")[0]), 0);
      const first = all[0]?.cells ?? [];
      return `admitted ${sum(3)} refused ${all.map((r) => r.cells[4]).filter((c) => !/^0 /.test(c)).join("+")} newest ${first[1]}/${first[2]} in window ${refused.every((r) => r.end >= started && r.end <= ended + 1000)}`;
    };
    const seen = await poll("the burst in the table", totals, /^admitted 1 refused .* newest 1\/0 in window true$/, 10_000);
    // Two BUSY and three QUEUE_FULL in all, whichever buckets they fell in.
    const reasons = (await rows()).map((r) => r.cells[4].match(/\((\d+), (\d+), (\d+), (\d+)\)/)!.slice(1).map(Number));
    assert.deepEqual(
      reasons.reduce((t, r) => t.map((n, i) => n + r[i]), [0, 0, 0, 0]),
      [2, 3, 0, 0],
      seen,
    );
    assert.equal(await page.locator("#history canvas").count() >= 4, true, "four charts drawn");
    assert.match(await page.locator("#history").innerText(), /QUEUE_FULL/, "the refusal chart's legend names the reasons");
    await screenshot(page, "history");
    await page.close();
  });
});

describe("the console of two replicas on one Redis", () => {
  const authorities: Authority[] = [];
  let browser: Browser;

  before(async () => {
    const url = process.env.ADMISSION_TEST_REDIS_URL;
    assert.ok(url, "ADMISSION_TEST_REDIS_URL (scripts/test starts a redis-server)");
    const yaml =
      "history: { bucket: 250ms, keep: 30s }\n" +
      "scheduling: { total: 1, per_subject: 1, queue: { total: 1 }, lease_ttl: 60s }\n" +
      `store:\n  redis: { url: "${url}", prefix: "console-${process.pid}:" }\n`;
    authorities.push(await startAuthority(yaml), await startAuthority(yaml));
    browser = await launch();
  });

  after(async () => {
    await browser?.close();
    for (const a of authorities) await a.stop();
  });

  test("both draw the same buckets of a burst sent through one of them", async () => {
    const [a, b] = authorities;
    const gw = gateway(a.grpc);
    await gw.submit("shared", "alice", "run-0");
    const pages = await Promise.all([browser.newPage(), browser.newPage()]);
    for (const [page, authority] of [
      [pages[0], a],
      [pages[1], b],
    ] as const) {
      await page.goto(authority.console);
      await signIn(page, "");
      await page.evaluate(() => (location.hash = "#/host/shared"));
      await until(page, "#history-summary", /^\d+ of 120 buckets of 250 ms/);
      await page.click("#history-details summary");
    }
    await gw.submit("shared", "alice", "run-1");
    await assert.rejects(gw.submit("shared", "alice", "run-2", gen.SubmitMode.SUBMIT_MODE_TRY), /BUSY/);
    await assert.rejects(gw.submit("shared", "alice", "run-3"), /QUEUE_FULL/);
    await gw.releaseRun("shared", "run-0");
    gw.close();
    // The buckets of the burst (those where anything was admitted or refused), the same on
    // both pages, each polling its own replica: bucket for bucket, by when each ended.
    const burst = (page: Page) =>
      page
        .locator("#history-table tbody tr")
        .evaluateAll((trs) =>
          trs
            .map((tr) => `${(tr as HTMLElement).dataset.end} ${[...tr.children].slice(3, 5).map((td) => td.textContent).join(" ")}`)
            .filter((r) => !r.endsWith(" 0 0 (0, 0, 0, 0)"))
            .sort()
            .join("\n"),
        )
        .catch(() => "");
    let seen = "";
    await poll(
      "the same buckets of the burst on both replicas' pages",
      async () => {
        const [x, y] = await Promise.all(pages.map(burst));
        seen = x;
        const reasons = x.split("\n").map((r) => (r.match(/\((\d+), (\d+), 0, 0\)/) ?? ["", "0", "0"]).slice(1).map(Number));
        const busy = reasons.reduce((n, r) => n + r[0], 0);
        const full = reasons.reduce((n, r) => n + r[1], 0);
        return x === y && busy === 1 && full === 1 ? "same" : `${x}\n---\n${y}`;
      },
      /^same$/,
      15_000,
    );
    // The waiter's admission when the holder left is among them (the holder's own may be too,
    // when a replica sampled the new host before its first Submit was decided).
    const admitted = seen.split("\n").reduce((n, r) => n + Number(r.split(" ")[1]), 0);
    assert.ok(admitted >= 1 && admitted <= 2, seen);
    for (const page of pages) await page.close();
  });
});

describe("the console with Envoy's rate limits configured", () => {
  let authority: Authority;
  let browser: Browser;

  before(async () => {
    authority = await startAuthority(`rate_limits:
  domains:
    - domain: ai-gateway
      descriptors:
        - key: tenant
          rate_limit: { unit: day, requests_per_unit: 100 }
        - key: tenant
          value: vip
          rate_limit: { unlimited: true, name: vip }
        - key: tenant
          value: tiny
          rate_limit: { unit: day, requests_per_unit: 2 }
`);
    browser = await launch();
  });

  after(async () => {
    await browser?.close();
    await authority?.stop();
  });

  test("the first page shows the configured limits and the hottest counters", async () => {
    // An Envoy's calls, through Envoy's own proto (proto/envoy) and grpc-js.
    const loader: Any = createRequire(join(repo, "clients/typescript/package.json"))("@grpc/proto-loader");
    const def = loader.loadSync("envoy/service/ratelimit/v3/rls.proto", {
      includeDirs: [join(repo, "proto")],
      keepCase: true,
      enums: String,
    });
    const rls: Any = grpc.loadPackageDefinition(def).envoy.service.ratelimit.v3;
    const client = new rls.RateLimitService(authority.grpc, grpc.credentials.createInsecure());
    const ask = (tenant: string): Promise<Any> =>
      new Promise((ok, fail) =>
        client.ShouldRateLimit(
          { domain: "ai-gateway", descriptors: [{ entries: [{ key: "tenant", value: tenant }] }] },
          (err: Error | null, res: Any) => (err ? fail(err) : ok(res)),
        ),
      );
    for (let i = 0; i < 7; i++) await ask("acme");
    for (let i = 0; i < 3; i++) await ask("beta");
    for (let i = 0; i < 4; i++) await ask("tiny");
    const answer = await ask("acme");
    assert.equal(answer.overall_code, "OK");
    client.close();

    const page = await browser.newPage();
    await page.goto(authority.console);
    await signIn(page, "");
    await until(page, '#rate-limits tr[data-rule="ai-gateway/tenant"]', /ai-gateway\s*tenant\s*100 per day/);
    await until(page, '#rate-limits tr[data-rule="ai-gateway/tenant_vip"]', /unlimited\s*name vip/);
    // Each counter beside the limit its rule holds it to; one past it is flagged.
    const hottest = await until(page, "#rate-limits tr[data-counter]", /tenant=acme\|day\s*8 \/ 100/);
    assert.match(hottest, /day from \d{4}-\d\d-\d\dT00:00:00Z/);
    const rows = await page.locator("#rate-limits tr[data-counter]").allTextContents();
    assert.equal(rows.length, 3);
    assert.match(rows[1], /tenant=tiny\|day\s*4 \/ 2\s*over the limit/);
    assert.match(rows[2], /tenant=beta\|day\s*3 \/ 100\s*day/);
    assert.equal(await page.locator("#rate-limits tr.over").count(), 1);
  });
});
