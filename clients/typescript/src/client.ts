/**
 * The client (re-exported by `index.ts` with the AgenticDriver-shaped objects, which build on
 * it; nothing here imports them, so the modules form no cycle).
 *
 * - `client.acquire(subject, { signal })` holds a scheduler slot: it Submits, waits in the queue
 *   if need be, renews in the background, and gives back a {@link SlotHandle} whose `release()`
 *   (or `await using`) frees it. Aborting the signal while it waits withdraws the ticket.
 * - `authorize` / `settle` reserve and record a model step's budget; `checkAuthAttempt` counts an
 *   auth attempt.
 * - Refusals reject with {@link AdmissionRefusedError} carrying the reason and retry delay.
 * - A call the authority could not answer (UNAVAILABLE, DEADLINE_EXCEEDED) is repeated with the
 *   same request, so the same idempotency key, within the client's deadline; a Submit given up
 *   on that may have been applied is released by run in the background.
 *
 * The generated messages and stubs are exported as `gen`.
 */

import { randomUUID } from "node:crypto";
import { hostname } from "node:os";

import {
  type CallOptions,
  type ChannelCredentials,
  type ClientUnaryCall,
  credentials as grpcCredentials,
  Metadata,
  type ServiceError,
  status as grpcStatus,
} from "@grpc/grpc-js";

import * as gen from "./gen/admission/v1/admission.js";
import { ErrorInfo, RetryInfo } from "./gen/google/rpc/error_details.js";
import { Status } from "./gen/google/rpc/status.js";

export { gen };

/** The ErrorInfo domain of every refusal. */
export const ERROR_DOMAIN = "admission.v1";

/** The refusal reasons of the contract. */
export type RefusalReason = "BUSY" | "QUEUE_FULL" | "MEMORY_PRESSURE" | "DRAINING" | "KEY_BUSY";

/** Anything the authority refused or failed to answer. `code` is the gRPC status code,
 * `reason` the google.rpc.ErrorInfo reason when the authority sent one. */
export class AdmissionError extends Error {
  constructor(
    message: string,
    readonly code: grpcStatus,
    readonly reason: string = "",
  ) {
    super(message);
    this.name = "AdmissionError";
  }

  /** The authority or its store could not answer: the same call may work a moment later. */
  get retryable(): boolean {
    return this.code === grpcStatus.UNAVAILABLE || this.code === grpcStatus.DEADLINE_EXCEEDED;
  }

  /** The call may have taken effect although it failed (every retryable failure but
   * STORE_UNAVAILABLE): repeat it only with the same idempotency key. */
  get mayHaveApplied(): boolean {
    return this.retryable && this.reason !== "STORE_UNAVAILABLE";
  }
}

/** A refusal to retry later (RESOURCE_EXHAUSTED with ErrorInfo): BUSY, QUEUE_FULL, ... */
export class AdmissionRefusedError extends AdmissionError {
  constructor(
    message: string,
    override readonly reason: RefusalReason,
    /** From google.rpc.RetryInfo; undefined when the server sent none. */
    readonly retryAfterMs: number | undefined,
  ) {
    super(message, grpcStatus.RESOURCE_EXHAUSTED, reason);
    this.name = "AdmissionRefusedError";
  }
}

/** `keyPolicy: "reject_new"`: the key has a live ticket, `holder` (its ticket id). Submit
 * again once it ended. */
export class KeyBusyError extends AdmissionRefusedError {
  constructor(
    message: string,
    retryAfterMs: number | undefined,
    readonly holder: string,
  ) {
    super(message, "KEY_BUSY", retryAfterMs);
    this.name = "KeyBusyError";
  }
}

/** The ticket ended (shed, expired, cancelled) before it was admitted; or, with `runId`, the
 * Submit's run id names a ticket that has already ended (Submit is idempotent per run id, so it
 * answers that earlier ticket): a new run needs a new run id. */
export class TicketEndedError extends AdmissionError {
  constructor(
    readonly ticketId: string,
    readonly state: string,
    readonly runId?: string,
  ) {
    super(
      runId === undefined
        ? `ticket ${ticketId} ended ${state} before it was admitted`
        : `runId ${runId} already names ticket ${ticketId}, which ended ${state}: a Submit with the ` +
            "run id of an earlier run answers that run's ticket; give each new run a new run id",
      grpcStatus.ABORTED,
    );
    this.name = "TicketEndedError";
  }
}

/** A newer ticket of the run's key (`keyPolicy` "keep_newest" or "serial_keep_newest") took
 * this one's place while it waited: the run never started, and should not. `supersededBy` is
 * the newer ticket's id. */
export class SupersededError extends TicketEndedError {
  constructor(
    ticketId: string,
    readonly supersededBy: string,
    runId?: string,
  ) {
    super(ticketId, "SUPERSEDED", runId);
    this.message = `ticket ${ticketId} was superseded by ${supersededBy}, a newer ticket of its key, before it was admitted`;
    this.name = "SupersededError";
  }
}

/** The error for a ticket that ended before its run started. */
function ended(ticketId: string, state: gen.TicketState, supersededBy: string, runId?: string): TicketEndedError {
  return state === gen.TicketState.TICKET_STATE_SUPERSEDED
    ? new SupersededError(ticketId, supersededBy, runId)
    : new TicketEndedError(ticketId, stateName(state), runId);
}

/** A call on a client after its `close()`: it fails at once, is never retried, and opens no
 * connection. Background work of the client (renewals, releases by run) stops on it. */
