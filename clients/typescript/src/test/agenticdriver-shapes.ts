/**
 * AgenticDriver's call shapes, as its driver and job service use a scheduler and a resource
 * admission. Its package is not published, so the tests reproduce the shapes they depend on
 * (written from its documented behaviour, not copied): its error class, how its callers tell a
 * "try later" refusal from a failure, its usage meter's snapshot, and the order its job worker
 * and driver call a scheduler in.
 */

/** AgenticDriver's error type: a code, a message, and whether a retry may succeed. */
export class DriverError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly retryable = false,
  ) {
    super(message);
    this.name = "DriverError";
  }

  toJSON(): { code: string; message: string; retryable: boolean } {
    return { code: this.code, message: this.message, retryable: this.retryable };
  }
}

/** What AgenticDriver reports for a failure: its own errors as they are, an aborted signal as
 * its reason (or CANCELLED), anything else as a non-retryable INTERNAL_ERROR. */
export function publicError(error: unknown, signal?: AbortSignal): DriverError {
  if (signal?.aborted) {
    return signal.reason instanceof DriverError ? signal.reason : new DriverError("CANCELLED", "cancelled");
  }
  if (error instanceof DriverError) return error;
  return new DriverError("INTERNAL_ERROR", "The operation failed.");
}

/** The scheduler surface AgenticDriver calls: both submits synchronous, returning a ticket. */
export interface DriverScheduler {
  submit(identity: object, signal: AbortSignal): { wait(): Promise<void>; release(): unknown };
  trySubmit(identity: object, signal: AbortSignal): { wait(): Promise<void>; release(): unknown } | undefined;
}

/**
 * One dispatch of a durable job, in the job worker's order: a synchronous trySubmit, no
 * ticket = not now; wait; run; on BUSY or QUEUE_FULL (of its error type) the job stays queued
 * for the next poll; any other error fails the job with its public error; the ticket is
 * released without being awaited.
 */
export async function dispatchJob(
  scheduler: DriverScheduler,
  identity: object,
  work: () => Promise<void>,
): Promise<{ state: "done" | "queued" } | { state: "failed"; error: ReturnType<DriverError["toJSON"]> }> {
  const controller = new AbortController();
  let ticket: ReturnType<DriverScheduler["trySubmit"]>;
  try {
    ticket = scheduler.trySubmit(identity, controller.signal);
    if (!ticket) return { state: "queued" };
    await ticket.wait();
    await work();
    return { state: "done" };
  } catch (error) {
    if (error instanceof DriverError && ["BUSY", "QUEUE_FULL"].includes(error.code)) return { state: "queued" };
    return { state: "failed", error: publicError(error, controller.signal).toJSON() };
  } finally {
    controller.abort();
    ticket?.release();
  }
}

/**
 * A foreground run, in the driver's order, with the host's ticket passed as the run's
 * admission: the driver awaits `admission()` before its first step and reports a failure as
 * its public error; the host releases the ticket when the run ends.
 */
export async function foregroundRun(
  scheduler: DriverScheduler,
  identity: object,
  signal: AbortSignal,
  work: () => Promise<void>,
): Promise<{ type: "run.completed" } | { type: "run.failed" | "run.cancelled"; error: ReturnType<DriverError["toJSON"]> }> {
  const ticket = scheduler.submit(identity, signal);
  const admission = () => ticket.wait();
  try {
    await admission();
    signal.throwIfAborted();
    await work();
    return { type: "run.completed" };
  } catch (error) {
    return { type: signal.aborted ? "run.cancelled" : "run.failed", error: publicError(error, signal).toJSON() };
  } finally {
    ticket.release();
  }
}

/** AgenticDriver's usage meter: a step starts, then completes with what its provider reported
 * (any field may be missing). `usage` holds a field only when every started step reported it. */
export class UsageMeter {
  private started = 0;
  private completed = 0;
  private readonly observed: Record<string, number> = {};
  private readonly reported: Record<string, number> = {};

  start(): void {
    this.started++;
  }

  add(usage: { inputTokens?: number; outputTokens?: number; costUsd?: number } = {}): void {
    this.completed++;
    for (const [field, value] of Object.entries(usage)) {
      if (value === undefined) continue;
      this.reported[field] = (this.reported[field] ?? 0) + 1;
      this.observed[field] = (this.observed[field] ?? 0) + value;
    }
  }

  snapshot() {
    const usage: Record<string, number> = {};
    for (const [field, value] of Object.entries(this.observed)) {
      if (this.started > 0 && this.completed === this.started && this.reported[field] === this.started) {
        usage[field] = value;
      }
    }
    return {
      usage,
      observedUsage: { ...this.observed },
      coverage: { startedSteps: this.started, completedSteps: this.completed, reportedSteps: { ...this.reported } },
    };
  }
}
