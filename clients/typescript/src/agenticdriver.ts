/**
 * AgenticDriver-shaped objects: pass them where an AgenticDriver host passes its own scheduler and
 * resource admission, and the authority decides for every replica at once.
 *
 * - {@link AuthorityScheduler}: `submit(identity, signal)` and `trySubmit(identity, signal)` →
 *   ticket (`wait()`, `release()`), both synchronous as AgenticDriver calls them; `stats` →
 *   `{ active, queued }`. Refusals reject `wait()` with code `BUSY`, `QUEUE_FULL` (both
 *   retryable), `CANCELLED` or `ADMISSION_IDENTITY_REQUIRED`, as AgenticDriver's own
 *   `DriverError` when the host passes that class (`errorClass`), else as {@link SchedulerError}.
 * - {@link AuthorityResourceAdmission}: `{ unknown, authorize(context) }` answering
 *   `"allow" | "deny" | "unknown"` from Authorize; it throws when the authority cannot be reached,
 *   which the host treats as policy unavailable (fail closed).
 */

import { randomUUID } from "node:crypto";

import { status as grpcStatus } from "@grpc/grpc-js";

import * as gen from "./gen/admission/v1/admission.js";
import {
  type AdmissionClient,
  AdmissionError,
  AdmissionRefusedError,
  ClientClosedError,
  type ReleaseReport,
  SlotHandle,
  TicketEndedError,
} from "./client.js";

/** Who a run is for, as AgenticDriver names it (its `driver.usageIdentity(provider, subject)`). */
export interface Identity {
  /** The gateway installation: the authority's `host_id` (caps and budgets are per host).
   * Absent: the client's `hostId`. */
  hostId?: string;
  /** Account capacity is shared per (hostId, accountId); absent = unbound. */
  accountId?: string;
  /** The authority's subject: per-subject caps and round-robin fairness. */
  subject: string;
  /** The model provider. A run that names one but no account is refused with
   * ADMISSION_IDENTITY_REQUIRED when the host caps accounts (it would escape those caps). */
  provider?: string;
}

export type SchedulerErrorCode = "BUSY" | "QUEUE_FULL" | "CANCELLED" | "ADMISSION_IDENTITY_REQUIRED";

/** How refusals are built: AgenticDriver's `DriverError` has this constructor. */
export type ErrorClass = new (code: string, message: string, retryable?: boolean) => Error;

/** What a refusal carries beyond AgenticDriver's `code`, `message` and `retryable`. */
export interface RefusalDetails {
  /** The authority's own reason: BUSY, QUEUE_FULL, MEMORY_PRESSURE, DRAINING, SHED,
   * UNAVAILABLE (the authority could not be reached), ... */
  reason?: string;
  /** When to retry, from the authority's RetryInfo. */
  retryAfterMs?: number;
  /** The client error behind it, if any. */
  cause?: unknown;
}

/** A scheduling refusal, when the host passes no `errorClass`. BUSY and QUEUE_FULL are
 * retryable (after `retryAfterMs`). */
export class SchedulerError extends Error {
  readonly reason: string;
  readonly retryAfterMs?: number;

  constructor(
    readonly code: string,
    message: string,
    readonly retryable = false,
    details: RefusalDetails = {},
  ) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.name = "SchedulerError";
    this.reason = details.reason ?? code;
    this.retryAfterMs = details.retryAfterMs;
  }
}

/** A submitted run's ticket: `await wait()` before the work, `release()` in `finally`. */
export interface Ticket {
  readonly identity: Identity;
  /** Resolves once admitted; rejects with a refusal (see {@link AuthorityScheduler}). */
  wait(): Promise<void>;
  /** Free the slot, or withdraw the ticket while it waits. Idempotent, and never an unhandled
   * rejection when not awaited (AgenticDriver calls it without `await`). An admitted run may
   * say what its provider call came to (an outcome, or the error it ended in), which moves an
   * adaptive account cap on the authority. */
  release(report?: ReleaseReport): Promise<void>;
}