export class ClientClosedError extends AdmissionError {
  constructor(what: string) {
    super(`the ${what} is closed: make a new one to call the authority again`, grpcStatus.CANCELLED, "CLIENT_CLOSED");
    this.name = "ClientClosedError";
  }
}

/** What the authority's gRPC server (tonic) answers when a call's own deadline passes there
 * first: CANCELLED with this message, where gRPC means DEADLINE_EXCEEDED. */
const SERVER_DEADLINE = "Timeout expired";

/** The typed error for a failed call. A deadline that ran out on the server is
 * DEADLINE_EXCEEDED, as when it runs out here first: the call may have been applied. */
export function translate(err: ServiceError): AdmissionError {
  const message = err.details || err.message;
  if (err.code === grpcStatus.CANCELLED && err.details === SERVER_DEADLINE) {
    return new AdmissionError(message, grpcStatus.DEADLINE_EXCEEDED);
  }
  const { reason, retryAfterMs, metadata } = details(err.metadata);
  if (err.code === grpcStatus.RESOURCE_EXHAUSTED && reason === "KEY_BUSY") {
    return new KeyBusyError(message, retryAfterMs, metadata?.holder ?? "");
  }
  if (err.code === grpcStatus.RESOURCE_EXHAUSTED && reason) {
    return new AdmissionRefusedError(message, reason as RefusalReason, retryAfterMs);
  }
  return new AdmissionError(message, err.code, reason ?? "");
}

function details(metadata: Metadata | undefined): {
  reason?: string;
  retryAfterMs?: number;
  metadata?: Record<string, string>;
} {
  const raw = metadata?.get("grpc-status-details-bin")[0];
  if (!(raw instanceof Buffer)) return {};
  const out: { reason?: string; retryAfterMs?: number; metadata?: Record<string, string> } = {};
  for (const any of Status.decode(raw).details) {
    if (any.typeUrl.endsWith("/google.rpc.ErrorInfo")) {
      const info = ErrorInfo.decode(any.value);
      if (info.domain === ERROR_DOMAIN) {
        out.reason = info.reason;
        out.metadata = info.metadata;
      }
    } else if (any.typeUrl.endsWith("/google.rpc.RetryInfo")) {
      const d = RetryInfo.decode(any.value).retryDelay;
      if (d) out.retryAfterMs = d.seconds * 1000 + Math.round(d.nanos / 1e6);
    }
  }
  return out;
}

type Unary<Req, Res> = (
  request: Req,
  metadata: Metadata,
  options: Partial<CallOptions>,
  callback: (error: ServiceError | null, response: Res) => void,
) => ClientUnaryCall;

/** Pause before the first retry of a call the authority could not answer; doubled each time. */
const FIRST_BACKOFF_MS = 50;
/** Longest pause between retries. */
const MAX_BACKOFF_MS = 1_000;
/** How long a queued ticket's Wait keeps reopening its stream while the authority cannot be
 * reached (a restart, a deploy, a network blip). */
export const RESUME_WAIT_FOR_MS = 60_000;
/** How long a Submit given up on keeps being released by run in the background: the authority
 * may apply it late (a store that stalled runs the calls it had queued once it resumes). */
const RELEASE_RUN_FOR_MS = 60_000;

/** Wait `ms`; a `background` wait does not keep the process alive. */
function sleep(ms: number, background = false): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    if (background) t.unref();
  });
}

/** How {@link AdmissionClient.call} repeats a call. */
export interface RetryOptions {
  /** Repeat only when the call certainly was not applied (STORE_UNAVAILABLE): for calls that
   * count something each time (CheckAuthAttempt). Default false. */
  notIdempotent?: boolean;
  /** The longest one try may take (default: all that is left of the deadline), so a try sent
   * to a replica that does not answer leaves time for another. */
  attemptMs?: number;
  /** Work nobody awaits (a release by run after a give-up): its waits do not keep the process
   * alive. */
  background?: boolean;
  /** Retry for at most this long instead of the client's `timeoutMs`. */
  timeoutMs?: number;
}

export interface ClientOptions {
  /** The gateway installation every call acts for. */
  hostId: string;
  /** This replica; default `<hostname>-<pid>`. */
  instanceId?: string;
  /** Default: insecure (plaintext). */
  credentials?: ChannelCredentials;
  /** Deadline of each unary call, retries included, ms (default 10,000). */
  timeoutMs?: number;
  /** Sent as `authorization: Bearer <token>` on every call. */
  token?: string;
}

export interface AcquireOptions {
  /** The idempotency key (default: a random UUID). */
  runId?: string;
  accountId?: string;
  /** "try": admit now or fail BUSY, never queue. */
  mode?: "queue" | "try";
  /** This replica's resident memory, MiB. */
  rssMb?: number;
  /** 1 (highest) .. 5 (lowest); 0 or unset: the host's default, 3. */
  priority?: number;
  /** While queued: the ticket's place in line and the authority's estimate of the wait in ms
   * (0 = unknown), from the Submit's answer and then from every Wait event. */
  onQueued?: (position: number, etaMs: number, blockedBy: Blocker) => void;
  /** Aborting while queued withdraws the ticket and rejects with the signal's reason. */
  signal?: AbortSignal;
  /** What the run is about, e.g. a conversation id (1..128 printable ASCII). With `keyPolicy`
   * it lets the newest message of a conversation win, or runs a key's runs one at a time. */
  key?: string;
  /** "none" (the key only labels), "keep_newest" (a new ticket ends the key's waiters: they
   * reject with {@link SupersededError}), "serial" (one admitted per key, the rest in order),
   * "serial_keep_newest" (one running, the newest waiting), "reject_new" (refused with
   * {@link KeyBusyError} while the key has a live ticket). */
  keyPolicy?: KeyPolicy;
  /** With a keep-newest policy: the key's running slots learn it at their next renewal
   * ({@link SlotHandle.supersededBy}); their slots stay counted until they release. */
  supersedeRunning?: boolean;
  /** With a keep-newest policy: admitted only once no newer ticket of the key came for this
   * long (ms), at most `debounceMaxMs` after the first. */
  debounceMs?: number;
  debounceMaxMs?: number;
}

