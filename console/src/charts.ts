// A host's last hour (Operator/GetHostHistory), drawn with uPlot: about 50 KB minified, no
// dependencies, and it draws on canvas, so an hour of 10 s buckets (360 points a series) on
// every host of the hosts page costs little. It is bundled into the console like the rest
// (no CDN); its stylesheet is bundled into console.css. The charts are kept between refreshes
// and given new data, never redrawn from scratch; the same numbers are also a table.

import uPlot from "uplot";
import { api, pb } from "./api.js";
import { fill, h, row, table } from "./dom.js";

interface Series {
  label: string;
  color: string;
  /** null: nothing to draw (no wait in the bucket). */
  value: (b: pb.HistoryBucket) => number | null;
}

interface Chart {
  id: string;
  title: string;
  series: Series[];
  /** Counts per bucket are drawn as steps; gauges and waits as lines. */
  stepped: boolean;
}

const CHARTS: Chart[] = [
  {
    id: "history-tickets",
    title: "Tickets at the end of each bucket",
    stepped: false,
    series: [
      { label: "in flight", color: "#2563eb", value: (b) => b.inFlight },
      { label: "queued", color: "#d97706", value: (b) => b.queued },
    ],
  },
  {
    id: "history-ended",
    title: "Admitted and ended per bucket",
    stepped: true,
    series: [
      { label: "admitted", color: "#16a34a", value: (b) => b.admitted },
      { label: "shed", color: "#dc2626", value: (b) => b.shed },
      { label: "superseded", color: "#7c3aed", value: (b) => b.superseded },
      { label: "expired", color: "#6b7280", value: (b) => b.expired },
    ],
  },
  {
    id: "history-refused",
    title: "Refused per bucket, by reason",
    stepped: true,
    series: [
      { label: "BUSY", color: "#dc2626", value: (b) => b.refusedBusy },
      { label: "QUEUE_FULL", color: "#ea580c", value: (b) => b.refusedQueueFull },
      { label: "MEMORY_PRESSURE", color: "#be185d", value: (b) => b.refusedMemoryPressure },
      { label: "KEY_BUSY", color: "#7c3aed", value: (b) => b.refusedKeyBusy },
    ],
  },
  {
    id: "history-waits",
    title: "Queue wait of those admitted (ms)",
    stepped: false,
    series: [
      { label: "p50", color: "#0891b2", value: (b) => (b.waited > 0 ? b.waitP50Ms : null) },
      { label: "p95", color: "#1e3a8a", value: (b) => (b.waited > 0 ? b.waitP95Ms : null) },
    ],
  },
];

/** Every refusal of a bucket, whatever its reason. */
export function refused(b: pb.HistoryBucket): number {
  return b.refusedBusy + b.refusedQueueFull + b.refusedMemoryPressure + b.refusedKeyBusy;
}

/** Each host's history as last fetched, fetched again once a bucket has passed. */
const fetched = new Map<string, { at: number; history: pb.GetHostHistoryResponse }>();

/** A host's history, from the cache while its newest bucket is still the newest there is. */
export async function historyOf(token: string, hostId: string): Promise<pb.GetHostHistoryResponse> {
  const now = Date.now();
  const known = fetched.get(hostId);
  if (known !== undefined && now - known.at < Math.max(known.history.bucketMs, 1000)) {
    return known.history;
  }
  const history = await api.getHostHistory(token, { hostId });
  fetched.set(hostId, { at: now, history });
  return history;
}

/** Refusals (any reason) and sheds over the last minute of buckets; undefined before a bucket. */
export function refusalsPerMinute(history: pb.GetHostHistoryResponse): number | undefined {
  const last = history.buckets.at(-1);
  if (last === undefined) return undefined;
  const recent = history.buckets.filter((b) => b.endUnixMs > last.endUnixMs - 60_000);
  const span = recent.reduce((s, b) => s + b.spanMs, 0);
  const n = recent.reduce((s, b) => s + refused(b) + b.shed, 0);
  return span === 0 ? undefined : (n * 60_000) / span;
}

function data(buckets: pb.HistoryBucket[], series: Series[]): uPlot.AlignedData {
  return [buckets.map((b) => b.endUnixMs / 1000), ...series.map((s) => buckets.map(s.value))];
}

/** The host page's charts, made once and given new data on each refresh. */
const drawn = new Map<string, uPlot>();

