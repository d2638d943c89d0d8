// A host's newest endings (Operator/ListEndedTickets): tickets released, cancelled, shed,
// expired or superseded, and Submits refused, with who they were and why. The page's filter
// applies to them as to the live tickets, and their columns sort.

import { pb } from "./api.js";
import { duration, h, row, type Sorting, table } from "./dom.js";

const ENDED: Record<number, string> = {
  [pb.TicketState.TICKET_STATE_RELEASED]: "released",
  [pb.TicketState.TICKET_STATE_CANCELLED]: "cancelled",
  [pb.TicketState.TICKET_STATE_SHED]: "shed",
  [pb.TicketState.TICKET_STATE_EXPIRED]: "expired",
  [pb.TicketState.TICKET_STATE_SUPERSEDED]: "superseded",
};

/** How it ended, as the filter's states name it: a terminal state, or "refused". */
export function endedState(e: pb.EndedTicket): string {
  return e.refusal !== "" ? "refused" : (ENDED[e.state] ?? "");
}

/** The columns the table sorts by. */
export const ENDED_SORT: Record<number, (e: pb.EndedTicket) => string | number> = {
  0: (e) => e.endedUnixMs,
  1: (e) => e.runId,
  2: (e) => e.subject,
  3: (e) => e.accountId,
  4: (e) => e.instanceId,
  5: (e) => e.key,
  6: (e) => endedState(e),
};

/** An ending the page's filter lets through, as `shown` does for live tickets. */
export function endedShown(e: pb.EndedTicket, filter: { text: string; state: string }): boolean {
  if (filter.state !== "" && endedState(e) !== filter.state) return false;
  if (filter.text === "") return true;
  const text = filter.text.toLowerCase();
  return [e.runId, e.subject, e.accountId, e.key, e.ticketId].some((v) => v.toLowerCase().includes(text));
}

/** What ended it, in words: the ticket that superseded it (by its run when the page knows
 * it), or the refusal's reason. */
function how(e: pb.EndedTicket, runOf: Map<string, string>): string {
  if (e.refusal !== "") return `refused ${e.refusal}`;
  const state = endedState(e);
  if (e.supersededBy === "") return state;
  const run = runOf.get(e.supersededBy);
  return `superseded by ${run !== undefined ? `run ${run}` : "ticket"} (${short(e.supersededBy)})`;
}

function short(ticketId: string): string {
  return ticketId.length > 8 ? `…${ticketId.slice(-8)}` : ticketId;
}

/** The table of `list` (already filtered and sorted); `runOf` names tickets' runs. */
export function endedTable(list: pb.EndedTicket[], runOf: Map<string, string>, filtering: boolean, sorting: Sorting): HTMLElement {
  const now = Date.now();
  const rows = list.map((e) =>
    row(
      { "data-ended": e.ticketId !== "" ? e.ticketId : `refused:${e.runId}`, "data-state": endedState(e) },
      h("td", { title: `${duration(Math.max(0, now - e.endedUnixMs))} ago` }, new Date(e.endedUnixMs).toLocaleTimeString()),
      e.runId,
      e.subject,
      e.accountId,
      e.instanceId,
      e.key,
      how(e, runOf),
      e.ticketId !== "" ? h("td", { title: e.ticketId }, short(e.ticketId)) : "",
    ),
  );
  return table(
    ["ended", "run", "subject", "account", "gateway instance", "key", "how", "ticket"],
    rows,
    filtering ? "No recent ending matches the filter." : "Nothing ended on this host since the authority started.",
    sorting,
  );
}