class AuthorityTicket implements Ticket {
  private admitted: Promise<Held>;
  private slot: Held | undefined;
  private released: Promise<void> | undefined;
  private readonly withdraw = new AbortController();

  constructor(
    private readonly scheduler: AuthorityScheduler,
    readonly identity: Identity,
    mode: "queue" | "try",
    private readonly signal: AbortSignal | undefined,
  ) {
    this.admitted = this.run(mode);
    this.admitted.catch(() => {}); // surfaced by wait(); never an unhandled rejection
  }

  private async run(mode: "queue" | "try"): Promise<Held> {
    const s = this.scheduler;
    if (this.signal?.aborted) throw s.cancelled(this.signal);
    let r: gen.SubmitResponse;
    let req: gen.SubmitRequest;
    try {
      ({ r, req } = await s.submitRequest(this.identity, mode));
    } catch (e) {
      const local = s.localSlot(e, mode, this.signal);
      if (local === undefined) throw s.refusal(e);
      const held = await local.catch((err: unknown) => {
        throw this.signal?.aborted ? s.cancelled(this.signal) : err;
      });
      if (this.released) {
        await held.release();
        throw s.cancelled(this.signal, "the ticket was released before it was admitted");
      }
      this.slot = held;
      s.active += 1;
      return held;
    }
    const queued = r.state === gen.TicketState.TICKET_STATE_QUEUED ? 1 : 0;
    s.queued += queued;
    const stopWaiting = AbortSignal.any([this.withdraw.signal, ...(this.signal ? [this.signal] : [])]);
    let grant = r.grant;
    // The ticket followed: a run whose ticket was lost, or lapsed before its admission reached
    // this replica, asks again and follows the new one (see AdmissionClient.admitQueued).
    const current = { ticketId: r.ticketId, leaseTtlMs: r.leaseTtlMs };
    try {
      if (stopWaiting.aborted) throw s.cancelled(this.signal);
      if (r.state === gen.TicketState.TICKET_STATE_QUEUED) {
        grant = await s.client.admitQueued(current, req, stopWaiting);
      } else if (r.state !== gen.TicketState.TICKET_STATE_ADMITTED) {
        throw new TicketEndedError(r.ticketId, gen.ticketStateToJSON(r.state).replace(/^TICKET_STATE_/, ""));
      }
    } catch (e) {
      await s.inOrder(() => s.client.releaseTicket(current.ticketId)).catch(() => {}); // its lease frees it otherwise
      throw stopWaiting.aborted ? s.cancelled(this.signal) : s.refusal(e);
    } finally {
      s.queued -= queued;
    }
    r = { ...r, ticketId: current.ticketId, leaseTtlMs: current.leaseTtlMs };
    // Its renewals re-register the ticket if the authority loses it while the run runs.
    const slot = new SlotHandle(s.client, r.ticketId, grant, r.leaseTtlMs, "", {
      ticketId: r.ticketId,
      hostId: req.hostId,
      runId: req.runId,
      subject: req.subject,
      accountId: req.accountId,
      instanceId: req.instanceId,
      grant,
      priority: req.priority,
      key: req.key,
      keyPolicy: req.keyPolicy,
    });
    if (this.released) {
      await s.inOrder(() => slot.release()).catch(() => {});
      throw s.cancelled(this.signal, "the ticket was released before it was admitted");
    }
    this.slot = slot;
    s.active += 1;
    return slot;
  }

  async wait(): Promise<void> {
    await this.admitted;
  }