/** What a ticket asks of its key's other live tickets (see {@link AcquireOptions.keyPolicy}). */
export type KeyPolicy = "none" | "keep_newest" | "serial" | "serial_keep_newest" | "reject_new";

const KEY_POLICIES: Record<KeyPolicy, gen.KeyPolicy> = {
  none: gen.KeyPolicy.KEY_POLICY_NONE,
  keep_newest: gen.KeyPolicy.KEY_POLICY_KEEP_NEWEST,
  serial: gen.KeyPolicy.KEY_POLICY_SERIAL,
  serial_keep_newest: gen.KeyPolicy.KEY_POLICY_SERIAL_KEEP_NEWEST,
  reject_new: gen.KeyPolicy.KEY_POLICY_REJECT_NEW,
};

function duration(ms: number | undefined): { seconds: number; nanos: number } | undefined {
  if (!ms) return undefined;
  return { seconds: Math.floor(ms / 1000), nanos: Math.round(ms % 1000) * 1_000_000 };
}

export interface Authorization {
  decision: "allow" | "deny" | "unknown";
  /** "" for allow; RESOURCE_LIMIT, QUOTA_EXHAUSTED or RESOURCE_USAGE_UNKNOWN. */
  reason: string;
  grantedOutputTokens: number;
  replay: boolean;
  remainingTokens: number | undefined;
  remainingCostUsd: number | undefined;
}

export interface AuthorizeOptions {
  requestedOutputTokens: number;
  estimatedInputTokens?: number;
  accountId?: string;
  model?: string;
  estimatedCostUsd?: number;
}

export interface SettleUsage {
  inputTokens: number;
  outputTokens: number;
  costUsd?: number;
  coverage?: "complete" | "partial" | "unknown";
}

export type AuthAttempt = gen.AuthAttemptResponse;

const DECISIONS: Record<number, Authorization["decision"]> = {
  [gen.Decision.DECISION_ALLOW]: "allow",
  [gen.Decision.DECISION_DENY]: "deny",
  [gen.Decision.DECISION_UNKNOWN]: "unknown",
};

const COVERAGE = {
  complete: gen.Coverage.COVERAGE_COMPLETE,
  partial: gen.Coverage.COVERAGE_PARTIAL,
  unknown: gen.Coverage.COVERAGE_UNKNOWN,
} as const;

function stateName(state: gen.TicketState): string {
  return gen.ticketStateToJSON(state).replace(/^TICKET_STATE_/, "");
}

/** An admitted ticket. Release it when the run ends (idempotent). */
/** What a run's provider call came to: "ok"; "rate_limited" (429); "overloaded" (5xx, a
 * timeout); "failed" (anything else). Reported on release, it moves an adaptive account cap. */
export type Outcome = "ok" | "rate_limited" | "overloaded" | "failed";

const OUTCOMES: Record<Outcome, gen.Outcome> = {
  ok: gen.Outcome.OUTCOME_OK,
  rate_limited: gen.Outcome.OUTCOME_RATE_LIMITED,
  overloaded: gen.Outcome.OUTCOME_OVERLOADED,
  failed: gen.Outcome.OUTCOME_FAILED,
};

/** The HTTP status an SDK or fetch error carries: `status` (openai, anthropic), `statusCode`,
 * or `response.status` (a fetch Response). */
function statusOf(err: unknown): number | undefined {
  if (typeof err !== "object" || err === null) return undefined;
  const e = err as { status?: unknown; statusCode?: unknown; response?: { status?: unknown } };
  for (const v of [e.status, e.statusCode, e.response?.status]) {
    if (typeof v === "number" && v >= 100 && v <= 599) return v;
  }
  return undefined;
}

/** The outcome a model provider's error stands for: HTTP 429 or a rate-limit error class is
 * "rate_limited"; 5xx, timeouts (TimeoutError, AbortError of a timeout signal) and connection
 * errors are "overloaded"; anything else "failed". Reads the error, then its `cause`. */
export function outcomeOf(err: unknown): Outcome {
  let e: unknown = err;
  for (let depth = 0; depth < 3 && e !== undefined && e !== null; depth++) {
    const status = statusOf(e);
    if (status === 429) return "rate_limited";
    if (status !== undefined) return status >= 500 ? "overloaded" : "failed";
    const name = typeof e === "object" ? `${(e as object).constructor?.name ?? ""} ${(e as { name?: string }).name ?? ""}` : "";
    if (/RateLimit/.test(name)) return "rate_limited";
    if (/Timeout|Overloaded|ServiceUnavailable|InternalServer|APIConnection/.test(name)) return "overloaded";
    e = typeof e === "object" ? (e as { cause?: unknown }).cause : undefined;
  }
  return "failed";
}

