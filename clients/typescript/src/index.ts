/**
 * TypeScript client for admission-authority: installation-wide admission for AI-agent gateway
 * replicas.
 *
 * - `client.acquire(subject, { signal })` holds a scheduler slot: it Submits, waits in the queue
 *   if need be, renews in the background, and gives back a `SlotHandle` whose `release()` (or
 *   `await using`) frees it. Aborting the signal while it waits withdraws the ticket.
 * - `authorize` / `settle` reserve and record a model step's budget; `checkAuthAttempt` counts an
 *   auth attempt.
 * - Refusals reject with `AdmissionRefusedError` carrying the reason and retry delay.
 * - A call the authority could not answer (UNAVAILABLE, DEADLINE_EXCEEDED) is repeated with the
 *   same request, so the same idempotency key, within the client's deadline; a Submit given up
 *   on that may have been applied is released by run in the background.
 * - `AuthorityScheduler`, `AuthorityResourceAdmission`: the AgenticDriver-shaped objects.
 *
 * The generated messages and stubs are exported as `gen`. The client lives in `client.ts`, the
 * AgenticDriver objects in `agenticdriver.ts`, which imports the client (never the other way).
 */

export * from "./client.js";
export * from "./agenticdriver.js";
