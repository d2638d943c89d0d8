// The operator console: sign in with the operator token, then every host at a glance and one
// host in detail, refreshed about once a second. Every read and every action is one of the
// authority's RPCs (./api.ts); the page keeps nothing but the token (this tab's session
// storage) and the last minutes of samples it drew.

import { api, pb } from "./api.js";
import { byId, clockTime, duration, fill, h, row, type Sorting, sparkline, table, usage } from "./dom.js";
import { clearHistory, drawHistory, historyOf, refusalsPerMinute, smallChart } from "./charts.js";
import { ENDED_SORT, endedShown, endedTable } from "./ended.js";
import { Code, RpcError } from "./grpcweb.js";
import { FormError, formLimits, jsonLimits, limitsForm, showFieldErrors } from "./limits.js";

const TOKEN_KEY = "admission-console-token";
const REFRESH_MS = 1000;
/** Rows per page of the queue and holder tables: a host with 10,000 tickets stays quick. */
const PAGE_ROWS = 50;
/** Samples kept per adaptive account for its chart: five minutes at one a second. */
const HISTORY = 300;

const BLOCKERS: Record<number, string> = {
  [pb.Blocker.BLOCKER_TOTAL]: "host total cap",
  [pb.Blocker.BLOCKER_SUBJECT]: "subject cap",
  [pb.Blocker.BLOCKER_ACCOUNT]: "account cap",
  [pb.Blocker.BLOCKER_MEMORY]: "memory pressure",
  [pb.Blocker.BLOCKER_TURN]: "its turn (others go first)",
  [pb.Blocker.BLOCKER_STATE_LOSS]: "learning window after a state loss",
  [pb.Blocker.BLOCKER_KEY]: "its key (an earlier ticket of the key holds it or waits ahead)",
};
const KEY_POLICIES: Record<number, string> = {
  [pb.KeyPolicy.KEY_POLICY_NONE]: "label",
  [pb.KeyPolicy.KEY_POLICY_KEEP_NEWEST]: "keep newest",
  [pb.KeyPolicy.KEY_POLICY_SERIAL]: "serial",
  [pb.KeyPolicy.KEY_POLICY_SERIAL_KEEP_NEWEST]: "serial, keep newest",
  [pb.KeyPolicy.KEY_POLICY_REJECT_NEW]: "reject new",
};

/** A ticket's key and its policy, for the tables; "" without one. */
function keyOf(t: pb.TicketInfo): string {
  return t.key ? `${t.key} (${KEY_POLICIES[t.keyPolicy] ?? ""})` : "";
}

/** Why a waiter waits, in words: its debounce says how long is left. */
function blockerText(t: pb.TicketInfo, all: pb.TicketInfo[]): string {
  if (t.blockedBy === pb.Blocker.BLOCKER_KEY && t.debounceLeftMs > 0) {
    return `its key's debounce (${duration(t.debounceLeftMs)} left)`;
  }
  if (t.blockedBy === pb.Blocker.BLOCKER_KEY) {
    const ahead = keyAhead(t, all);
    if (ahead !== undefined) {
      return `its key: ticket ${shortId(ahead.ticketId)} (run ${ahead.runId}, ${STATES[ahead.state] ?? ""}) is ahead`;
    }
  }
  return BLOCKERS[t.blockedBy] ?? "";
}

/** The ticket a key-blocked waiter waits behind: its key's holder, else the key's longest
 * waiter before it. */
function keyAhead(t: pb.TicketInfo, all: pb.TicketInfo[]): pb.TicketInfo | undefined {
  const same = all.filter((o) => o.key === t.key && o.ticketId !== t.ticketId);
  return (
    same.find((o) => o.state !== pb.TicketState.TICKET_STATE_QUEUED) ??
    same.filter((o) => o.inStateMs > t.inStateMs).sort((a, b) => b.inStateMs - a.inStateMs)[0]
  );
}
const STATES: Record<number, string> = {
  [pb.TicketState.TICKET_STATE_QUEUED]: "queued",
  [pb.TicketState.TICKET_STATE_ADMITTED]: "admitted",
  [pb.TicketState.TICKET_STATE_PARKED]: "parked",
};

/** A listed ticket's value a column sorts by. */
type SortKey = (t: pb.TicketInfo) => string | number;

/** The queue's and the holders' sortable columns (by header index). */
const QUEUE_SORT: Record<number, SortKey> = { 2: (t) => t.runId, 3: (t) => t.subject, 4: (t) => t.accountId, 5: (t) => t.priority, 6: (t) => t.inStateMs, 8: (t) => t.key };
const HOLDER_SORT: Record<number, SortKey> = { 1: (t) => t.runId, 2: (t) => t.subject, 3: (t) => t.accountId, 4: (t) => t.instanceId, 5: (t) => t.key, 7: (t) => t.inStateMs, 8: (t) => t.leaseRemainingMs };

