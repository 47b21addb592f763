// The side panels: agents, the task board, the event log, the progress bar.

const KNOWN_EVENTS = new Set([
  "agent_joined", "agent_left", "agent_offline", "agent_online",
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

function brief(body) {
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
    this.body.innerHTML = shown.slice(0, MAX_AGENT_ROWS).map((a) =>
      `<tr class="${esc(a.status)}"><td><i class="swatch" style="background:${esc(a.color)}"></i></td>` +
      `<td title="${esc(a.id)}">${esc(a.name)}</td><td>${esc(a.role)}</td><td>${esc(a.status)}</td>` +
      `<td>${esc(a.task || "")}</td><td>${esc(a.mailbox ?? "–")}</td></tr>`).join("");
    this.more.textContent = shown.length > MAX_AGENT_ROWS
      ? `… and ${shown.length - MAX_AGENT_ROWS} more (filter to find one)` : "";
  }
}

export class Board {
  constructor(counts, frontier, size, colours) {
    this.countsEl = counts;
    this.frontierEl = frontier;
    this.sizeEl = size;
    this.colours = colours || {};
  }

  show(board) {
    if (!board) {
      this.countsEl.textContent = "no tasks yet";
      this.frontierEl.innerHTML = "";
      this.sizeEl.textContent = "";
      return;
    }
    const counts = board.counts || {};
    this.countsEl.innerHTML = `<span style="background:#455A64">total ${esc(board.total ?? 0)}</span>` +
      Object.entries(counts).map(([status, n]) =>
        `<span style="background:${esc(this.colours[status] || "#607D8B")}">${esc(status)} ${esc(n)}</span>`)
        .join("");
    const ready = Array.isArray(board.frontier) ? board.frontier : [];
    this.sizeEl.textContent = `(${board.frontier_size ?? ready.length} ready)`;
    this.frontierEl.innerHTML = ready.map((t) =>
      `<li>${esc(t.id)} <b>${esc(t.type)}</b> ${esc(t.status)} → ${esc(t.assigned_to)}</li>`).join("");
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
    return { kind, n: e.n, t: typeof e.t === "number" ? e.t : null, type: e.type,
      from: e.from ?? "", text: brief(e.body), body: e.body };
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

  row(e) {
    const label = e.kind === "unknown" ? `${esc(e.type)} (unknown)` : esc(e.type);
    const t = e.t === null ? "" : e.t.toFixed(3);
    return `<div class="${e.kind} ${esc(e.type)}"><span class="t">${t}</span> ` +
      `<span class="type">${label}</span> <span class="from">${esc(e.from)}</span> ${esc(e.text)}</div>`;
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
      // Many new rows at once (a big crew): draw the last ones afresh rather than
      // appending hundreds and trimming them again.
      el.innerHTML = this.tail(this.entries).map((e) => this.row(e)).join("");
      this.rebuild = false;
    } else if (this.pending.length) {
      el.insertAdjacentHTML("beforeend", this.tail(this.pending).map((e) => this.row(e)).join(""));
      const excess = el.childElementCount - DOM_ROWS;
      if (excess > 0) { // trim the oldest in one operation
        const range = document.createRange();
        range.setStartBefore(el.firstElementChild);
        range.setEndBefore(el.children[excess]);
        range.deleteContents();
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