  release(report?: ReleaseReport): Promise<void> {
    if (!this.released) {
      this.released = (async () => {
        this.withdraw.abort();
        const slot = this.slot;
        if (slot) {
          this.slot = undefined;
          this.scheduler.active -= 1;
          await this.scheduler.inOrder(() => slot.release(report));
        } else {
          await this.admitted.then(
            (s) => this.scheduler.inOrder(() => s.release()),
            () => {},
          );
        }
      })();
      // Awaiting callers still see a failure; callers that do not await are not crashed by it.
      this.released.catch(() => {});
    }
    return this.released;
  }
}

export interface SchedulerOptions {
  /** Sent with every Submit: this replica's resident memory in MiB (default: process RSS). */
  rssMb?: () => number | undefined;
  /** The class refusals are thrown as, constructed `new errorClass(code, message, retryable)`:
   * pass AgenticDriver's `DriverError` so its driver and job service recognise BUSY and
   * QUEUE_FULL ("try later") instead of turning them into INTERNAL_ERROR. Default:
   * {@link SchedulerError}. */
  errorClass?: ErrorClass;
  /** While the authority cannot be reached: "closed" (the default) refuses BUSY with reason
   * UNAVAILABLE; "local" admits through a local cap of this replica's own
   * (`localMaxConcurrent`, default 1; `localQueueDepth` waiters, default 0), counted in
   * `localAdmitted` and logged once per outage, and goes back to the authority as soon as it
   * answers. The same meaning as the Python PraisonAI gate's `failure_mode="local"`. Auth
   * checks never fall back. */
  failureMode?: "closed" | "local";
  localMaxConcurrent?: number;
  localQueueDepth?: number;
}

/** While the authority is known unreachable, a Submit is tried for this long only, so local
 * admissions do not each wait out the client's whole deadline. */
const UNREACHABLE_TRY_MS = 1000;

/** A replica's own cap, used only while the authority cannot be reached. */
class LocalCap {
  active = 0;
  private readonly waiters: Array<() => void> = [];

  constructor(
    readonly max: number,
    readonly depth: number,
  ) {}

  /** Admitted at once or after queueing; `undefined` when full (BUSY). */
  acquire(queue: boolean, signal: AbortSignal | undefined): Promise<void> | undefined {
    if (this.active < this.max) {
      this.active += 1;
      return Promise.resolve();
    }
    if (!queue || this.waiters.length >= this.depth) return undefined;
    return new Promise((resolve, reject) => {
      const admit = () => {
        signal?.removeEventListener("abort", onAbort);
        this.active += 1;
        resolve();
      };
      const onAbort = () => {
        const i = this.waiters.indexOf(admit);
        if (i >= 0) this.waiters.splice(i, 1);
        reject(signal?.reason);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.waiters.push(admit);
    });
  }

  release(): void {
    this.active -= 1;
    this.waiters.shift()?.();
  }
}

/** What an admitted ticket holds: an authority slot, or (failure mode "local") a local one. */
interface Held {
  release(report?: ReleaseReport): Promise<void>;
}

/** How long a host's "does it cap accounts" answer is reused. */
const ACCOUNTS_CAPPED_TTL_MS = 1000;

/**
 * AgenticDriver's scheduler on the authority's tickets. Caps, queue and fairness are the
 * authority's (per `identity.hostId`); `stats` counts this object's own tickets.
 *
 * Unlike AgenticDriver's process-local scheduler, `submit` and `trySubmit` cannot know at once
 * whether a slot is free (the authority decides over the network): both return a ticket at
 * once and report a refusal from `wait()`. A `trySubmit` ticket never queues: its `wait()`
 * rejects with BUSY when no slot is free. An authority that cannot be reached is BUSY too
 * (retryable, reason UNAVAILABLE): nothing runs without its admission.
 */
export class AuthorityScheduler {
  /** @internal */ active = 0;
  /** @internal */ queued = 0;
  private readonly rssMb: () => number | undefined;
  private readonly errorClass: ErrorClass;
  /** The last call sent (Submit, Release, a withdrawal): the next one waits for its answer,
   * so every call of this scheduler reaches the authority in the order it was made (gRPC calls
   * on one channel may otherwise overtake each other, and a Release that overtakes a Submit
   * changes whose turn comes next). */
  private lastCall: Promise<unknown> = Promise.resolve();
  private readonly failureMode: "closed" | "local";
  private readonly local: LocalCap;
  /** Set while the last Submit found the authority unreachable. */
  private unreachable = false;
  /** Tickets admitted on the local cap while the authority could not be reached. */
  localAdmitted = 0;
  private readonly accountsCapped = new Map<string, { until: number; capped: Promise<boolean>; value?: boolean }>();