function sorted<T>(list: T[], keys: Record<number, (t: T) => string | number>, s: { at: number; desc: boolean }): T[] {
  const key = keys[s.at];
  if (key === undefined) return list;
  const dir = s.desc ? -1 : 1;
  return [...list].sort((a, b) => {
    const x = key(a);
    const y = key(b);
    return (typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y))) * dir;
  });
}

function sorting(which: "queue" | "holders" | "ended", keys: Record<number, unknown>): Sorting {
  const s = state.sort[which];
  return {
    at: s.at,
    desc: s.desc,
    sortable: Object.keys(keys).map(Number),
    by: (column) => {
      state.sort[which] = { at: column, desc: s.at === column ? !s.desc : false };
      void refresh();
    },
  };
}

/** A ticket the page's filter lets through: its run, subject, account, key or id contains the
 * text (any case), and it is in the state chosen. */
function shown(t: pb.TicketInfo): boolean {
  const f = state.filter;
  if (f.state !== "" && STATES[t.state] !== f.state) return false;
  if (f.text === "") return true;
  const text = f.text.toLowerCase();
  return [t.runId, t.subject, t.accountId, t.key, t.ticketId].some((v) => v.toLowerCase().includes(text));
}

const state = {
  token: sessionStorage.getItem(TOKEN_KEY),
  /** The host page's filter and each table's sorting (-1: as listed). */
  filter: { text: "", state: "" },
  sort: { queue: { at: -1, desc: false }, holders: { at: -1, desc: false }, ended: { at: -1, desc: false } },
  busy: false,
  queuePage: 0,
  holderPage: 0,
  /** host → account → adaptive cap samples. */
  adaptive: new Map<string, Map<string, number[]>>(),
  /** The limits the editor was filled from (host, revision), and whether it was edited. */
  editor: { host: "", revision: -1, dirty: false, base: pb.HostLimits.create() },
  lastHost: "",
};

function token(): string {
  return state.token ?? "";
}

/** The host the page shows, from `#/host/<id>`; "" for all hosts. */
function route(): string {
  const m = /^#\/host\/(.+)$/.exec(location.hash);
  return m ? decodeURIComponent(m[1]) : "";
}

function shortId(ticketId: string): string {
  const dot = ticketId.lastIndexOf(".");
  return dot < 0 ? ticketId : `…${ticketId.slice(-8)}`;
}

// ---- signing in and out ----

function showLogin(message: string): void {
  state.token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  byId("app").hidden = true;
  byId("sign-out").hidden = true;
  byId("login").hidden = false;
  fill(byId("login-error"), message);
  byId<HTMLInputElement>("token").focus();
}

async function signIn(candidate: string): Promise<void> {
  try {
    await api.listHosts(candidate, {});
  } catch (e) {
    showLogin(refusalText(e));
    return;
  }
  state.token = candidate;
  sessionStorage.setItem(TOKEN_KEY, candidate);
  byId("login").hidden = true;
  byId("app").hidden = false;
  byId("sign-out").hidden = false;
  fill(byId("login-error"));
  await refresh();
}

/** The authority refused the token (none, a wrong one, or a gateway's). */
function credentialRefused(e: unknown): e is RpcError {
  return e instanceof RpcError && (e.code === Code.UNAUTHENTICATED || e.code === Code.PERMISSION_DENIED);
}

function refusalText(e: unknown): string {
  if (credentialRefused(e)) return `Refused: ${e.message}. The console takes an operator credential.`;
  return e instanceof Error ? e.message : String(e);
}

/** Run an RPC-backed action; a refused credential signs out, other errors show in `where`. */
async function act(where: HTMLElement, what: () => Promise<string>): Promise<void> {
  try {
    fill(where, h("span", { class: "ok" }, await what()));
  } catch (e) {
    if (credentialRefused(e)) {
      showLogin(refusalText(e));
      return;
    }
    fill(where, h("span", { class: "error" }, e instanceof Error ? e.message : String(e)));
  }
  await refresh();
}

// ---- the refresh loop ----