/** What a release reports: an outcome, or the error the run's provider call ended in (mapped
 * by {@link outcomeOf}), and the call's latency (default: how long the slot was held). */
export interface ReleaseReport {
  outcome?: Outcome;
  error?: unknown;
  latencyMs?: number;
}

/** What holds a queued ticket ("" when nothing: not queued); see docs/scheduling.md. */
export type Blocker = "" | "TOTAL" | "SUBJECT" | "ACCOUNT" | "MEMORY" | "TURN" | "STATE_LOSS";

function blockerName(b: gen.Blocker): Blocker {
  const name = gen.blockerToJSON(b).replace(/^BLOCKER_/, "");
  return name === "UNSPECIFIED" || name === "UNRECOGNIZED" ? "" : (name as Blocker);
}

export class SlotHandle {
  /** Set when a background renewal found the ticket ended and it could not be re-registered:
   * the slot is lost. */
  lost = false;
  /** Times a background renewal found the ticket unknown to the authority (its store lost it,
   * or its lease ran out while this replica was cut off) and re-registered it (Reclaim), so
   * that the run kept counting against the caps. */
  reclaims = 0;
  /** The outcome to report when the slot is released without one (e.g. by `await using`);
   * unset: none is reported. */
  outcome: Outcome | undefined;
  /** Set when a background renewal heard that a newer ticket of the slot's key was submitted
   * with `supersedeRunning`: its id. The run should stop (and release). */
  supersededBy = "";
  private readonly admittedAt = Date.now();
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private released: Promise<void> | undefined;
  /** A Reclaim under way: the slot's Release is sent once it is answered, so the authority
   * never takes the Reclaim last. */
  private reclaiming: Promise<void> | undefined;

  constructor(
    private readonly client: AdmissionClient,
    readonly ticketId: string,
    /** Fencing number: larger for every later admission of the host. */
    readonly grant: number,
    readonly leaseTtlMs: number,
    /** In the authority's shadow mode: what enforce mode would have done with this Submit
     * (QUEUED, BUSY, QUEUE_FULL, MEMORY_PRESSURE); "" otherwise. */
    readonly shadowReason = "",
    /** What a Reclaim of this ticket says the run holds (its Submit's fields). */
    private readonly held?: gen.ReclaimRequest,
  ) {
    this.schedule();
  }

  private get every(): number {
    return Math.max(this.leaseTtlMs / 3, 5);
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => void this.renew(), this.every);
    this.timer.unref();
  }

  /** Renew; a Renew that fails is retried at once with backoff (each try at most half an
   * interval, and a channel of several addresses sends it to another replica) for as long as
   * the lease lasts, not an interval later, so the lease is lost only when the authority was
   * unreachable for most of it. A ticket the authority no longer knows (EXPIRED) is
   * re-registered with Reclaim, so its run keeps counting; only a refused Reclaim (the ticket
   * ended) loses the slot. */
  private async renew(): Promise<void> {
    const every = this.every;
    try {
      const r = await this.client.call(
        this.client.stub.renew,
        { ticketIds: [this.ticketId] },
        { timeoutMs: this.leaseTtlMs, attemptMs: every / 2, background: true },
      );
      let state = r.tickets[0]?.state ?? gen.TicketState.TICKET_STATE_ADMITTED;
      if (r.tickets[0]?.supersededBy) this.supersededBy = r.tickets[0].supersededBy;
      // Never once the run has left its slot (release() was called while the Renew was under
      // way): a finished run holds nothing again.
      if (this.stopped) return;
      if (state === gen.TicketState.TICKET_STATE_EXPIRED && this.held !== undefined && !this.lost) {
        const reclaim = this.client.call(this.client.stub.reclaim, this.held);
        this.reclaiming = reclaim.then(() => undefined, () => undefined);
        const back = await reclaim;
        if (back.reclaimed) this.reclaims += 1;
        state = back.state;
      }
      if (state !== gen.TicketState.TICKET_STATE_ADMITTED && state !== gen.TicketState.TICKET_STATE_PARKED) {
        this.lost = true;
        return;
      }
    } catch (e) {
      // Refused (the ticket ended, or was never this run's), or the client closed: the slot is
      // lost. Unreachable for a whole lease: the next round finds it EXPIRED and reclaims it.
      if (!(e instanceof AdmissionError) || !e.retryable) {
        this.lost = true;
        return;
      }
    }
    this.schedule();
  }

  /** Free the slot, reporting what the run's provider call came to (see
   * {@link ReleaseReport}; without one, {@link SlotHandle.outcome} if set). Safe to call more
   * than once: the first call's report counts. */
  release(report: ReleaseReport = {}): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    const outcome = report.outcome ?? (report.error !== undefined ? outcomeOf(report.error) : this.outcome);
    const measured =
      outcome === undefined
        ? undefined
        : { outcome: OUTCOMES[outcome], latencyMs: report.latencyMs ?? Date.now() - this.admittedAt };
    this.released ??= (this.reclaiming ?? Promise.resolve()).then(() =>
      this.client.releaseTicket(this.ticketId, measured),
    );
    return this.released;
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.release();
  }
}

/** What both clients share: the generated stub, whose channel opens on the first call, and
 * the metadata every call carries (the bearer token, if any). Once closed it stays closed:
 * asking for the stub throws {@link ClientClosedError} instead of opening a new channel. */
class Connection<S extends { close(): void }> {
  private instance: S | undefined;
  private closed = false;

  constructor(
    private readonly open: () => S,
    private readonly token: string | undefined,
    private readonly what: string,
  ) {}