  constructor(
    readonly client: AdmissionClient,
    options: SchedulerOptions = {},
  ) {
    this.rssMb = options.rssMb ?? (() => Math.floor(process.memoryUsage.rss() / (1024 * 1024)));
    this.errorClass = options.errorClass ?? SchedulerError;
    this.failureMode = options.failureMode ?? "closed";
    this.local = new LocalCap(Math.max(1, options.localMaxConcurrent ?? 1), Math.max(0, options.localQueueDepth ?? 0));
  }

  /** @internal Under failure mode "local", a local slot for a Submit that found the authority
   * unreachable (resolves when admitted; BUSY when the local cap and queue are full);
   * `undefined` when the error is not an unreachable authority or the mode is "closed". */
  localSlot(e: unknown, mode: "queue" | "try", signal: AbortSignal | undefined): Promise<Held> | undefined {
    const unreachable = e instanceof AdmissionError && !(e instanceof AdmissionRefusedError) && e.retryable;
    if (this.failureMode !== "local" || !unreachable) return undefined;
    if (!this.unreachable) {
      this.unreachable = true;
      console.warn(
        `admission authority unreachable (${(e as Error).message}): admitting on this replica's local cap of ${this.local.max}`,
      );
    }
    const got = this.local.acquire(mode === "queue", signal);
    if (got === undefined) {
      return Promise.reject(
        this.error("BUSY", "the authority is unreachable and the local cap is full; retry later", true, {
          reason: "UNAVAILABLE",
          cause: e,
        }),
      );
    }
    return got.then(() => {
      this.localAdmitted += 1;
      let released = false;
      return {
        release: async () => {
          if (released) return;
          released = true;
          this.local.release();
        },
      };
    });
  }

  /** Submit a run; the ticket queues if no slot is free. Never throws: `wait()` reports. */
  submit(identity: Identity, signal?: AbortSignal): Ticket {
    this.refuseUnboundNow(identity);
    return new AuthorityTicket(this, identity, "queue", signal);
  }

  /** A provider run without an account, on a host known (within the last second) to cap
   * accounts, is refused at once by `submit()`, as AgenticDriver's own scheduler does; while
   * that is not known yet the refusal comes from `wait()`, with the same code. Every provider
   * run keeps what is known fresh (one GetStats a second per host at most), so the next one
   * can be refused at once. */
  private refuseUnboundNow(identity: Identity): void {
    if (!identity.provider) return;
    const hostId = identity.hostId ?? this.client.hostId;
    const known = this.accountsCapped.get(hostId);
    const fresh = known !== undefined && known.until > Date.now();
    if (fresh && known.value === true && !identity.accountId) throw this.unbound(hostId, identity.provider);
    if (!fresh) this.capsAccounts(hostId).catch(() => {});
  }

  /** Submit a run that never queues: `wait()` resolves if a slot was free and rejects with
   * BUSY (retryable) if not. Never throws. */
  trySubmit(identity: Identity, signal?: AbortSignal): Ticket {
    return new AuthorityTicket(this, identity, "try", signal);
  }

  /** This object's tickets: admitted (`active`) and waiting (`queued`). */
  get stats(): { active: number; queued: number } {
    return { active: this.active, queued: this.queued };
  }