async function refresh(): Promise<void> {
  if (state.token === null || state.busy) return;
  state.busy = true;
  try {
    const overview = await api.listHosts(token(), {});
    const host = route();
    banners(overview);
    if (host === "") {
      byId("host-view").hidden = true;
      byId("no-host").hidden = true;
      byId("hosts-view").hidden = false;
      fill(byId("crumb"));
      await Promise.all([hostsView(overview.hostIds), rateLimitsView()]);
    } else {
      byId("hosts-view").hidden = true;
      fill(byId("crumb"), " › ", h("strong", {}, host));
      if (host !== state.lastHost) {
        state.lastHost = host;
        state.queuePage = 0;
        state.holderPage = 0;
        state.editor = { host: "", revision: -1, dirty: false, base: pb.HostLimits.create() };
        clearHistory();
        // What an action on another host said does not stay on this one's page.
        for (const id of ["holders-result", "reservations-result", "unlock-result", "limits-result"]) {
          fill(byId(id));
        }
      }
      const found = await hostView(host);
      byId("host-view").hidden = !found;
      byId("no-host").hidden = found;
    }
    fill(byId("updated"), `updated ${new Date().toLocaleTimeString()}`);
    fill(byId("problem"));
  } catch (e) {
    if (credentialRefused(e)) {
      showLogin(refusalText(e));
    } else {
      fill(byId("problem"), h("div", { class: "banner bad" }, `The console could not refresh: ${refusalText(e)}`));
    }
  } finally {
    state.busy = false;
  }
}

function banners(o: pb.ListHostsResponse): void {
  fill(
    byId("banners"),
    o.storeProblem !== "" && h("div", { class: "banner bad", id: "banner-store" }, `Store unavailable: ${o.storeProblem}`),
    o.note !== "" && h("div", { class: "banner warn", id: "banner-note" }, o.note),
    o.draining &&
      h("div", { class: "banner warn", id: "banner-drain" }, "This authority process is draining: it admits nothing new."),
  );
}

/** Keep the adaptive caps of a host's accounts as the page samples them. */
function remember(host: string, stats: pb.Stats): void {
  const accounts = state.adaptive.get(host) ?? new Map<string, number[]>();
  for (const a of stats.accounts) {
    if (!a.adaptive) continue;
    const points = accounts.get(a.accountId) ?? [];
    points.push(a.cap);
    if (points.length > HISTORY) points.shift();
    accounts.set(a.accountId, points);
  }
  state.adaptive.set(host, accounts);
}

async function hostsView(hosts: string[]): Promise<void> {
  const [stats, histories] = await Promise.all([
    Promise.all(hosts.map((hostId) => api.getStats(token(), { hostId }))),
    Promise.all(hosts.map((hostId) => historyOf(token(), hostId))),
  ]);
  const rows = hosts.map((hostId, i) => {
    const s = stats[i];
    remember(hostId, s);
    const rate = refusalsPerMinute(histories[i]);
    const flags = [
      s.draining && "draining",
      s.learningLeftMs > 0 && `learning ${duration(s.learningLeftMs)}`,
      s.mode === "shadow" && "shadow mode",
      s.stateLosses > 0 && stateLosses(s),
    ].filter(Boolean);
    return row(
      { "data-host": hostId },
      h("td", {}, h("a", { href: `#/host/${encodeURIComponent(hostId)}` }, hostId)),
      h("td", {}, usage(s.inFlight, s.total)),
      h("td", {}, queueUsage(s)),
      h("td", { class: "chart-cell" }, histories[i].buckets.length > 0 ? smallChart(hostId, histories[i]) : "no bucket yet"),
      rate === undefined ? "…" : rate.toFixed(1),
      flags.join(", "),
    );
  });
  fill(
    byId("hosts"),
    table(["host", "in flight / total", "queued / queue", "last hour: in flight, queued", "refusals per minute", "condition"], rows, "No host has state yet: the first Submit of a host creates it."),
  );
}

/**
 * Envoy's rate limit service: the configured limits of every domain and the live counters with
 * the highest counts. Nothing when no domain is configured.
 */