  get stub(): S {
    if (this.closed) throw new ClientClosedError(this.what);
    return (this.instance ??= this.open());
  }

  close(): void {
    this.closed = true;
    this.instance?.close();
    this.instance = undefined;
  }

  metadata(): Metadata {
    const md = new Metadata();
    if (this.token) md.set("authorization", `Bearer ${this.token}`);
    return md;
  }
}

function channelCredentials(options: { credentials?: ChannelCredentials }): ChannelCredentials {
  return options.credentials ?? grpcCredentials.createInsecure();
}

/** Every channel's options: reconnect soon after a replica comes back (gRPC's default waits a
 * second and more between tries, as long as a short lease's renew interval), and with several
 * addresses (`ipv4:a,b`) send each call to a live one in turn, so a call retried after a
 * replica died reaches another. Such a target names its first address as the calls'
 * authority: the whole list is no authority, and the server would refuse the call. */
export function channelOptions(target: string): Record<string, string | number> {
  const options: Record<string, string | number> = {
    "grpc.initial_reconnect_backoff_ms": 100,
    "grpc.min_reconnect_backoff_ms": 100,
    "grpc.max_reconnect_backoff_ms": 1_000,
  };
  const [scheme, ...rest] = target.split(":");
  const addresses = rest.join(":");
  if ((scheme === "ipv4" || scheme === "ipv6") && addresses.includes(",")) {
    options["grpc.service_config"] = JSON.stringify({ loadBalancingConfig: [{ round_robin: {} }] });
    options["grpc.default_authority"] = addresses.split(",")[0];
  }
  return options;
}

export class AdmissionClient {
  readonly hostId: string;
  readonly instanceId: string;
  private readonly timeoutMs: number;
  private readonly connection: Connection<gen.AdmissionClient>;

  constructor(target: string, options: ClientOptions) {
    this.hostId = options.hostId;
    this.instanceId = options.instanceId ?? `${hostname()}-${process.pid}`;
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.connection = new Connection(
      () => new gen.AdmissionClient(target, channelCredentials(options), channelOptions(target)),
      options.token,
      "AdmissionClient",
    );
  }

  /** The generated stub, for calls the wrapper does not cover. */
  get stub(): gen.AdmissionClient {
    return this.connection.stub;
  }

  /** Close the channel. Every later call, and every retry or renewal under way, fails at once
   * with {@link ClientClosedError}; nothing reopens the connection. */
  close(): void {
    this.connection.close();
  }

  private metadata(): Metadata {
    return this.connection.metadata();
  }

  /** Call a unary method within the client's deadline, repeating it (same request, so the
   * same idempotency key) while the authority or its store cannot answer; reject with the typed
   * error of the last try. */
  async call<Req, Res>(method: Unary<Req, Res>, request: Req, opts: RetryOptions = {}): Promise<Res> {
    const end = Date.now() + (opts.timeoutMs ?? this.timeoutMs);
    let backoff = FIRST_BACKOFF_MS;
    for (;;) {
      try {
        const tryEnd = opts.attemptMs === undefined ? end : Math.min(end, Date.now() + opts.attemptMs);
        return await this.once(method, request, Math.max(tryEnd, Date.now() + 1));
      } catch (e) {
        const err = e as AdmissionError;
        const final =
          !(err instanceof AdmissionError) ||
          !err.retryable ||
          (err.mayHaveApplied && opts.notIdempotent) ||
          end - Date.now() <= backoff;
        if (final) throw err;
      }
      await sleep(backoff, opts.background);
      backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
    }
  }

  private once<Req, Res>(method: Unary<Req, Res>, request: Req, deadline: number): Promise<Res> {
    return new Promise((resolve, reject) => {
      method.call(this.stub, request, this.metadata(), { deadline }, (err, res) =>
        err ? reject(translate(err)) : resolve(res),
      );
    });
  }

  /** Release (or withdraw) the ticket a Submit made for `runId` (on this client's host unless
   * `hostId` names another), for a caller that never saw its ticket id; resolves with the state
   * it had ("EXPIRED" when there was none). */
  async releaseRun(runId: string, opts: RetryOptions & { hostId?: string } = {}): Promise<string> {
    const hostId = opts.hostId ?? this.hostId;
    const r = await this.call(
      this.stub.release,
      { ticketId: "", hostId, runId, outcome: gen.Outcome.OUTCOME_UNSPECIFIED },
      opts,
    );
    return stateName(r.previousState);
  }

  /** Release by run in the background until the authority answers (at most a minute): a Submit
   * given up on may still be applied once the store answers again. */
  releaseRunSoon(runId: string, hostId: string = this.hostId): void {
    const end = Date.now() + RELEASE_RUN_FOR_MS;
    const attempt = async (): Promise<void> => {
      for (;;) {
        try {
          await this.releaseRun(runId, { background: true, hostId });
          return;
        } catch (e) {
          if (!(e instanceof AdmissionError) || !e.retryable || Date.now() > end) return;
        }
      }
    };
    void attempt();
  }

