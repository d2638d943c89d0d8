// Small DOM helpers: elements built from code (no HTML strings, so nothing a subject or run id
// contains can become markup), durations and labels as the console shows them.

type Child = Node | string | number | null | undefined | false;
type Attrs = Record<string, string | number | boolean | ((e: Event) => void) | undefined>;

/** `h("td", {class: "n"}, "3")`: an element with attributes, listeners (on*) and children. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attrs = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === false) continue;
    if (typeof value === "function") el.addEventListener(name.slice(2), value);
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

/** An element by id (the page's skeleton has them all). */
export function byId<T extends HTMLElement = HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (el === null) throw new Error(`the page has no #${id}`);
  return el as T;
}

/** Replace an element's children. */
export function fill(el: Element, ...children: Child[]): void {
  el.replaceChildren(...children.filter((c): c is Node | string | number => c !== null && c !== undefined && c !== false).map((c) => (c instanceof Node ? c : String(c))));
}

/** 850 ms, 12.3 s, 4 min 05 s, 2 h 10 min. */
export function duration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${String(Math.floor(s % 60)).padStart(2, "0")} s`;
  return `${Math.floor(m / 60)} h ${String(m % 60).padStart(2, "0")} min`;
}

/** How a table is sorted: by column `at` (-1: as listed), descending or not; `by` is told
 * the column clicked. */
export interface Sorting {
  at: number;
  desc: boolean;
  sortable: number[];
  by: (column: number) => void;
}

/** A table with a header row and body rows; with `sorting`, its sortable columns' headers
 * sort it when clicked (and say which way). */
export function table(head: string[], rows: HTMLTableRowElement[], empty: string, sorting?: Sorting): HTMLElement {
  if (rows.length === 0) return h("p", { class: "empty" }, empty);
  const th = (c: string, i: number) => {
    if (sorting === undefined || !sorting.sortable.includes(i)) return h("th", {}, c);
    const now = sorting.at === i ? (sorting.desc ? "descending" : "ascending") : "none";
    return h(
      "th",
      { "aria-sort": now, class: "sortable" },
      h("button", { type: "button", "data-sort": c, onclick: () => sorting.by(i) }, c, now === "none" ? "" : now === "ascending" ? " ▲" : " ▼"),
    );
  };
  return h("table", {}, h("thead", {}, h("tr", {}, ...head.map(th))), h("tbody", {}, ...rows));
}

/** The clock time `ms` from now (negative: ago), for a cell's title. */
export function clockTime(msFromNow: number): string {
  return new Date(Date.now() + msFromNow).toLocaleTimeString();
}

/** A row of cells. */
export function row(attrs: Attrs, ...cells: Child[]): HTMLTableRowElement {
  return h("tr", attrs, ...cells.map((c) => (c instanceof HTMLTableCellElement ? c : h("td", {}, c))));
}

/** `used / cap` with a meter (no inline style: the page's policy forbids it). */
export function usage(used: number, cap: number): HTMLElement {
  const full = cap > 0 && used >= cap;
  return h(
    "span",
    { class: full ? "usage full" : "usage" },
    h("meter", { min: 0, max: Math.max(cap, 1), value: used, high: Math.max(cap, 1) * 0.8 }),
    ` ${used} / ${cap > 0 ? cap : "∞"}`,
  );
}

/** A small line chart of `points` (value over time), drawn as SVG. */
export function sparkline(points: number[], max: number): SVGSVGElement {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  const width = 120;
  const height = 24;
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("width", String(width));
  svg.setAttribute("height", String(height));
  svg.setAttribute("class", "spark");
  const top = Math.max(max, 1);
  const step = points.length > 1 ? width / (points.length - 1) : 0;
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute(
    "points",
    points.map((v, i) => `${(i * step).toFixed(1)},${(height - 2 - (v / top) * (height - 4)).toFixed(1)}`).join(" "),
  );
  svg.append(line);
  return svg;
}