async function rateLimitsView(): Promise<void> {
  const r = await api.getRateLimits(token(), { domain: "", limit: 20 });
  if (r.domains.length === 0) {
    fill(byId("rate-limits"));
    return;
  }
  const rules = r.domains.flatMap((d) =>
    d.rules.map((x) =>
      row(
        { "data-rule": `${d.domain}/${x.descriptor}` },
        d.domain,
        x.descriptor,
        x.unlimited ? "unlimited" : `${x.requestsPerUnit} per ${x.unit}`,
        [x.name !== "" && `name ${x.name}`, x.replaces.length > 0 && `replaces ${x.replaces.join(", ")}`, x.shadowMode && "shadow mode", x.quotaMode && "quota mode"]
          .filter(Boolean)
          .join(", "),
      ),
    ),
  );
  const hottest = r.hottest.map((c) => {
    const over = c.limit > 0 && c.count > c.limit;
    return row(
      { "data-counter": `${c.domain}/${c.key}`, class: over ? "over" : undefined },
      c.domain,
      c.key,
      c.limit > 0 ? `${c.count} / ${c.limit}` : String(c.count),
      over ? h("td", { class: "error" }, "over the limit") : "",
      `${c.unit} from ${new Date(c.windowStart * 1000).toISOString().replace(".000Z", "Z")}`,
    );
  });
  fill(
    byId("rate-limits"),
    h("h2", {}, "Rate limits (Envoy)"),
    h(
      "p",
      { class: "summary" },
      `${r.domains.length} domain${r.domains.length === 1 ? "" : "s"} from ${r.domains.map((d) => d.source).join(", ")} · at most ${r.maxCounters} live counters per domain`,
    ),
    table(["domain", "descriptor", "limit", "rule"], rules, "No descriptor has a rate_limit."),
    h("h3", {}, "Hottest counters"),
    table(["domain", "counter", "count / limit", "", "window"], hottest, "No live counter: nothing was counted in the current windows."),
  );
}

/** The installation's losses of the shared store's state and when the last was. */
function stateLosses(s: pb.Stats): string {
  const n = `${s.stateLosses} state loss${s.stateLosses === 1 ? "" : "es"}`;
  return s.lastStateLossUnixMs > 0 ? `${n}, the last at ${new Date(s.lastStateLossUnixMs).toISOString().replace(/\.\d+Z$/, "Z")}` : n;
}

/** A host's queue against its bound; a bound of 0 is "no queue" (a full host answers BUSY). */
function queueUsage(s: pb.Stats): HTMLElement | string {
  return s.queueTotal > 0 ? usage(s.queued, s.queueTotal) : "no queue";
}

// ---- one host ----

/** Draw a host's page; false when there is no such host (a mistyped address), which the
 * authority answers NOT_FOUND without making it. */
async function hostView(hostId: string): Promise<boolean> {
  let limits: pb.GetLimitsResponse;
  try {
    limits = await api.getLimits(token(), { hostId, orDefaults: false });
  } catch (e) {
    if (e instanceof RpcError && e.code === Code.NOT_FOUND) {
      fill(
        byId("no-host-text"),
        `The authority has no host named “${hostId}”. A host appears once a gateway's first ticket, ` +
          "reservation or a limits change names it, or when the configuration file lists it.",
      );
      return false;
    }
    throw e;
  }
  const [stats, list, reservations, policies, history, ended] = await Promise.all([
    api.getStats(token(), { hostId }),
    api.listTickets(token(), { hostId, limit: 10_000 }),
    api.listReservations(token(), { hostId, limit: 1000 }),
    api.listHttpPolicies(token(), { hostId }),
    historyOf(token(), hostId),
    api.listEndedTickets(token(), { hostId, limit: 0 }),
  ]);
  drawHistory(history);
  remember(hostId, stats);
  caps(hostId, stats);
  const all = list.tickets;
  const queued = all.filter((t) => t.state === pb.TicketState.TICKET_STATE_QUEUED);
  const holders = all.filter((t) => t.state !== pb.TicketState.TICKET_STATE_QUEUED);
  const admitted = holders.filter((t) => t.state === pb.TicketState.TICKET_STATE_ADMITTED);
  queue(queued.filter(shown), all, list.truncated, estimateBasis(stats.holdAvgMs, admitted));
  holderTable(hostId, holders.filter(shown));
  const runOf = new Map<string, string>([...all, ...ended.ended].map((t) => [t.ticketId, t.runId]));
  fill(
    byId("ended"),
    endedTable(
      sorted(
        ended.ended.filter((e) => endedShown(e, state.filter)),
        ENDED_SORT,
        state.sort.ended,
      ),
      runOf,
      filtering(),
      sorting("ended", ENDED_SORT),
    ),
  );
  envoyPolicies(list.tickets, policies.policies);
  reservationTable(hostId, reservations.reservations);
  limitsEditor(hostId, limits);
  return true;
}