  /**
   * Hold one installation-wide slot: Submit, wait in the queue if need be, and renew in the
   * background until the handle is released.
   */
  async acquire(subject: string, opts: AcquireOptions = {}): Promise<SlotHandle> {
    opts.signal?.throwIfAborted();
    const runId = opts.runId ?? randomUUID();
    const request: gen.SubmitRequest = {
      hostId: this.hostId,
      instanceId: this.instanceId,
      subject,
      accountId: opts.accountId ?? "",
      runId,
      mode: opts.mode === "try" ? gen.SubmitMode.SUBMIT_MODE_TRY : gen.SubmitMode.SUBMIT_MODE_QUEUE,
      rssMb: opts.rssMb,
      priority: opts.priority ?? 0,
      resubmitExpired: false,
      key: opts.key ?? "",
      keyPolicy: KEY_POLICIES[opts.keyPolicy ?? "none"],
      supersedeRunning: opts.supersedeRunning ?? false,
      debounce: duration(opts.debounceMs),
      debounceMax: duration(opts.debounceMaxMs),
    };
    if (request.keyPolicy === undefined) throw new TypeError(`keyPolicy: unknown ${opts.keyPolicy}`);
    let r: gen.SubmitResponse;
    try {
      r = await this.call(this.stub.submit, request);
    } catch (e) {
      if (e instanceof AdmissionError && e.mayHaveApplied) this.releaseRunSoon(runId);
      throw e;
    }
    let grant = r.grant;
    const current = { ticketId: r.ticketId, leaseTtlMs: r.leaseTtlMs };
    try {
      if (r.state === gen.TicketState.TICKET_STATE_QUEUED) {
        opts.onQueued?.(r.position, r.etaMs, blockerName(r.blockedBy));
        grant = await this.admitQueued(current, request, opts.signal, opts.onQueued);
      } else if (r.state !== gen.TicketState.TICKET_STATE_ADMITTED) {
        throw ended(r.ticketId, r.state, r.supersededBy, runId);
      }
    } catch (e) {
      await this.releaseTicket(current.ticketId);
      throw e;
    }
    r = { ...r, ticketId: current.ticketId, leaseTtlMs: current.leaseTtlMs };
    const held: gen.ReclaimRequest = {
      ticketId: r.ticketId,
      hostId: this.hostId,
      runId,
      subject,
      accountId: opts.accountId ?? "",
      instanceId: this.instanceId,
      grant,
      priority: opts.priority ?? 0,
      key: request.key,
      keyPolicy: request.keyPolicy,
    };
    return new SlotHandle(this, r.ticketId, grant, r.leaseTtlMs, r.shadowReason, held);
  }

  /** Run `fn` holding a slot, as Python's `slot()` does: the slot is released when `fn`
   * settles, reporting "ok" (or `slot.outcome`) when it resolves and the outcome of its error
   * ({@link outcomeOf}) when it rejects, which is rethrown. */
  async withSlot<T>(subject: string, fn: (slot: SlotHandle) => Promise<T>, opts: AcquireOptions = {}): Promise<T> {
    const slot = await this.acquire(subject, opts);
    let result: T;
    try {
      result = await fn(slot);
    } catch (e) {
      await slot.release({ outcome: slot.outcome, error: slot.outcome === undefined ? e : undefined });
      throw e;
    }
    await slot.release({ outcome: slot.outcome ?? "ok" });
    return result;
  }

  /** @internal Follow the queued ticket `current` of a run (Submitted with `request`) until it
   * is admitted on a lease this replica can be sure of; resolves with its grant. `current` is
   * updated to the ticket followed, which the caller releases if this rejects.
   *
   * - A ticket the authority lost while queued (NOT_FOUND: its store lost its state) is
   *   submitted again under the run id.
   * - Every admission heard on a Wait stream is renewed before the run starts: the event may
   *   have reached this process long after it was sent (a stream held up, a process frozen
   *   with it in its buffers), so nothing in it says how much lease is left; the renewal
   *   makes the lease run from now. If it finds the ticket EXPIRED, or the Wait stream says
   *   EXPIRED, the run never started on that lease: it is submitted again with
   *   `resubmitExpired` (never re-registered with Reclaim, which is for runs that ran). */
  async admitQueued(
    current: { ticketId: string; leaseTtlMs: number },
    request: gen.SubmitRequest,
    signal: AbortSignal | undefined,
    onQueued?: (position: number, etaMs: number, blockedBy: Blocker) => void,
  ): Promise<number> {
    for (;;) {
      let again: gen.SubmitRequest;
      try {
        const grant = await this.waitAdmitted(current.ticketId, signal, onQueued);
        if (await this.stillHeld(current.ticketId)) return grant;
        again = { ...request, resubmitExpired: true };
      } catch (e) {
        if (e instanceof TicketEndedError && e.state === "EXPIRED") again = { ...request, resubmitExpired: true };
        else if (e instanceof AdmissionError && e.code === grpcStatus.NOT_FOUND) again = request;
        else throw e;
      }
      const r = await this.call(this.stub.submit, again);
      current.ticketId = r.ticketId;
      current.leaseTtlMs = r.leaseTtlMs;
      if (r.state === gen.TicketState.TICKET_STATE_ADMITTED) return r.grant;
      if (r.state !== gen.TicketState.TICKET_STATE_QUEUED) {
        throw ended(r.ticketId, r.state, r.supersededBy, request.runId);
      }
      onQueued?.(r.position, r.etaMs, blockerName(r.blockedBy));
    }
  }

  /** Renew an admission heard on a Wait stream: true when it is still admitted (its lease
   * running from now), false when it lapsed. */
  private async stillHeld(ticketId: string): Promise<boolean> {
    const r = await this.call(this.stub.renew, { ticketIds: [ticketId] });
    return (r.tickets[0]?.state ?? gen.TicketState.TICKET_STATE_EXPIRED) === gen.TicketState.TICKET_STATE_ADMITTED;
  }

