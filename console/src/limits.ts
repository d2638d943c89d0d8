// A host's limits as a form: every field an input with its unit (durations as the YAML file
// writes them: 30s, 5m, 1h), named caps and weights as rows to add and remove, and beside each
// field the server's own verdict on it (SetLimits names every bad field). The JSON view (an
// advanced toggle) also takes the file's spelling: `per_subject`, `lease_ttl: 1h`.

import { pb } from "./api.js";
import { h } from "./dom.js";

type Limits = pb.HostLimits;

/** A scalar field: its path in the message as the server names it (`limits.<path>`). */
interface Field {
  path: string;
  label: string;
  kind: "count" | "optional-count" | "duration" | "choice";
  hint: string;
  choices?: string[];
}

const FIELDS: Field[] = [
  { path: "total", label: "Total cap", kind: "count", hint: "admitted at once, ≥ 1" },
  { path: "per_subject", label: "Per subject", kind: "count", hint: "≥ 1, unless a subject's cap below names it" },
  { path: "per_account", label: "Per account", kind: "optional-count", hint: "empty: no cap per account" },
  { path: "queue.total", label: "Queue", kind: "count", hint: "waiters; 0: no queue" },
  { path: "queue.per_subject", label: "Queue per subject", kind: "count", hint: "waiters of one subject; 0: no bound" },
  { path: "queue.hard_total", label: "Queue hard total", kind: "count", hint: "what overflow_policy: queue may grow to (≥ queue)" },
  { path: "overflow_policy", label: "Queue full", kind: "choice", hint: "what a Submit meets when the queue is full", choices: ["reject", "shed_oldest", "queue"] },
  { path: "lease_ttl_ms", label: "Lease", kind: "duration", hint: "10ms .. 1h, e.g. 30s" },
  { path: "retention_ms", label: "Ended tickets kept", kind: "duration", hint: "for idempotent retries, 0 .. 7 days" },
  { path: "max_retained", label: "Ended tickets, at most", kind: "count", hint: "kept at once" },
  { path: "priority_aging_ms", label: "Priority aging", kind: "duration", hint: "a waiter this old is served as priority 1; 0: off" },
  { path: "mode", label: "Mode", kind: "choice", hint: "shadow admits everything and reports what enforce would do", choices: ["enforce", "shadow"] },
];

/** The named rows: caps of subjects and accounts, subjects' weights. */
const MAPS = [
  { path: "subjects", label: "Subjects' caps", key: "subject", value: "cap" },
  { path: "accounts", label: "Accounts' caps", key: "account", value: "cap" },
  { path: "weights", label: "Subjects' weights", key: "subject", value: "weight (1..1000)" },
] as const;

type MapPath = (typeof MAPS)[number]["path"];

const camel = (s: string): string => s.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());

/** 3600000 → "1h", 1500 → "1500ms": the shortest exact duration, as the file writes it. */
export function formatMs(ms: number): string {
  for (const [unit, f] of [
    ["h", 3_600_000],
    ["m", 60_000],
    ["s", 1_000],
  ] as const) {
    if (ms !== 0 && ms % f === 0) return `${ms / f}${unit}`;
  }
  return `${ms}ms`;
}

/** "30s", "5m", "1h", "250ms", "0" → milliseconds; null when it is not a duration. */
export function parseMs(text: string): number | null {
  const m = /^\s*(\d+)\s*(ms|s|m|h)?\s*$/.exec(text);
  if (m === null || (m[2] === undefined && m[1] !== "0")) return null;
  const factors: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 };
  return Number(m[1]) * (factors[m[2] ?? "ms"] ?? 1);
}

function read(l: Limits, path: string): unknown {
  const [a, b] = path.split(".");
  const top = (l as unknown as Record<string, unknown>)[camel(a)];
  return b === undefined ? top : (top as Record<string, unknown> | undefined)?.[camel(b)];
}