function caps(hostId: string, s: pb.Stats): void {
  const history = state.adaptive.get(hostId) ?? new Map<string, number[]>();
  const rows = [
    row({ "data-cap": "total" }, "total", usage(s.inFlight, s.total), s.queued, ""),
    ...s.subjects.map((x) => row({ "data-cap": `subject:${x.subject}` }, `subject ${x.subject}`, usage(x.inFlight, x.cap), x.queued, "")),
    ...s.accounts.map((x) =>
      row(
        { "data-cap": `account:${x.accountId}` },
        `account ${x.accountId}${x.adaptive ? " (adaptive)" : ""}`,
        usage(x.inFlight, x.cap),
        x.queued,
        x.adaptive ? sparkline(history.get(x.accountId) ?? [x.cap], Math.max(...(history.get(x.accountId) ?? [x.cap]))) : "",
      ),
    ),
  ];
  fill(
    byId("caps"),
    s.learningLeftMs > 0 &&
      h("div", { class: "banner warn" }, `Learning window after a state loss: ${duration(s.learningLeftMs)} left; nothing new is admitted meanwhile.`),
    s.stateLosses > 0 && h("p", { class: "summary", "data-state-losses": String(s.stateLosses) }, `The shared store lost its state: ${stateLosses(s)}.`),
    h(
      "p",
      { class: "summary" },
      `mode ${s.mode || "enforce"} · ${s.queueTotal > 0 ? `queue ${s.queued} / ${s.queueTotal} (hard ${s.queueHardTotal})` : "no queue (a full host refuses BUSY)"} · mean hold ${duration(s.holdAvgMs)} · admitted ${s.admitted} · refused ${s.rejected} (${s.keyRefused} for a busy key) · shed ${s.shed} · expired ${s.expired} · superseded ${s.superseded}`,
    ),
    table(["cap", "in flight / cap", "queued", "adaptive cap, last minutes"], rows, ""),
  );
}

function pager(total: number, page: number, set: (p: number) => void, id: string): HTMLElement {
  const pages = Math.max(1, Math.ceil(total / PAGE_ROWS));
  const at = Math.min(page, pages - 1);
  return h(
    "div",
    { class: "pager", id },
    h("button", { type: "button", disabled: at === 0, onclick: () => { set(at - 1); void refresh(); } }, "‹ earlier"),
    ` page ${at + 1} of ${pages} (${total}) `,
    h("button", { type: "button", disabled: at >= pages - 1, onclick: () => { set(at + 1); void refresh(); } }, "later ›"),
  );
}

/** Why the queue's estimates have no basis, or "" when they have one. They come from the
 * host's mean slot hold: none before a slot was freed, and none worth showing while every
 * holder has held far past that mean (holders that never release: the next slot frees when
 * one of them does, which the mean cannot tell). */
function estimateBasis(holdAvgMs: number, admitted: pb.TicketInfo[]): string {
  if (holdAvgMs === 0) return "no basis: no slot freed yet";
  const youngest = Math.min(...admitted.map((t) => t.inStateMs));
  if (admitted.length > 0 && youngest > 4 * holdAvgMs) {
    return `no basis: every holder has held over 4 × the mean hold (${duration(holdAvgMs)})`;
  }
  return "";
}

function queue(queued: pb.TicketInfo[], all: pb.TicketInfo[], truncated: boolean, noBasis: string): void {
  // By priority, then subject: how many wait in each line.
  const lines = new Map<string, number>();
  for (const t of queued) {
    const key = `priority ${t.priority} · ${t.subject}`;
    lines.set(key, (lines.get(key) ?? 0) + 1);
  }
  const summary = [...lines.entries()].sort().map(([k, n]) => h("li", {}, `${k}: ${n}`));
  // Those with a place first, in dispatch order; the rest as listed (queue order).
  const ordered = sorted(
    [...queued].sort((a, b) => (a.place || Infinity) - (b.place || Infinity)),
    QUEUE_SORT,
    state.sort.queue,
  );
  const page = Math.min(state.queuePage, Math.max(0, Math.ceil(ordered.length / PAGE_ROWS) - 1));
  const rows = ordered.slice(page * PAGE_ROWS, (page + 1) * PAGE_ROWS).map((t) =>
    row(
      { "data-ticket": t.ticketId },
      t.place > 0 ? t.place : "—",
      h("td", { title: t.ticketId }, shortId(t.ticketId)),
      t.runId,
      t.subject,
      t.accountId,
      t.priority,
      h("td", { title: `queued at ${clockTime(-t.inStateMs)}` }, duration(t.inStateMs)),
      t.place === 0 ? "—" : noBasis !== "" ? h("td", { class: "no-basis" }, noBasis) : duration(t.etaMs),
      h("td", { class: "key" }, keyOf(t)),
      h("td", { class: "blocker" }, blockerText(t, all)),
    ),
  );
  fill(
    byId("queue"),
    summary.length > 0 && h("ul", { class: "lines" }, ...summary),
    truncated && h("p", { class: "banner warn" }, "More than 10,000 live tickets: the listing shows the first 10,000."),
    table(["place", "ticket", "run", "subject", "account", "priority", "waited", "estimate", "key", "blocked by"], rows, filtering() ? "No waiter matches the filter." : "Nobody waits.", sorting("queue", QUEUE_SORT)),
    ordered.length > PAGE_ROWS && pager(ordered.length, page, (p) => (state.queuePage = p), "queue-pager"),
  );
}