  /** @internal A refusal of this scheduler's error class. */
  error(code: SchedulerErrorCode, message: string, retryable: boolean, details: RefusalDetails = {}): Error {
    if (this.errorClass === SchedulerError) return new SchedulerError(code, message, retryable, details);
    const e = new this.errorClass(code, message, retryable);
    return Object.assign(e, { reason: details.reason ?? code, retryAfterMs: details.retryAfterMs, cause: details.cause });
  }

  /** @internal A signal's abort as the host expects it: its reason when that is already of
   * the error class (AgenticDriver aborts with a DriverError), else CANCELLED. */
  cancelled(signal: AbortSignal | undefined, why = "the run was cancelled while it waited"): Error {
    if (signal?.aborted && signal.reason instanceof this.errorClass) return signal.reason as Error;
    const detail = signal?.aborted && signal.reason instanceof Error ? `: ${signal.reason.message}` : "";
    return this.error("CANCELLED", `${why}${detail}`, false);
  }

  /** @internal An authority refusal, a ticket that ended while queued, or an unreachable
   * authority, in AgenticDriver's codes. */
  refusal(e: unknown): unknown {
    if (e instanceof this.errorClass) return e;
    if (e instanceof AdmissionRefusedError) {
      // MEMORY_PRESSURE and DRAINING are "busy now, retry later" to a host.
      const code = e.reason === "QUEUE_FULL" ? "QUEUE_FULL" : "BUSY";
      return this.error(code, e.message, true, { reason: e.reason, retryAfterMs: e.retryAfterMs, cause: e });
    }
    if (e instanceof TicketEndedError) {
      // Shed from the queue to make room (overflow_policy shed_oldest): the queue was full.
      if (e.state === "SHED") return this.error("QUEUE_FULL", e.message, true, { reason: "SHED", cause: e });
      if (e.state === "CANCELLED") return this.error("CANCELLED", e.message, false, { cause: e });
      return this.error("BUSY", e.message, true, { reason: e.state, cause: e });
    }
    // A bug, not "later": bad input, or a call after the client was closed.
    if (e instanceof AdmissionError && e.code === grpcStatus.INVALID_ARGUMENT) return e;
    if (e instanceof ClientClosedError) return e;
    if (e instanceof AdmissionError) {
      const message = `the admission authority could not be reached (${e.message}); retry later`;
      return this.error("BUSY", message, true, { reason: "UNAVAILABLE", cause: e });
    }
    return e;
  }

  /** @internal */
  submitRequest(
    identity: Identity,
    mode: "queue" | "try",
  ): Promise<{ r: gen.SubmitResponse; req: gen.SubmitRequest }> {
    return this.inOrder(() => this.sendSubmit(identity, mode));
  }

  /** @internal Send `call` after every call made before it has been answered. */
  inOrder<T>(call: () => Promise<T>): Promise<T> {
    const sent = this.lastCall.then(call);
    this.lastCall = sent.catch(() => {});
    return sent;
  }

  private async sendSubmit(
    identity: Identity,
    mode: "queue" | "try",
  ): Promise<{ r: gen.SubmitResponse; req: gen.SubmitRequest }> {
    const hostId = identity.hostId ?? this.client.hostId;
    if (identity.provider && !identity.accountId && (await this.capsAccounts(hostId))) {
      throw this.unbound(hostId, identity.provider);
    }
    const runId = randomUUID();
    const req: gen.SubmitRequest = {
      hostId,
      instanceId: this.client.instanceId,
      subject: identity.subject,
      accountId: identity.accountId ?? "",
      runId,
      mode: mode === "try" ? gen.SubmitMode.SUBMIT_MODE_TRY : gen.SubmitMode.SUBMIT_MODE_QUEUE,
      rssMb: this.rssMb(),
      priority: 0,
      resubmitExpired: false,
      key: "",
      keyPolicy: gen.KeyPolicy.KEY_POLICY_NONE,
      supersedeRunning: false,
    };
    try {
      const opts = this.unreachable ? { timeoutMs: UNREACHABLE_TRY_MS } : {};
      const r = await this.client.call(this.client.stub.submit, req, opts);
      if (this.unreachable) {
        this.unreachable = false;
        console.warn("admission authority reachable again: admitting through it");
      }
      return { r, req };
    } catch (e) {
      // Given up on after the client's retries, it may still have made a ticket: free its run.
      if (e instanceof AdmissionError && e.mayHaveApplied) this.client.releaseRunSoon(runId, hostId);
      throw e;
    }
  }