  /** Follow a queued ticket until it is admitted (resolves with its grant); rejects when it
   * ends otherwise, or with the signal's reason when the signal aborts (the caller withdraws).
   * A stream cut while the ticket waits (the authority restarted or could not be reached) is
   * reopened with backoff, for up to {@link RESUME_WAIT_FOR_MS} of trying: an authority on a
   * data dir keeps the ticket and its place, and gives it one lease from its restart. */
  async waitAdmitted(
    ticketId: string,
    signal: AbortSignal | undefined,
    onQueued?: (position: number, etaMs: number, blockedBy: Blocker) => void,
  ): Promise<number> {
    let backoff = FIRST_BACKOFF_MS;
    let cutSince: number | undefined;
    for (;;) {
      const got = await this.waitOnce(ticketId, signal, (position, etaMs, blockedBy) => {
        cutSince = undefined;
        backoff = FIRST_BACKOFF_MS;
        onQueued?.(position, etaMs, blockedBy);
      });
      if (typeof got === "number") return got;
      const now = Date.now();
      cutSince ??= now;
      if (now - cutSince > RESUME_WAIT_FOR_MS) throw got;
      await sleep(backoff);
      if (signal?.aborted) throw signal.reason;
      backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
    }
  }

  /** One Wait stream: the grant once admitted, or the error that cut the stream when it may be
   * reopened; rejects when the ticket ended, the error is final, or the signal aborts. */
  private waitOnce(
    ticketId: string,
    signal: AbortSignal | undefined,
    onQueued: (position: number, etaMs: number, blockedBy: Blocker) => void,
  ): Promise<number | AdmissionError> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      const stream = this.stub.wait({ ticketId }, this.metadata());
      let settled = false;
      const finish = (f: () => void) => {
        if (settled) return;
        settled = true;
        signal?.removeEventListener("abort", onAbort);
        f();
      };
      const onAbort = () => {
        stream.cancel();
        finish(() => reject(signal?.reason));
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      stream.on("data", (e: gen.WaitEvent) => {
        if (e.state === gen.TicketState.TICKET_STATE_ADMITTED) {
          stream.cancel();
          finish(() => resolve(e.grant));
        } else if (e.state !== gen.TicketState.TICKET_STATE_QUEUED) {
          finish(() => reject(ended(ticketId, e.state, e.supersededBy)));
        } else {
          onQueued(e.position, e.etaMs, blockerName(e.blockedBy));
        }
      });
      stream.on("error", (err: ServiceError) => {
        if (err.code === grpcStatus.CANCELLED) return;
        const e = translate(err);
        finish(() => (e.retryable ? resolve(e) : reject(e)));
      });
      stream.on("end", () =>
        finish(() =>
          resolve(new AdmissionError(`the Wait stream of ${ticketId} ended`, grpcStatus.UNAVAILABLE)),
        ),
      );
    });
  }

  /** Release or withdraw a ticket; a failure is left to the lease. */
  async releaseTicket(ticketId: string, report?: { outcome: gen.Outcome; latencyMs: number }): Promise<void> {
    try {
      await this.call(this.stub.release, {
        ticketId,
        hostId: "",
        runId: "",
        outcome: report?.outcome ?? gen.Outcome.OUTCOME_UNSPECIFIED,
        latencyMs: report === undefined ? undefined : Math.max(0, Math.round(report.latencyMs)),
      });
    } catch {
      // The lease frees the slot within lease_ttl anyway.
    }
  }

  /** Reserve budget for one model step (`step` is 1-based). */
  async authorize(
    runId: string,
    step: number,
    subject: string,
    opts: AuthorizeOptions,
  ): Promise<Authorization> {
    const r = await this.call(this.stub.authorize, {
      hostId: this.hostId,
      runId,
      step,
      subject,
      accountId: opts.accountId ?? "",
      model: opts.model ?? "",
      requestedOutputTokens: opts.requestedOutputTokens,
      estimatedInputTokens: opts.estimatedInputTokens ?? 0,
      estimatedCostUsd: opts.estimatedCostUsd ?? 0,
    });
    return {
      decision: DECISIONS[r.decision] ?? "deny",
      reason: r.reason,
      grantedOutputTokens: r.grantedOutputTokens,
      replay: r.replay,
      remainingTokens: r.remainingTokens,
      remainingCostUsd: r.remainingCostUsd,
    };
  }

  /** Record what a step used; true when this repeated an identical Settle. */
  async settle(runId: string, step: number, usage: SettleUsage): Promise<boolean> {
    const r = await this.call(this.stub.settle, {
      hostId: this.hostId,
      runId,
      step,
      usage: {
        inputTokens: usage.inputTokens,
        outputTokens: usage.outputTokens,
        costUsd: usage.costUsd ?? 0,
        coverage: COVERAGE[usage.coverage ?? "complete"],
      },
    });
    return r.replay;
  }

  /** Count one attempt of `identity` against `endpoint`'s bucket; with `peek`, count nothing
   * and answer what an attempt would meet (e.g. whether the key is locked out). */
  async checkAuthAttempt(endpoint: string, identity: string, opts: { peek?: boolean } = {}): Promise<AuthAttempt> {
    // Each attempt counts: repeated only when it certainly was not counted.
    return this.call(
      this.stub.checkAuthAttempt,
      { endpoint, identity, peek: opts.peek ?? false },
      { notIdempotent: !opts.peek },
    );
  }

  /** Clear a bucket after a verified success; true when there was one. */
  async resetAuthAttempts(endpoint: string, identity: string): Promise<boolean> {
    return (await this.call(this.stub.resetAuthAttempts, { endpoint, identity })).cleared;
  }

  /** Live counters of this client's host. */
  async stats(): Promise<gen.Stats> {
    return this.call(this.stub.getStats, { hostId: this.hostId });
  }
}