/** The Envoy policies that admit to this host, each with its settings and how many of its
 * requests (tickets of instance `envoy:<policy>`) hold a slot and wait; nothing when the host
 * has none configured and no such tickets. */
function envoyPolicies(tickets: pb.TicketInfo[], configured: pb.HttpPolicyInfo[]): void {
  const per = new Map<string, { holding: number; waiting: number }>();
  for (const t of tickets) {
    if (!t.instanceId.startsWith("envoy:")) continue;
    const policy = t.instanceId.slice("envoy:".length);
    const n = per.get(policy) ?? { holding: 0, waiting: 0 };
    if (t.state === pb.TicketState.TICKET_STATE_QUEUED) n.waiting += 1;
    else n.holding += 1;
    per.set(policy, n);
  }
  const settings = new Map(configured.map((p) => [p.name, p]));
  const names = [...new Set([...settings.keys(), ...per.keys()])].sort();
  const lines = names.map((policy) => {
    const n = per.get(policy) ?? { holding: 0, waiting: 0 };
    const p = settings.get(policy);
    const said = p === undefined ? ["no longer configured"] : policySettings(p);
    return h("li", { "data-policy": policy }, `Envoy policy ${policy}: ${n.holding} holding, ${n.waiting} waiting · ${said.join(" · ")}`);
  });
  fill(byId("envoy-policies"), lines.length > 0 && h("ul", { class: "lines" }, ...lines));
}

function policySettings(p: pb.HttpPolicyInfo): string[] {
  return [
    `subject from ${p.subject}`,
    p.account !== "" && `account from ${p.account}`,
    p.priority !== "" && `priority from ${p.priority}`,
    `max wait ${duration(p.maxWaitMs)}`,
    p.tokens !== "" ? `tokens: ${p.tokens} (default max tokens ${p.defaultMaxTokens})` : "no token reservation",
    p.key !== "" && `key from ${p.key} (${p.keyPolicy}${p.debounceMs > 0 ? `, debounce ${duration(p.debounceMs)}` : ""})`,
  ].filter((x): x is string => typeof x === "string");
}

function filtering(): boolean {
  return state.filter.text !== "" || state.filter.state !== "";
}

function holderTable(hostId: string, listed: pb.TicketInfo[]): void {
  const holders = sorted(listed, HOLDER_SORT, state.sort.holders);
  const page = Math.min(state.holderPage, Math.max(0, Math.ceil(holders.length / PAGE_ROWS) - 1));
  const out = byId("holders-result");
  const rows = holders.slice(page * PAGE_ROWS, (page + 1) * PAGE_ROWS).map((t) =>
    row(
      { "data-ticket": t.ticketId },
      h("td", { title: t.ticketId }, shortId(t.ticketId)),
      t.runId,
      t.subject,
      t.accountId,
      t.instanceId,
      h("td", { class: "key" }, keyOf(t), t.supersededBy && ` · superseded by ${shortId(t.supersededBy)}`),
      STATES[t.state] ?? "",
      h("td", { title: `since ${clockTime(-t.inStateMs)}` }, duration(t.inStateMs)),
      h("td", { title: `until ${clockTime(t.leaseRemainingMs)}` }, duration(t.leaseRemainingMs)),
      h(
        "td",
        {},
        h(
          "button",
          {
            type: "button",
            class: "release",
            onclick: () =>
              confirmThen(
                `Release run ${t.runId} (ticket ${shortId(t.ticketId)}, subject ${t.subject})? Its slot goes to the next ` +
                  "waiter; the run itself is not stopped, and its gateway learns at its next renewal that it lost the slot.",
                "Release",
                () =>
                  act(out, async () => {
                    const r = await api.release(token(), pb.ReleaseRequest.create({ ticketId: t.ticketId }));
                    return `Released ${shortId(t.ticketId)} (run ${t.runId}); it was ${stateName(r.previousState)}.`;
                  }),
              ),
          },
          "Release",
        ),
      ),
    ),
  );
  fill(
    byId("holders"),
    table(
      ["ticket", "run", "subject", "account", "gateway instance", "key", "state", "held for", "lease left", ""],
      rows,
      filtering() ? "No holder matches the filter." : "Nobody holds a slot.",
      sorting("holders", HOLDER_SORT),
    ),
    holders.length > PAGE_ROWS && pager(holders.length, page, (p) => (state.holderPage = p), "holder-pager"),
  );
  const form = byId<HTMLFormElement>("release-run");
  form.onsubmit = (e) => {
    e.preventDefault();
    const runId = byId<HTMLInputElement>("release-run-id").value.trim();
    confirmThen(`Release run ${runId} on ${hostId}? Its slot goes to the next waiter.`, "Release", () =>
      act(out, async () => {
        const r = await api.release(token(), pb.ReleaseRequest.create({ hostId, runId }));
        return r.ticketId === "" ? `No ticket of run ${runId} on ${hostId}.` : `Released run ${runId}; it was ${stateName(r.previousState)}.`;
      }),
    );
  };
}