function options(c: Chart, width: number): uPlot.Options {
  return {
    width,
    height: 160,
    title: c.title,
    scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(1, max)] } },
    series: [
      { label: "time" },
      ...c.series.map((s) => ({
        label: s.label,
        stroke: s.color,
        width: 1.5,
        spanGaps: false,
        paths: c.stepped ? uPlot.paths.stepped?.({ align: -1 }) : undefined,
      })),
    ],
    axes: [{}, { size: 48 }],
    legend: { live: true },
    cursor: { drag: { x: false, y: false } },
  };
}

/** Draw `history` on the host page: the charts, a summary line and the newest buckets as a table. */
export function drawHistory(history: pb.GetHostHistoryResponse): void {
  const root = document.getElementById("history")!;
  const buckets = history.buckets;
  const width = Math.max(280, Math.min(560, Math.floor((root.clientWidth || 1120) / 2) - 16));
  for (const c of CHARTS) {
    let u = drawn.get(c.id);
    if (u === undefined) {
      const box = h("div", { id: c.id, class: "chart" });
      root.append(box);
      u = new uPlot(options(c, width), data(buckets, c.series), box);
      drawn.set(c.id, u);
    } else {
      if (u.width !== width) u.setSize({ width, height: 160 });
      u.setData(data(buckets, c.series));
    }
    u.root.parentElement!.dataset.buckets = String(buckets.length);
  }
  const every = history.bucketMs >= 1000 ? `${history.bucketMs / 1000} s` : `${history.bucketMs} ms`;
  fill(
    document.getElementById("history-summary")!,
    buckets.length === 0
      ? `No bucket yet: the authority samples each host every ${every}, and a bucket needs two samples.`
      : `${buckets.length} of ${history.bucketsKept} buckets of ${every}, from ${clock(buckets[0].endUnixMs - buckets[0].spanMs)} to ${clock(buckets[buckets.length - 1].endUnixMs)}, installation-wide.`,
  );
  const newest = buckets.slice(-30).reverse();
  fill(
    document.getElementById("history-table")!,
    table(
      ["ended", "in flight", "queued", "admitted", "refused (busy, queue full, memory, key)", "shed", "superseded", "expired", "wait p50 / p95"],
      newest.map((b) =>
        row(
          { "data-end": String(b.endUnixMs) },
          clock(b.endUnixMs),
          String(b.inFlight),
          String(b.queued),
          String(b.admitted),
          `${refused(b)} (${b.refusedBusy}, ${b.refusedQueueFull}, ${b.refusedMemoryPressure}, ${b.refusedKeyBusy})`,
          String(b.shed),
          String(b.superseded),
          String(b.expired),
          b.waited > 0 ? `${b.waitP50Ms} / ${b.waitP95Ms} ms (${b.waited})` : "",
        ),
      ),
      "No bucket yet.",
    ),
  );
}

/** Forget the host page's charts (another host's page starts them again). */
export function clearHistory(): void {
  for (const u of drawn.values()) u.destroy();
  drawn.clear();
  fill(document.getElementById("history")!);
}

/** The hosts page's small charts, one per host, kept and moved into each new row. */
const small = new Map<string, { box: HTMLElement; u: uPlot; end: number }>();

/** A small chart of a host's tickets in flight and queued over its history. */
export function smallChart(hostId: string, history: pb.GetHostHistoryResponse): HTMLElement {
  const buckets = history.buckets;
  const series = CHARTS[0].series;
  const end = buckets.at(-1)?.endUnixMs ?? 0;
  const known = small.get(hostId);
  if (known !== undefined) {
    if (known.end !== end) {
      known.u.setData(data(buckets, series));
      known.end = end;
    }
    known.box.dataset.buckets = String(buckets.length);
    return known.box;
  }
  const box = h("div", { class: "small-chart", "data-buckets": String(buckets.length) });
  const u = new uPlot(
    {
      width: 160,
      height: 36,
      scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(1, max)] } },
      series: [{}, ...series.map((s) => ({ stroke: s.color, width: 1 }))],
      axes: [{ show: false }, { show: false }],
      legend: { show: false },
      cursor: { show: false },
    },
    data(buckets, series),
    box,
  );
  small.set(hostId, { box, u, end });
  return box;
}

function clock(unixMs: number): string {
  return new Date(unixMs).toLocaleTimeString();
}