/** Options of an {@link OperatorClient}. */
export interface OperatorOptions {
  /** Default: insecure (plaintext). */
  credentials?: ChannelCredentials;
  /** Deadline of each call, ms (default 10,000). */
  timeoutMs?: number;
  /** An operator credential's token, sent as `authorization: Bearer <token>`. */
  token?: string;
}

/** Fields {@link OperatorClient.updateLimits} may change; the others keep their value. */
export interface LimitsChanges {
  total?: number;
  perSubject?: number;
  /** `null`: no per-account cap. */
  perAccount?: number | null;
  queueTotal?: number;
  queuePerSubject?: number;
  queueHardTotal?: number;
  overflowPolicy?: "reject" | "shed_oldest" | "queue";
  leaseTtlMs?: number;
  retentionMs?: number;
  maxRetained?: number;
  priorityAgingMs?: number;
  mode?: "enforce" | "shadow";
  /** Maps replaced whole. */
  subjects?: Record<string, number>;
  accounts?: Record<string, number>;
  weights?: Record<string, number>;
}

/** A client for the Operator service: a host's limits while the fleet runs, and `stub` for the
 * other operator calls. The channel opens on the first call. */
export class OperatorClient {
  private readonly timeoutMs: number;
  private readonly connection: Connection<gen.OperatorClient>;

  constructor(target: string, options: OperatorOptions = {}) {
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.connection = new Connection(
      () => new gen.OperatorClient(target, channelCredentials(options), channelOptions(target)),
      options.token,
      "OperatorClient",
    );
  }

  /** The generated stub, for calls the wrapper does not cover. */
  get stub(): gen.OperatorClient {
    return this.connection.stub;
  }

  close(): void {
    this.connection.close();
  }

  private call<Req, Res>(method: Unary<Req, Res>, request: Req): Promise<Res> {
    return new Promise((resolve, reject) => {
      method.call(this.stub, request, this.connection.metadata(), { deadline: Date.now() + this.timeoutMs }, (err, res) =>
        err ? reject(translate(err)) : resolve(res),
      );
    });
  }

  /** The limits `hostId` is decided with now, their `source` and `revision`. A host that is
   * not one yet answers NOT_FOUND, or with `orDefaults` the limits it would start with
   * (revision 0); either way nothing is made. */
  async getLimits(hostId: string, { orDefaults = false } = {}): Promise<gen.GetLimitsResponse> {
    return this.call(this.stub.getLimits, { hostId, orDefaults });
  }

  /** Put `limits` (the whole message) in force; with `expectedRevision`, only if the limits are
   * still at it (else an {@link AdmissionError} with code FAILED_PRECONDITION). */
  async setLimits(hostId: string, limits: gen.HostLimits, expectedRevision = 0): Promise<gen.SetLimitsResponse> {
    return this.call(this.stub.setLimits, { hostId, limits, expectedRevision });
  }

  /** Change some fields of the limits in force and keep the rest, at the revision read
   * (reading again if another operator changed them in between). */
  async updateLimits(hostId: string, changes: LimitsChanges): Promise<gen.SetLimitsResponse> {
    for (let i = 0; i < 5; i++) {
      const current = await this.getLimits(hostId, { orDefaults: true });
      const l = current.limits!;
      const queue = { ...(l.queue ?? { total: 0, perSubject: 0, hardTotal: 0 }) };
      if (changes.queueTotal !== undefined) queue.total = changes.queueTotal;
      if (changes.queuePerSubject !== undefined) queue.perSubject = changes.queuePerSubject;
      if (changes.queueHardTotal !== undefined) queue.hardTotal = changes.queueHardTotal;
      const limits: gen.HostLimits = {
        ...l,
        queue,
        total: changes.total ?? l.total,
        perSubject: changes.perSubject ?? l.perSubject,
        perAccount: changes.perAccount === null ? undefined : (changes.perAccount ?? l.perAccount),
        overflowPolicy: changes.overflowPolicy ?? l.overflowPolicy,
        leaseTtlMs: changes.leaseTtlMs ?? l.leaseTtlMs,
        retentionMs: changes.retentionMs ?? l.retentionMs,
        maxRetained: changes.maxRetained ?? l.maxRetained,
        priorityAgingMs: changes.priorityAgingMs ?? l.priorityAgingMs,
        mode: changes.mode ?? l.mode,
        subjects: changes.subjects ?? l.subjects,
        accounts: changes.accounts ?? l.accounts,
        weights: changes.weights ?? l.weights,
      };
      try {
        return await this.setLimits(hostId, limits, current.revision);
      } catch (e) {
        if (!(e instanceof AdmissionError) || e.code !== grpcStatus.FAILED_PRECONDITION) throw e;
      }
    }
    throw new AdmissionError(`updateLimits: the limits of ${hostId} kept changing`, grpcStatus.ABORTED);
  }

  /** Return `hostId` to the configuration file's limits. */
  async resetLimits(hostId: string, expectedRevision = 0): Promise<gen.ResetLimitsResponse> {
    return this.call(this.stub.resetLimits, { hostId, expectedRevision });
  }
}