function shown(l: Limits, f: Field): string {
  const v = read(l, f.path);
  if (v === undefined || v === null) return "";
  if (f.kind === "duration") return formatMs(Number(v));
  if (f.kind === "choice" && v === "" && f.path === "mode") return "enforce";
  return String(v);
}

/** The form's element for `limits`; `changed` runs on every edit. */
export function limitsForm(l: Limits, changed: () => void): HTMLElement {
  const rows = FIELDS.map((f) => {
    const id = `limit-${f.path.replace(".", "-")}`;
    const value = shown(l, f);
    const input =
      f.kind === "choice"
        ? h("select", { id, "data-path": f.path, onchange: changed }, ...(f.choices ?? []).map((c) => h("option", { value: c, selected: c === value }, c)))
        : h("input", { id, "data-path": f.path, value, inputmode: f.kind === "duration" ? "text" : "numeric", spellcheck: "false", oninput: changed });
    return h(
      "tr",
      {},
      h("th", {}, h("label", { for: id }, f.label)),
      h("td", {}, input),
      h("td", { class: "hint" }, f.hint),
      h("td", { class: "field-error error", "data-error": f.path }),
    );
  });
  const maps = MAPS.map((m) => {
    const body = h("tbody", { "data-map": m.path });
    const entries = (l as unknown as Record<string, Record<string, number>>)[m.path] ?? {};
    const add = (name: string, value: string) => body.append(mapRow(m.path, name, value, changed));
    for (const [name, value] of Object.entries(entries).sort(([a], [b]) => a.localeCompare(b))) add(name, String(value));
    return h(
      "fieldset",
      { class: "limits-map" },
      h("legend", {}, m.label),
      h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, m.key), h("th", {}, m.value), h("th", {}))), body),
      h("button", { type: "button", class: "add-row", "data-add": m.path, onclick: () => (add("", ""), changed()) }, "Add"),
      h("p", { class: "field-error error", "data-error": m.path }),
    );
  });
  const adaptive = Object.keys(l.adaptiveAccounts ?? {}).length > 0 || l.adaptive !== undefined;
  return h(
    "div",
    { id: "limits-fields" },
    h("table", { class: "limits-table" }, h("tbody", {}, ...rows)),
    ...maps,
    adaptive && h("p", { class: "hint" }, "Adaptive caps are kept as they are; change them in the JSON view."),
  );
}

function mapRow(path: MapPath, name: string, value: string, changed: () => void): HTMLTableRowElement {
  const tr: HTMLTableRowElement = h(
    "tr",
    {},
    h("td", {}, h("input", { class: "map-key", value: name, spellcheck: "false", oninput: changed, "aria-label": `${path} name` })),
    h("td", {}, h("input", { class: "map-value", value, inputmode: "numeric", oninput: changed, "aria-label": `${path} value` })),
    h("td", {}, h("button", { type: "button", class: "remove-row", onclick: () => (tr.remove(), changed()) }, "Remove")),
  );
  return tr;
}

/** A field the console itself finds bad before sending (a duration it cannot read). */
export class FormError extends Error {
  constructor(readonly fields: Map<string, string>) {
    super([...fields].map(([f, r]) => `limits.${f}: ${r}`).join("; "));
  }
}