  /** A provider run without an account on a host that caps accounts: it would escape them. */
  private unbound(hostId: string, provider: string): Error {
    return this.error(
      "ADMISSION_IDENTITY_REQUIRED",
      `host ${hostId} caps accounts: a run for provider ${provider} must name its accountId`,
      false,
    );
  }

  /** Whether the host caps accounts (Stats.accounts_capped), asked at most once a second. */
  private capsAccounts(hostId: string): Promise<boolean> {
    const known = this.accountsCapped.get(hostId);
    if (known && known.until > Date.now()) return known.capped;
    const entry: { until: number; capped: Promise<boolean>; value?: boolean } = {
      until: Date.now() + ACCOUNTS_CAPPED_TTL_MS,
      capped: this.client.call(this.client.stub.getStats, { hostId }).then((s) => (entry.value = s.accountsCapped)),
    };
    this.accountsCapped.set(hostId, entry);
    entry.capped.catch(() => this.accountsCapped.delete(hostId));
    return entry.capped;
  }
}

/** Open runs a resource admission object remembers for settling (see `finish`). */
const MAX_OPEN_RUNS = 100_000;

/** What the host passes to `authorize` before every model step (AgenticDriver's
 * `ResourceAdmissionContext`). */
export interface ResourceContext {
  identity: Identity;
  runId: string;
  model: string;
  /** 1-based. */
  step: number;
  /** The run's cumulative usage so far (all earlier steps): AgenticDriver's `meter.snapshot()`,
   * or flat numbers (taken as complete). When present, the run's step authorized before is
   * settled from it before this one is authorized. */
  usage?: UsageNumbers | MeterSnapshot;
  /** Output tokens this step may ask for (default: the object's `requestedOutputTokens`). */
  requestedOutputTokens?: number;
  estimatedInputTokens?: number;
  signal?: AbortSignal;
}

/** Cumulative usage as numbers. */
export interface UsageNumbers {
  inputTokens?: number;
  outputTokens?: number;
  costUsd?: number;
}

/** AgenticDriver's usage meter snapshot (also the usage part of the record its `onUsage`
 * receives): `usage` holds a field only when every started step reported it, `observedUsage`
 * the sums of what was reported, `coverage` how many steps started, completed, and reported
 * each field. */
export interface MeterSnapshot {
  usage: UsageNumbers;
  observedUsage: UsageNumbers;
  coverage: {
    startedSteps: number;
    completedSteps: number;
    reportedSteps: Partial<Record<string, number>>;
  };
}

/** A point of a run's cumulative usage, as the settling arithmetic needs it. */
interface UsagePoint {
  numbers: Required<UsageNumbers>;
  /** Per field, the steps that reported it; undefined for flat numbers (complete). */
  reported?: Record<keyof UsageNumbers, number>;
  started: number;
  completed: number;
  /** Fields whose observed sum was lost (the meter drops a total that overflows). */
  lost: Set<keyof UsageNumbers>;
}

const FIELDS = ["inputTokens", "outputTokens", "costUsd"] as const;

function isSnapshot(u: UsageNumbers | MeterSnapshot): u is MeterSnapshot {
  return typeof (u as MeterSnapshot).coverage === "object" && (u as MeterSnapshot).coverage !== null;
}

function pointOf(u: UsageNumbers | MeterSnapshot | undefined): UsagePoint {
  if (!u) return { numbers: { inputTokens: 0, outputTokens: 0, costUsd: 0 }, started: 0, completed: 0, lost: new Set() };
  if (!isSnapshot(u)) {
    return {
      numbers: { inputTokens: u.inputTokens ?? 0, outputTokens: u.outputTokens ?? 0, costUsd: u.costUsd ?? 0 },
      started: 0,
      completed: 0,
      lost: new Set(),
    };
  }
  const observed = u.observedUsage ?? {};
  const reported = u.coverage.reportedSteps ?? {};
  const lost = new Set(FIELDS.filter((f) => (reported[f] ?? 0) > 0 && observed[f] === undefined));
  return {
    numbers: { inputTokens: observed.inputTokens ?? 0, outputTokens: observed.outputTokens ?? 0, costUsd: observed.costUsd ?? 0 },
    reported: { inputTokens: reported.inputTokens ?? 0, outputTokens: reported.outputTokens ?? 0, costUsd: reported.costUsd ?? 0 },
    started: u.coverage.startedSteps ?? 0,
    completed: u.coverage.completedSteps ?? 0,
    lost,
  };
}

/** The usage between two points of a run and how much of it was measured: complete when
 * every provider call that started in between completed and reported the measured fields
 * (tokens; cost too with `requireCost`), partial when some of it was reported, unknown when
 * none was. No call started in between: nothing was used (complete zeros). */
function usageBetween(then: UsagePoint, now: UsagePoint | undefined, requireCost: boolean): gen.Usage {
  if (!now) return { inputTokens: 0, outputTokens: 0, costUsd: 0, coverage: gen.Coverage.COVERAGE_UNKNOWN };
  const since = (f: keyof UsageNumbers) => Math.max(0, now.numbers[f] - then.numbers[f]);
  const usage = { inputTokens: since("inputTokens"), outputTokens: since("outputTokens"), costUsd: since("costUsd") };
  if (!now.reported || !then.reported) return { ...usage, coverage: gen.Coverage.COVERAGE_COMPLETE };
  const started = now.started - then.started;
  const completed = now.completed - then.completed;
  if (started <= 0) return { ...usage, coverage: gen.Coverage.COVERAGE_COMPLETE };
  const measured: (keyof UsageNumbers)[] = requireCost ? [...FIELDS] : ["inputTokens", "outputTokens"];
  const reportedBy = (f: keyof UsageNumbers) => (now.lost.has(f) ? 0 : now.reported![f] - then.reported![f]);
  const coverage =
    completed === started && measured.every((f) => reportedBy(f) === started)
      ? gen.Coverage.COVERAGE_COMPLETE
      : measured.some((f) => reportedBy(f) > 0)
        ? gen.Coverage.COVERAGE_PARTIAL
        : gen.Coverage.COVERAGE_UNKNOWN;
  return { ...usage, coverage };
}

export interface ResourceAdmissionOptions {
  /** What the host does with an "unknown" answer (the authority's `unknown_usage: defer`).
   * Default "reject". */
  unknown?: "reject" | "allow";
  /** Output tokens requested per step when the context does not say (default 4096). */
  requestedOutputTokens?: number;
  /** Count a step's usage as complete only when the provider also reported its cost (for
   * cost budgets). Default false: a provider that never reports cost settles cost 0. */
  requireCost?: boolean;
}

/** The part of AgenticDriver's usage record (`DriverOptions.onUsage`) that settles a run. */
export type RunUsageRecord = MeterSnapshot & {
  runId: string;
  hostId: string;
  accountId?: string;
  subject: string;
  provider: string;
};

/**
 * AgenticDriver's resource admission on Authorize / Settle. The authority is the ledger: a step
 * is authorized against the run's budget and the account's allowance; the usage snapshot the
 * host passes at the next step settles the previous one, and the run's usage record
 * (`settleRun`, from the driver's `onUsage`) settles its last step. A step never settled makes
 * the run's usage unknown, and the budget's `unknown_usage` decides.
 */
export class AuthorityResourceAdmission {
  readonly unknown: "reject" | "allow";
  private readonly requestedOutputTokens: number;
  private readonly requireCost: boolean;
  /** Per (host, run): the last authorized step not yet settled, and the usage then. */
  private readonly open = new Map<string, { step: number; usage: UsagePoint }>();

