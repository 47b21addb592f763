// The side panels: agents, the task board, the event log, the progress bar.

const KNOWN_EVENTS = new Set([
  "agent_joined", "agent_left", "agent_expired", "agent_offline", "agent_online",
  "region_claimed", "region_released", "conflict_detected",
  "task_created", "task_accepted", "task_completed", "task_failed", "task_cancelled",
  "task_requeued", "task_blocked", "task_unblocked", "task_dependencies_added",
  "approval_requested", "approval_resolved", "checkpoint_created", "rollback",
  "lock_granted", "lock_released", "lock_expired", "barrier_released",
]);
const MAX_LOG_ROWS = 1000; // entries kept for filtering
const DOM_ROWS = 60; // rows drawn (a scroll back of a few screens)
const MAX_AGENT_ROWS = 40; // a panel's worth and some: 100 rows cost frames of 50-110 ms to lay out
const STATUS_ORDER = { working: 0, idle: 1, left: 2 };
// One collator for every comparison: localeCompare with options makes a new one per
// call, which sorting a thousand agents paid ten thousand times a redraw.
const byId = new Intl.Collator(undefined, { numeric: true });

function esc(value) {
  return String(value).replace(/[&<>"']/g, (c) => ({
    "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

export function brief(body) {
  let text;
  try { text = JSON.stringify(body); } catch { text = String(body); }
  return text && text.length > 240 ? `${text.slice(0, 240)}…` : text;
}

export class Agents {
  constructor(table, count, more, filter) {
    this.body = table.querySelector("tbody");
    this.count = count;
    this.more = more;
    this.filter = filter;
    this.rows = new Map();
    this.dirty = true;
    filter.addEventListener("input", () => { this.dirty = true; });
  }

  reset(list) { this.rows.clear(); this.update(list, []); }

  update(list, removed) {
    for (const id of removed || []) this.rows.delete(id);
    for (const a of list || []) {
      if (a && typeof a.id === "string") this.rows.set(a.id, a);
    }
    this.dirty = true;
  }

  // Mailbox depths by agent id, sent apart from the rows (they move at every read).
  mail(depths) {
    if (!depths || typeof depths !== "object") return;
    for (const [id, depth] of Object.entries(depths)) {
      const row = this.rows.get(id);
      if (row) row.mailbox = depth;
    }
    this.dirty = true;
  }

  render() {
    if (!this.dirty) return;
    this.dirty = false;
    const needle = this.filter.value.trim().toLowerCase();
    const all = [...this.rows.values()];
    const shown = (needle ? all.filter((a) => `${a.name} ${a.id} ${a.role} ${a.status} ${a.task || ""}`
      .toLowerCase().includes(needle)) : all)
      .sort((a, b) => (STATUS_ORDER[a.status] ?? 3) - (STATUS_ORDER[b.status] ?? 3) ||
        byId.compare(String(a.id), String(b.id)));
    let working = 0;
    for (const a of all) if (a.status === "working") working++;
    this.count.textContent = `${this.rows.size} (${working} working)`;
    // The rows stay; only what changed in a cell is written (a table rebuilt from HTML at
    // every turn cost its parse and the style of every new cell).
    const body = this.body;
    const rows = shown.slice(0, MAX_AGENT_ROWS);
    while (body.childElementCount > rows.length) body.lastElementChild.remove();
    while (body.childElementCount < rows.length) body.appendChild(agentRow());
    rows.forEach((a, i) => fillAgent(body.children[i], a));
    this.more.textContent = shown.length > MAX_AGENT_ROWS
      ? `… and ${shown.length - MAX_AGENT_ROWS} more (filter to find one)` : "";
  }
}

function agentRow() {
  const tr = document.createElement("tr");
  const swatch = document.createElement("i");
  swatch.className = "swatch";
  const cells = [];
  for (let i = 0; i < 6; i++) cells.push(tr.appendChild(document.createElement("td")));
  cells[0].appendChild(swatch);
  tr.cellText = cells.slice(1).map((td) => td.appendChild(document.createTextNode("")));
  tr.swatch = swatch;
  tr.shown = [];
  return tr;
}

// Write into a row only what differs from what it shows.
function fillAgent(tr, a) {
  const values = [String(a.status), String(a.color), String(a.id), String(a.name), String(a.role),
    String(a.status), String(a.task || ""), String(a.mailbox ?? "–")]; // (a depth not known: a dash)
  const was = tr.shown;
  if (was[0] !== values[0]) tr.className = values[0];
  if (was[1] !== values[1]) tr.swatch.style.background = values[1];
  if (was[2] !== values[2]) tr.cells[1].title = values[2];
  for (let i = 3; i < values.length; i++) {
    if (was[i] !== values[i]) tr.cellText[i - 3].data = values[i];
  }
  tr.shown = values;
}

export class Board {
  constructor(counts, frontier, size, colours) {
    this.countsEl = counts;
    this.frontierEl = frontier;
    this.sizeEl = size;
    this.colours = colours || {};
    this.board = undefined;
    this.dirty = false;
    this.shown = null;
  }

  setColours(colours) {
    this.colours = colours || {};
    this.shown = null;
    this.dirty = true;
  }

  // Kept until the board's turn among the panels (a message only takes it in).
  show(board) {
    this.board = board;
    this.dirty = true;
  }

  render() {
    if (!this.dirty) return;
    this.dirty = false;
    const board = this.board;
    if (!board) {
      this.countsEl.textContent = "no tasks yet";
      this.frontierEl.innerHTML = "";
      this.sizeEl.textContent = "";
      this.shown = null;
      return;
    }
    const counts = board.counts || {};
    const html = `<span style="background:#455A64">total ${esc(board.total ?? 0)}</span>` +
      Object.entries(counts).map(([status, n]) =>
        `<span style="background:${esc(this.colours[status] || "#607D8B")}">${esc(status)} ${esc(n)}</span>`)
        .join("");
    const ready = Array.isArray(board.frontier) ? board.frontier : [];
    const frontier = ready.map((t) =>
      `<li>${esc(t.id)} <b>${esc(t.type)}</b> ${esc(t.status)} → ${esc(t.assigned_to)}</li>`).join("");
    const size = `(${board.frontier_size ?? ready.length} ready)`;
    const was = this.shown || {};
    if (was.html !== html) this.countsEl.innerHTML = html; // the DOM only where it changed
    if (was.frontier !== frontier) this.frontierEl.innerHTML = frontier;
    if (was.size !== size) this.sizeEl.textContent = size;
    this.shown = { html, frontier, size };
  }
}

export class Log {
  constructor(el, count, filter, follow, odd) {
    this.el = el;
    this.count = count;
    this.filter = filter;
    this.follow = follow;
    this.odd = odd;
    this.entries = [];
    this.last = 0;
    this.total = 0;
    this.skipped = 0;
    this.unknown = 0;
    this.bad = 0;
    this.dirty = true;
    this.rebuild = true;
    this.pending = [];
    filter.addEventListener("input", () => { this.rebuild = true; this.dirty = true; });
    odd.addEventListener("change", () => { this.rebuild = true; this.dirty = true; });
  }

  reset(entries) {
    // The page's own notes (bad messages, refused controls) outlive a fresh frame.
    this.entries = this.entries.filter((e) => typeof e.n !== "number");
    this.last = 0;
    this.add(entries, 0);
    this.rebuild = true;
  }

  // Classify one entry: a known domain event, an unknown one, or something bad.
  classify(e) {
    if (!e || typeof e !== "object" || typeof e.type !== "string") {
      this.bad++;
      return { kind: "bad", n: null, t: null, type: "bad event", from: "", text: brief(e) };
    }
    const kind = KNOWN_EVENTS.has(e.type) ? "known" : "unknown";
    if (kind === "unknown") this.unknown++;
    // (the worker sends each event's body already cut to text, its body kept only
    // where the page needs it: a conflict's region)
    return { kind, n: e.n, t: typeof e.t === "number" ? e.t : null, type: e.type,
      from: e.from ?? "", text: typeof e.text === "string" ? e.text : brief(e.body), body: e.body };
  }

  add(entries, skipped) {
    if (skipped) {
      this.skipped += skipped;
      this.pending.push({ kind: "bad", type: "skipped", t: null, from: "",
        text: `${skipped} events not sent (more than one update holds)` });
    }
    const out = [];
    for (const raw of Array.isArray(entries) ? entries : [entries]) {
      const e = this.classify(raw);
      if (typeof e.n === "number") {
        if (e.n <= this.last) continue; // seen already (a frame after deltas)
        this.last = e.n;
      }
      this.total++;
      out.push(e);
    }
    this.entries.push(...out);
    if (this.entries.length > MAX_LOG_ROWS) this.entries.splice(0, this.entries.length - MAX_LOG_ROWS);
    this.pending.push(...out);
    this.dirty = true;
    return out;
  }

  matches(e) {
    if (this.odd.checked && e.kind === "known") return false;
    const needle = this.filter.value.trim().toLowerCase();
    return !needle || `${e.type} ${e.from} ${e.text}`.toLowerCase().includes(needle);
  }

  // One row of the log, filled with an entry: its spans and text nodes are kept, and
  // a row that scrolls off is the one the next entry is written into.
  static row() {
    const div = document.createElement("div");
    const span = (cls) => {
      const s = div.appendChild(document.createElement("span"));
      s.className = cls;
      const text = s.appendChild(document.createTextNode(""));
      div.appendChild(document.createTextNode(" "));
      return text;
    };
    div.parts = [span("t"), span("type"), span("from"), div.appendChild(document.createTextNode(""))];
    return div;
  }

  static fill(div, e) {
    if (div.entry === e) return;
    div.entry = e;
    div.className = `${e.kind} ${e.type}`;
    const [t, type, from, text] = div.parts;
    t.data = e.t === null ? "" : e.t.toFixed(3);
    type.data = e.kind === "unknown" ? `${e.type} (unknown)` : String(e.type);
    from.data = String(e.from);
    text.data = String(e.text);
  }

  // The last DOM_ROWS matching entries, newest last.
  tail(entries) {
    const out = [];
    for (let i = entries.length - 1; i >= 0 && out.length < DOM_ROWS; i--) {
      if (this.matches(entries[i])) out.push(entries[i]);
    }
    return out.reverse();
  }

  render() {
    if (!this.dirty) return;
    this.dirty = false;
    const el = this.el;
    if (this.rebuild || this.pending.length >= DOM_ROWS) {
      // Many new rows at once (a big crew): the last ones written into the rows there
      // are, rather than hundreds appended and trimmed again.
      const shown = this.tail(this.entries);
      while (el.childElementCount > shown.length) el.lastElementChild.remove();
      while (el.childElementCount < shown.length) el.appendChild(Log.row());
      shown.forEach((e, i) => Log.fill(el.children[i], e));
      this.rebuild = false;
    } else if (this.pending.length) {
      for (const e of this.tail(this.pending)) { // the oldest row becomes the newest
        const div = el.childElementCount >= DOM_ROWS ? el.firstElementChild : Log.row();
        el.appendChild(div);
        Log.fill(div, e);
      }
    }
    this.pending = [];
    this.count.textContent = `${this.total} (${this.unknown} unknown, ${this.bad} bad)`;
    if (this.follow.checked) el.scrollTop = el.scrollHeight;
  }
}

export function showProgress(bar, text, value, state) {
  if (typeof value === "number" && Number.isFinite(value)) {
    bar.value = Math.max(0, Math.min(100, value));
    text.textContent = `${value.toFixed(2)}%${state === "finished" ? " (finished)" : ""}`;
  } else { // a still bar: an indeterminate one would animate (and cost) all run long
    bar.value = 0;
    text.textContent = state === "finished" ? "finished" : "no blueprint";
  }
}