/** The limits the form says, over `base` (what it was filled from: adaptive caps kept). */
export function formLimits(form: HTMLElement, base: Limits): Limits {
  const out = pb.HostLimits.fromPartial(base);
  const bad = new Map<string, string>();
  const queue = pb.QueueLimits.fromPartial(out.queue ?? {});
  for (const f of FIELDS) {
    const el = form.querySelector<HTMLInputElement | HTMLSelectElement>(`[data-path="${f.path}"]`);
    const text = el?.value.trim() ?? "";
    let value: number | string | undefined;
    if (f.kind === "choice") value = text;
    else if (f.kind === "duration") {
      const ms = parseMs(text);
      if (ms === null) {
        bad.set(f.path, `"${text}" is not a duration (30s, 5m, 1h, 250ms)`);
        continue;
      }
      value = ms;
    } else if (f.kind === "optional-count" && text === "") value = undefined;
    else if (/^\d+$/.test(text)) value = Number(text);
    else {
      bad.set(f.path, `"${text}" is not a whole number`);
      continue;
    }
    const [a, b] = f.path.split(".");
    if (b !== undefined) (queue as unknown as Record<string, unknown>)[camel(b)] = value;
    else (out as unknown as Record<string, unknown>)[camel(a)] = value;
  }
  out.queue = queue;
  for (const m of MAPS) {
    const entries: Record<string, number> = {};
    for (const tr of form.querySelectorAll<HTMLTableRowElement>(`[data-map="${m.path}"] tr`)) {
      const name = tr.querySelector<HTMLInputElement>(".map-key")!.value.trim();
      const text = tr.querySelector<HTMLInputElement>(".map-value")!.value.trim();
      if (name === "" && text === "") continue;
      if (name === "" || !/^\d+$/.test(text)) {
        bad.set(m.path, name === "" ? "a row without a name" : `${name}: "${text}" is not a whole number`);
        continue;
      }
      entries[name] = Number(text);
    }
    (out as unknown as Record<string, unknown>)[m.path] = entries;
  }
  if (bad.size > 0) throw new FormError(bad);
  return out;
}

/** Show each field's problem beside it (`fields`: `limits.<path>` → rule, as SetLimits names
 * them); the problems no field shows are returned. */
export function showFieldErrors(form: HTMLElement, fields: ReadonlyMap<string, string>): string[] {
  for (const el of form.querySelectorAll<HTMLElement>("[data-error]")) el.textContent = "";
  const rest: string[] = [];
  for (const [field, rule] of fields) {
    const path = field.replace(/^limits\./, "");
    const top = path.split(".")[0];
    const el =
      form.querySelector<HTMLElement>(`[data-error="${path}"]`) ??
      (MAPS.some((m) => m.path === top) ? form.querySelector<HTMLElement>(`[data-error="${top}"]`) : null);
    if (el === null) rest.push(`${field}: ${rule}`);
    else el.textContent = el.textContent === "" ? rule : `${el.textContent}; ${rule}`;
  }
  return rest;
}

/** JSON as the message spells it (camelCase, milliseconds) or as the file does
 * (`per_subject`, `lease_ttl: 1h`): the limits it says. */
export function jsonLimits(text: string): Limits {
  const parsed = JSON.parse(text) as unknown;
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw new Error("the limits must be a JSON object");
  return pb.HostLimits.fromPartial(fromFileSpelling(parsed as Record<string, unknown>, true) as object);
}

const DURATIONS = new Set(["lease_ttl", "retention", "priority_aging", "cooldown"]);
/** Keys whose values are maps of names, which are never renamed. */
const NAMED = new Set(["subjects", "accounts", "weights", "adaptive_accounts", "adaptiveAccounts"]);

function fromFileSpelling(o: Record<string, unknown>, renameKeys: boolean): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(o)) {
    let key = k;
    let value = v;
    if (renameKeys && DURATIONS.has(k)) {
      key = `${k}_ms`;
      if (typeof v === "string") {
        const ms = parseMs(v);
        if (ms === null) throw new Error(`${k}: "${v}" is not a duration (30s, 5m, 1h, 250ms)`);
        value = ms;
      }
    }
    const isObject = (x: unknown): x is Record<string, unknown> => x !== null && typeof x === "object" && !Array.isArray(x);
    if (NAMED.has(k) && isObject(value)) {
      // Names stay as written; an adaptive account's settings are spelled as any others.
      value = Object.fromEntries(Object.entries(value).map(([n, x]) => [n, isObject(x) ? fromFileSpelling(x, true) : x]));
    } else if (isObject(value)) {
      value = fromFileSpelling(value, renameKeys);
    }
    out[renameKeys ? camel(key) : key] = value;
  }
  return out;
}