  constructor(
    private readonly client: AdmissionClient,
    options: ResourceAdmissionOptions = {},
  ) {
    this.unknown = options.unknown ?? "reject";
    this.requestedOutputTokens = options.requestedOutputTokens ?? 4096;
    this.requireCost = options.requireCost ?? false;
  }

  /** "allow", "deny" or "unknown" for one model step; throws when the authority cannot answer
   * (AgenticDriver then fails the run closed: RESOURCE_POLICY_UNAVAILABLE). */
  async authorize(context: ResourceContext): Promise<"allow" | "deny" | "unknown"> {
    context.signal?.throwIfAborted();
    const { identity, runId } = context;
    const hostId = identity.hostId ?? this.client.hostId;
    const key = `${hostId}\u0000${runId}`;
    const previous = this.open.get(key);
    if (previous && context.usage && previous.step < context.step) {
      await this.settleOpen(hostId, runId, context.usage);
    }
    const r = await this.client.call(this.client.stub.authorize, {
      hostId,
      runId,
      step: context.step,
      subject: identity.subject,
      accountId: identity.accountId ?? "",
      model: context.model,
      requestedOutputTokens: context.requestedOutputTokens ?? this.requestedOutputTokens,
      estimatedInputTokens: context.estimatedInputTokens ?? 0,
      estimatedCostUsd: 0,
    });
    switch (r.decision) {
      case gen.Decision.DECISION_ALLOW:
        // Runs a host abandons without settling are forgotten oldest first beyond this bound
        // (their last step stays unsettled at the authority, counted as fully spent).
        if (this.open.size >= MAX_OPEN_RUNS) this.open.delete(this.open.keys().next().value!);
        this.open.set(key, { step: context.step, usage: pointOf(context.usage) });
        return "allow";
      case gen.Decision.DECISION_UNKNOWN:
        return "unknown";
      case gen.Decision.DECISION_DENY:
        return "deny";
      default:
        throw new AdmissionError(`Authorize answered decision ${r.decision}`, grpcStatus.UNKNOWN);
    }
  }

