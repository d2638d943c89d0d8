/**
 * AgenticDriver-shaped objects: pass them where an AgenticDriver host passes its own scheduler and
 * resource admission, and the authority decides for every replica at once.
 *
 * - {@link AuthorityScheduler}: `submit(identity, signal)` → ticket (`wait()`, `release()`),
 *   `trySubmit(identity, signal)` → ticket or `undefined` when busy, `stats` → `{ active, queued }`.
 *   Refusals are {@link SchedulerError}s with code `BUSY`, `QUEUE_FULL` (retryable) or
 *   `CANCELLED`.
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
  type ReleaseReport,
  SlotHandle,
  TicketEndedError,
} from "./index.js";

/** Who a run is for, as AgenticDriver names it. */
export interface Identity {
  /** The gateway installation: the authority's `host_id` (caps and budgets are per host). */
  hostId: string;
  /** Account capacity is shared per (hostId, accountId); absent = unbound. */
  accountId?: string;
  /** The authority's subject: per-subject caps and round-robin fairness. */
  subject: string;
  /** The model provider; not used for admission (budgets use `model` in authorize). */
  provider: string;
}

export type SchedulerErrorCode = "BUSY" | "QUEUE_FULL" | "CANCELLED";

/** A scheduling refusal. BUSY and QUEUE_FULL are retryable (after `retryAfterMs`). */
export class SchedulerError extends Error {
  readonly retryable: boolean;

  constructor(
    readonly code: SchedulerErrorCode,
    message: string,
    /** The authority's own reason: BUSY, QUEUE_FULL, MEMORY_PRESSURE, DRAINING, SHED, ... */
    readonly reason: string = code,
    readonly retryAfterMs?: number,
  ) {
    super(message);
    this.name = "SchedulerError";
    this.retryable = code !== "CANCELLED";
  }
}

/** An authority refusal or a ticket that ended while queued, in AgenticDriver's codes. */
function schedulerError(e: unknown): unknown {
  if (e instanceof AdmissionRefusedError) {
    // MEMORY_PRESSURE and DRAINING are "busy now, retry later" to a host.
    const code = e.reason === "QUEUE_FULL" ? "QUEUE_FULL" : "BUSY";
    return new SchedulerError(code, e.message, e.reason, e.retryAfterMs);
  }
  if (e instanceof TicketEndedError) {
    // Shed from the queue to make room (overflow_policy shed_oldest): the queue was full.
    if (e.state === "SHED") return new SchedulerError("QUEUE_FULL", e.message, "SHED");
    if (e.state === "CANCELLED") return new SchedulerError("CANCELLED", e.message, "CANCELLED");
    return new SchedulerError("BUSY", e.message, e.state);
  }
  return e;
}

function cancelled(signal: AbortSignal | undefined): SchedulerError {
  const why = signal?.reason instanceof Error ? `: ${signal.reason.message}` : "";
  return new SchedulerError("CANCELLED", `the run was cancelled while it waited${why}`);
}

/** A submitted run's ticket: `await wait()` before the work, `release()` in `finally`. */
export interface Ticket {
  readonly identity: Identity;
  /** Resolves once admitted; rejects with a {@link SchedulerError} (or an AdmissionError when
   * the authority cannot be reached). */
  wait(): Promise<void>;
  /** Free the slot, or withdraw the ticket while it waits. Idempotent. An admitted run may
   * say what its provider call came to (an outcome, or the error it ended in), which moves an
   * adaptive account cap on the authority. */
  release(report?: ReleaseReport): Promise<void>;
}

class AuthorityTicket implements Ticket {
  private admitted: Promise<SlotHandle>;
  private slot: SlotHandle | undefined;
  private released: Promise<void> | undefined;
  private readonly withdraw = new AbortController();

  constructor(
    private readonly scheduler: AuthorityScheduler,
    readonly identity: Identity,
    mode: "queue" | "try",
    private readonly signal: AbortSignal | undefined,
    /** For trySubmit: the Submit's answer, already received. */
    submitted?: Promise<gen.SubmitResponse>,
  ) {
    this.admitted = this.run(mode, submitted);
    this.admitted.catch(() => {}); // surfaced by wait(); never an unhandled rejection
  }