function stateName(s: pb.TicketState): string {
  return pb.TicketState[s]?.replace("TICKET_STATE_", "").toLowerCase() ?? String(s);
}

function reservationTable(hostId: string, list: pb.ReservationInfo[]): void {
  const out = byId("reservations-result");
  const resolve = (r: pb.ReservationInfo, resolution: pb.Resolution, label: string) =>
    h(
      "button",
      {
        type: "button",
        onclick: () =>
          act(out, async () => {
            await api.resolveReservation(token(), { hostId, runId: r.runId, step: r.step, resolution });
            return `Resolved ${r.runId} step ${r.step} as ${label}.`;
          }),
      },
      label,
    );
  const rows = list.map((r) => {
    const uncertain = r.state === pb.ReservationState.RESERVATION_STATE_UNCERTAIN;
    return row(
      { "data-reservation": `${r.runId}/${r.step}` },
      r.runId,
      r.step,
      r.subject,
      r.accountId,
      r.model,
      uncertain ? "uncertain" : "reserved",
      r.reservedTokens,
      r.reservedCostUsd.toFixed(4),
      duration(r.ageMs),
      h(
        "td",
        {},
        uncertain && resolve(r, pb.Resolution.RESOLUTION_CONSUMED, "consumed"),
        uncertain && resolve(r, pb.Resolution.RESOLUTION_RELEASED, "released"),
      ),
    );
  });
  fill(
    byId("reservations"),
    table(["run", "step", "subject", "account", "model", "state", "tokens", "cost (USD)", "age", "resolve"], rows, "No open reservation."),
  );
}

function limitsEditor(hostId: string, r: pb.GetLimitsResponse): void {
  const source = r.source === pb.LimitsSource.LIMITS_SOURCE_OPERATOR ? "set by an operator" : "from the configuration (file, flags, built-in defaults)";
  fill(byId("limits-info"), h("span", { id: "limits-revision" }, `revision ${r.revision}`), `, ${source}`);
  const e = state.editor;
  if (e.host !== hostId || (!e.dirty && e.revision !== r.revision)) {
    const limits = r.limits ?? pb.HostLimits.create();
    fill(byId("limits-form-fields"), limitsForm(limits, () => (state.editor.dirty = true)));
    byId<HTMLTextAreaElement>("limits-json").value = JSON.stringify(limits, null, 2);
    state.editor = { host: hostId, revision: r.revision, dirty: false, base: limits };
  } else if (e.dirty && e.revision !== r.revision) {
    fill(byId("limits-result"), h("span", { class: "warn" }, `The limits changed to revision ${r.revision} since you read revision ${e.revision}.`));
  }
}

/** The limits the editor says: its form, or its JSON view when that is open. */
function editedLimits(): pb.HostLimits {
  if (byId<HTMLInputElement>("limits-as-json").checked) {
    try {
      return jsonLimits(byId<HTMLTextAreaElement>("limits-json").value);
    } catch (e) {
      throw new Error(`Not applied: the limits are not valid JSON: ${e instanceof Error ? e.message : String(e)}`);
    }
  }
  return formLimits(byId("limits-form-fields"), state.editor.base);
}

function wireFilter(): void {
  const text = byId<HTMLInputElement>("filter-text");
  const which = byId<HTMLSelectElement>("filter-state");
  const apply = () => {
    state.filter = { text: text.value.trim(), state: which.value };
    state.queuePage = 0;
    state.holderPage = 0;
    void refresh();
  };
  text.oninput = apply;
  which.onchange = apply;
  byId<HTMLFormElement>("ticket-filter").onsubmit = (e) => {
    e.preventDefault();
    apply();
  };
}