  /** Settle a run's last authorized step when the run ends (`usage` is the run's cumulative
   * usage, as in the context; absent = unknown). Nothing to settle: nothing is sent. */
  async finish(identity: Identity, runId: string, usage: ResourceContext["usage"]): Promise<void> {
    await this.settleOpen(identity.hostId ?? this.client.hostId, runId, usage);
  }

  /** Settle a run's last step from the usage record AgenticDriver hands its `onUsage` hook
   * when a run ends (the driver itself never calls `finish`):
   * `new AgenticDriver({ ..., onUsage: (record) => admission.settleRun(record) })`. */
  settleRun(record: RunUsageRecord): Promise<void> {
    return this.settleOpen(record.hostId, record.runId, record);
  }

  /** Settle the run's open step with the usage since it was authorized (`usage` is the run's
   * cumulative usage; absent = unknown). */
  private async settleOpen(hostId: string, runId: string, usage: ResourceContext["usage"]): Promise<void> {
    const key = `${hostId}\u0000${runId}`;
    const open = this.open.get(key);
    if (!open) return;
    this.open.delete(key);
    await this.client.call(this.client.stub.settle, {
      hostId,
      runId,
      step: open.step,
      usage: usageBetween(open.usage, usage ? pointOf(usage) : undefined, this.requireCost),
    });
  }
}