  private async run(mode: "queue" | "try", submitted?: Promise<gen.SubmitResponse>): Promise<SlotHandle> {
    const s = this.scheduler;
    if (this.signal?.aborted) throw cancelled(this.signal);
    let r: gen.SubmitResponse;
    try {
      r = await (submitted ?? s.submitRequest(this.identity, mode));
    } catch (e) {
      throw schedulerError(e);
    }
    s.queued += r.state === gen.TicketState.TICKET_STATE_QUEUED ? 1 : 0;
    const stopWaiting = AbortSignal.any([this.withdraw.signal, ...(this.signal ? [this.signal] : [])]);
    let grant = r.grant;
    try {
      if (stopWaiting.aborted) throw cancelled(this.signal);
      if (r.state === gen.TicketState.TICKET_STATE_QUEUED) {
        grant = await s.client.waitAdmitted(r.ticketId, stopWaiting);
      } else if (r.state !== gen.TicketState.TICKET_STATE_ADMITTED) {
        throw new TicketEndedError(r.ticketId, gen.ticketStateToJSON(r.state).replace(/^TICKET_STATE_/, ""));
      }
    } catch (e) {
      await s.client.releaseTicket(r.ticketId);
      throw stopWaiting.aborted ? cancelled(this.signal) : schedulerError(e);
    } finally {
      s.queued -= r.state === gen.TicketState.TICKET_STATE_QUEUED ? 1 : 0;
    }
    const slot = new SlotHandle(s.client, r.ticketId, grant, r.leaseTtlMs);
    if (this.released) {
      await slot.release(); // released while the answer was on its way
      throw cancelled(this.signal);
    }
    this.slot = slot;
    s.active += 1;
    return slot;
  }

  async wait(): Promise<void> {
    await this.admitted;
  }

  release(report?: ReleaseReport): Promise<void> {
    this.released ??= (async () => {
      this.withdraw.abort();
      const slot = this.slot;
      if (slot) {
        this.slot = undefined;
        this.scheduler.active -= 1;
        await slot.release(report);
      } else {
        await this.admitted.then(
          (s) => s.release(),
          () => {},
        );
      }
    })();
    return this.released;
  }
}

export interface SchedulerOptions {
  /** Sent with every Submit: this replica's resident memory in MiB (default: process RSS). */
  rssMb?: () => number | undefined;
}

/**
 * AgenticDriver's scheduler on the authority's tickets. Caps, queue and fairness are the
 * authority's (per `identity.hostId`); `stats` counts this object's own tickets.
 */
export class AuthorityScheduler {
  /** @internal */ active = 0;
  /** @internal */ queued = 0;
  private readonly rssMb: () => number | undefined;
  /** The last Submit sent: the next one waits for its answer, so Submits reach the authority
   * in the order they were made (gRPC calls on one channel may otherwise overtake each other,
   * and the queue's order is the round robin's). */
  private lastSubmit: Promise<unknown> = Promise.resolve();

  constructor(
    readonly client: AdmissionClient,
    options: SchedulerOptions = {},
  ) {
    this.rssMb = options.rssMb ?? (() => Math.floor(process.memoryUsage.rss() / (1024 * 1024)));
  }

  /** Submit a run; the ticket queues if no slot is free. Never throws: `wait()` reports. */
  submit(identity: Identity, signal?: AbortSignal): Ticket {
    return new AuthorityTicket(this, identity, "queue", signal);
  }

  /** A ticket admitted now, or `undefined` when no slot is free. Never queues. Other refusals
   * (QUEUE_FULL cannot happen; MEMORY_PRESSURE, DRAINING) reject with a SchedulerError. */
  async trySubmit(identity: Identity, signal?: AbortSignal): Promise<Ticket | undefined> {
    if (signal?.aborted) throw cancelled(signal);
    let r: gen.SubmitResponse;
    try {
      r = await this.submitRequest(identity, "try");
    } catch (e) {
      if (e instanceof AdmissionRefusedError && e.reason === "BUSY") return undefined;
      throw schedulerError(e);
    }
    const ticket = new AuthorityTicket(this, identity, "try", signal, Promise.resolve(r));
    await ticket.wait();
    return ticket;
  }

  /** This object's tickets: admitted (`active`) and waiting (`queued`). */
  get stats(): { active: number; queued: number } {
    return { active: this.active, queued: this.queued };
  }

  /** @internal */
  submitRequest(identity: Identity, mode: "queue" | "try"): Promise<gen.SubmitResponse> {
    const sent = this.lastSubmit.then(() => this.sendSubmit(identity, mode));
    this.lastSubmit = sent.catch(() => {});
    return sent;
  }

  private async sendSubmit(identity: Identity, mode: "queue" | "try"): Promise<gen.SubmitResponse> {
    const runId = randomUUID();
    try {
      return await this.client.call(this.client.stub.submit, {
        hostId: identity.hostId,
        instanceId: this.client.instanceId,
        subject: identity.subject,
        accountId: identity.accountId ?? "",
        runId,
        mode: mode === "try" ? gen.SubmitMode.SUBMIT_MODE_TRY : gen.SubmitMode.SUBMIT_MODE_QUEUE,
        rssMb: this.rssMb(),
        priority: 0,
      });
    } catch (e) {
      // Given up on after the client's retries, it may still have made a ticket: free its run.
      if (e instanceof AdmissionError && e.mayHaveApplied) this.client.releaseRunSoon(runId, identity.hostId);
      throw e;
    }
  }
}

/** Open runs a resource admission object remembers for settling (see `finish`). */
const MAX_OPEN_RUNS = 100_000;