function wireLimits(): void {
  const editor = byId<HTMLTextAreaElement>("limits-json");
  const fields = byId("limits-form-fields");
  const out = byId("limits-result");
  editor.oninput = () => (state.editor.dirty = true);
  const reload = () => {
    state.editor = { host: "", revision: -1, dirty: false, base: pb.HostLimits.create() };
  };
  byId<HTMLInputElement>("limits-as-json").onchange = (ev) => {
    const json = (ev.target as HTMLInputElement).checked;
    try {
      // Each view opens on what the other says.
      if (json) editor.value = JSON.stringify(formLimits(fields, state.editor.base), null, 2);
      else fill(fields, limitsForm(jsonLimits(editor.value), () => (state.editor.dirty = true)));
    } catch {
      // What it says cannot be read: the other view keeps its own.
    }
    editor.hidden = !json;
    fields.hidden = json;
  };
  byId<HTMLFormElement>("limits-form").onsubmit = (ev) => {
    ev.preventDefault();
    const hostId = route();
    const read = state.editor.revision;
    void act(out, async () => {
      showFieldErrors(fields, new Map());
      let limits: pb.HostLimits;
      try {
        limits = editedLimits();
      } catch (e) {
        if (e instanceof FormError) {
          showFieldErrors(fields, new Map([...e.fields].map(([f, r]) => [`limits.${f}`, r])));
          throw new Error("Not applied: the fields marked beside them are not valid.");
        }
        throw e;
      }
      try {
        const r = await api.setLimits(token(), { hostId, limits, expectedRevision: read });
        reload();
        return `Applied: now revision ${r.revision}.`;
      } catch (e) {
        if (e instanceof RpcError && e.code === Code.FAILED_PRECONDITION) {
          reload();
          throw new Error(`Not applied: the limits changed since you read them at revision ${read} (${e.message}). Reloaded the current ones.`);
        }
        if (e instanceof RpcError && e.code === Code.INVALID_ARGUMENT && e.fields.size > 0) {
          const rest = byId<HTMLInputElement>("limits-as-json").checked ? [...e.fields].map(([f, r]) => `${f}: ${r}`) : showFieldErrors(fields, e.fields);
          throw new Error(`Not applied: the authority refused ${e.fields.size === 1 ? "a field" : `${e.fields.size} fields`}${rest.length > 0 ? `: ${rest.join("; ")}` : ", marked beside them"}.`);
        }
        throw e;
      }
    });
  };
  byId("limits-reload").onclick = () => {
    reload();
    fill(out);
    void refresh();
  };
  byId("limits-reset").onclick = () =>
    confirmThen("Return this host to the configured limits (file, flags, built-in defaults)? Limits set by operators are dropped.", "Reset", () =>
      act(out, async () => {
        const r = await api.resetLimits(token(), { hostId: route(), expectedRevision: 0 });
        reload();
        return `Reset to the file's limits: now revision ${r.revision}.`;
      }),
    );
}

function wireAuth(): void {
  byId<HTMLFormElement>("unlock-form").onsubmit = (ev) => {
    ev.preventDefault();
    const endpoint = byId<HTMLInputElement>("unlock-endpoint").value.trim();
    const identity = byId<HTMLInputElement>("unlock-identity").value;
    void act(byId("unlock-result"), async () => {
      const r = await api.unlockAuth(token(), { endpoint, identity });
      return r.wasLocked ? `Unlocked: ${identity} was locked out of ${endpoint}; cleared.` : `${identity} was not locked out of ${endpoint}${r.cleared ? "; its attempts were cleared" : ""}.`;
    });
  };
}

/** The confirmation dialog: `then` runs only on its confirm button. */
function confirmThen(text: string, confirm: string, then: () => Promise<void>): void {
  const dialog = byId<HTMLDialogElement>("confirm");
  fill(byId("confirm-text"), text);
  const yes = byId<HTMLButtonElement>("confirm-yes");
  fill(yes, confirm);
  yes.onclick = () => {
    dialog.close();
    void then();
  };
  byId("confirm-no").onclick = () => dialog.close();
  dialog.showModal();
}

function wireDrain(): void {
  byId("drain").onclick = () =>
    confirmThen(
      "Drain this authority process? It stops admitting new tickets (they are refused DRAINING) while admitted ones finish. This cannot be undone without restarting the process.",
      "Drain",
      () =>
        act(byId("drain-result"), async () => {
          const r = await api.drain(token(), {});
          return r.started ? "Draining started." : "It was already draining.";
        }),
    );
}

function start(): void {
  byId<HTMLFormElement>("login-form").onsubmit = (e) => {
    e.preventDefault();
    void signIn(byId<HTMLInputElement>("token").value.trim());
  };
  byId("sign-out").onclick = () => showLogin("Signed out.");
  wireLimits();
  wireFilter();
  wireAuth();
  wireDrain();
  window.addEventListener("hashchange", () => void refresh());
  setInterval(() => {
    if (!document.hidden) void refresh();
  }, REFRESH_MS);
  if (state.token === null) showLogin("");
  else void signIn(state.token);
}

start();