/** What the host passes to `authorize` before every model step. */
export interface ResourceContext {
  identity: Identity;
  runId: string;
  model: string;
  /** 1-based. */
  step: number;
  /** The run's cumulative usage so far (all earlier steps): flat numbers, or the snapshot
   * AgenticDriver's usage meter gives (`{ usage, observedUsage, coverage }`). When present, the
   * earlier steps not yet settled are settled from it before this step is authorized, with the
   * meter's coverage (unknown when it says so). */
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

/** AgenticDriver's `meter.snapshot()`: the usage it accounts, what the provider reported, and
 * how complete that is. */
export interface MeterSnapshot {
  usage?: UsageNumbers;
  observedUsage?: UsageNumbers;
  coverage?: "complete" | "partial" | "unknown";
}

/** The numbers and coverage of either shape: the meter's accounted usage (else what was
 * observed), its coverage; flat numbers are complete. */
function usageOf(u: UsageNumbers | MeterSnapshot): { numbers: Required<UsageNumbers>; coverage: gen.Coverage } {
  const snapshot = u as MeterSnapshot;
  const isSnapshot = "usage" in u || "observedUsage" in u || "coverage" in u;
  const n: UsageNumbers = isSnapshot ? (snapshot.usage ?? snapshot.observedUsage ?? {}) : (u as UsageNumbers);
  const coverage = !isSnapshot
    ? gen.Coverage.COVERAGE_COMPLETE
    : snapshot.coverage === "partial"
      ? gen.Coverage.COVERAGE_PARTIAL
      : snapshot.coverage === "unknown" || (!snapshot.usage && !snapshot.observedUsage)
        ? gen.Coverage.COVERAGE_UNKNOWN
        : gen.Coverage.COVERAGE_COMPLETE;
  return {
    numbers: { inputTokens: n.inputTokens ?? 0, outputTokens: n.outputTokens ?? 0, costUsd: n.costUsd ?? 0 },
    coverage,
  };
}

export interface ResourceAdmissionOptions {
  /** What the host does with an "unknown" answer (the authority's `unknown_usage: defer`).
   * Default "reject". */
  unknown?: "reject" | "allow";
  /** Output tokens requested per step when the context does not say (default 4096). */
  requestedOutputTokens?: number;
}

/**
 * AgenticDriver's resource admission on Authorize / Settle. The authority is the ledger: a step
 * is authorized against the run's budget and the account's allowance; the usage snapshot the
 * host passes at the next step settles the previous one (a run whose earlier step is never
 * settled has unknown usage, and the budget's `unknown_usage` decides).
 */
export class AuthorityResourceAdmission {
  readonly unknown: "reject" | "allow";
  private readonly requestedOutputTokens: number;
  /** Per (host, run): the last authorized step not yet settled, and the usage snapshot then. */
  private readonly open = new Map<string, { step: number; usage: Required<UsageNumbers> }>();

  constructor(
    private readonly client: AdmissionClient,
    options: ResourceAdmissionOptions = {},
  ) {
    this.unknown = options.unknown ?? "reject";
    this.requestedOutputTokens = options.requestedOutputTokens ?? 4096;
  }

  /** "allow", "deny" or "unknown" for one model step; throws when the authority cannot answer. */
  async authorize(context: ResourceContext): Promise<"allow" | "deny" | "unknown"> {
    context.signal?.throwIfAborted();
    const { identity, runId } = context;
    const key = `${identity.hostId}\u0000${runId}`;
    const usage = context.usage
      ? usageOf(context.usage).numbers
      : { inputTokens: 0, outputTokens: 0, costUsd: 0 };
    const previous = this.open.get(key);
    if (previous && context.usage && previous.step < context.step) {
      await this.settleOpen(identity, runId, context.usage);
    }
    const r = await this.client.call(this.client.stub.authorize, {
      hostId: identity.hostId,
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
        // Runs a host abandons without finish() are forgotten oldest first beyond this bound
        // (their last step stays unsettled at the authority, counted as fully spent).
        if (this.open.size >= MAX_OPEN_RUNS) this.open.delete(this.open.keys().next().value!);
        this.open.set(key, { step: context.step, usage });
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
    await this.settleOpen(identity, runId, usage);
  }

  /** Settle the run's open step with the usage since it was authorized (`usage` is the run's
   * cumulative usage; absent = unknown). */
  private async settleOpen(identity: Identity, runId: string, usage: ResourceContext["usage"]): Promise<void> {
    const key = `${identity.hostId}\u0000${runId}`;
    const open = this.open.get(key);
    if (!open) return;
    this.open.delete(key);
    const now = usage ? usageOf(usage) : undefined;
    const since = (n: number | undefined, then: number) => Math.max(0, (n ?? 0) - then);
    await this.client.call(this.client.stub.settle, {
      hostId: identity.hostId,
      runId,
      step: open.step,
      usage: {
        inputTokens: since(now?.numbers.inputTokens, open.usage.inputTokens),
        outputTokens: since(now?.numbers.outputTokens, open.usage.outputTokens),
        costUsd: since(now?.numbers.costUsd, open.usage.costUsd),
        coverage: now?.coverage ?? gen.Coverage.COVERAGE_UNKNOWN,
      },
    });
  }
}
