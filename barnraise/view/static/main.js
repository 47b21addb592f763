// The live view: one WebSocket (/view/ws) brings a frame, then deltas. A module worker
// (feed.js) holds the socket, parses each message and draws the canvas (tiles, claims,
// flashes) on the canvases handed to it; this thread gets the rest of each message and
// draws the panels, on demand. Nothing a server sends can break the page: a message that
// cannot be applied is counted and shown in the log as bad.

import { Chart } from "./chart.js";
import { Agents, Board, Log, showProgress } from "./panels.js";

const $ = (id) => document.getElementById(id);

const view = {
  seq: -1, frames: 0, deltas: 0, frameMessages: 0, bad: 0, progress: null, state: "offline",
  t: 0, grid: null, session: null, controls: false, lastError: null, connected: false,
};
window.__view = view; // what tests and curious people may read

const FLASH_MS = 1200; // as long as the worker's flash of a refused claim
let flashes = []; // when each conflict now flashing ends (for tests: view.flashes())
const chart = new Chart($("chart"), $("chart-legend"));
const agents = new Agents($("agents"), $("agent-count"), $("agents-more"), $("agent-filter"));
const board = new Board($("board-counts"), $("frontier"), $("frontier-size"), {});
const log = new Log($("log"), $("event-count"), $("log-filter"), $("log-follow"), $("log-odd"));
let requestId = 0;
let feed = null; // the worker

function noteBad(what, error, raw) {
  view.bad++;
  view.lastError = `${what}: ${error && error.message ? error.message : error}`;
  log.add([{ bad: true, what, error: String(error && error.message ? error.message : error),
    raw: typeof raw === "string" ? raw.slice(0, 200) : raw }], 0);
  kick();
}

// What this thread did lately that took over a millisecond (when, what, how long): a
// long frame names what of it fell inside it (view.longFrameLog).
const workLog = [];
function noteWork(what, began) {
  const took = performance.now() - began;
  if (took < 1) return;
  workLog.push([began, what, took]);
  if (workLog.length > 100) workLog.shift();
}

// Each part of a message is applied on its own, so one bad part spoils only itself.
function part(what, fn) {
  const began = performance.now();
  try { fn(); } catch (error) { noteBad(what, error); }
  noteWork(what, began);
}

function setStatus(msg) {
  if (typeof msg.state === "string") view.state = msg.state;
  if (typeof msg.t === "number") view.t = msg.t;
  view.controls = Boolean(msg.controls);
  const status = $("status");
  status.textContent = view.state + (msg.mode ? ` · ${msg.mode}` : "");
  status.className = `status ${view.state}`;
  $("clock").textContent = `t = ${view.t.toFixed(2)} s`;
  for (const id of ["btn-start", "btn-pause", "speed"]) $(id).disabled = !view.controls;
  for (const id of ["btn-step-event", "btn-step-time"]) {
    $(id).disabled = !(view.controls && msg.steps);
    $(id).title = msg.steps ? "" : "this run takes no steps";
  }
  if (msg.speed !== undefined && document.activeElement !== $("speed")) {
    $("speed").value = msg.speed === null ? "" : String(msg.speed);
  }
}

function flashConflicts(entries) {
  const now = performance.now();
  flashes = flashes.filter((until) => until > now);
  for (const e of entries) {
    if (e.type === "conflict_detected" && e.body && e.body.region) flashes.push(now + FLASH_MS);
  }
}

function onFrame(f) {
  view.frameMessages++;
  part("palette", () => {
    if (Array.isArray(f.palette)) {
      $("legend").innerHTML = f.palette.slice(1).map((c, i) =>
        `<span><i style="background:${c}"></i>${(f.tile_names || [])[i + 1] || i + 1}</span>`).join("");
    }
    if (f.status_colours) board.setColours(f.status_colours);
  });
  view.grid = Array.isArray(f.grid) ? f.grid : null; // the worker has drawn the canvas
  part("agents", () => agents.reset(f.agents));
  part("board", () => board.show(f.board));
  part("events", () => log.reset(f.events || []));
  part("series", () => chart.reset(f.series));
  view.session = f.session_id ?? null;
  $("run-title").textContent = view.session ? `session ${view.session}` : "waiting for a session";
  view.progress = typeof f.progress === "number" ? f.progress : null;
  part("progress", () => showProgress($("progress"), $("progress-text"), f.progress, f.state));
  setStatus(f);
  part("scrub", () => showScrub(f.scrub));
  view.seq = typeof f.seq === "number" ? f.seq : 0;
}

// A stored run: a time slider; moving it asks for the world at that time.
function showScrub(scrub) {
  const box = $("scrub-box");
  if (!scrub || typeof scrub.end !== "number") { box.hidden = true; view.scrub = null; return; }
  box.hidden = false;
  view.scrub = scrub;
  const input = $("scrub");
  input.max = String(scrub.end);
  if (document.activeElement !== input) input.value = String(scrub.at);
  let shown = typeof scrub.shown === "number" ? `snapshot at ${scrub.shown.toFixed(2)} s` : "no snapshot yet";
  if (scrub.exact) shown = "re-executed";
  else if (typeof scrub.folded === "string") shown = `folded ${scrub.folded}`;
  if (Array.isArray(scrub.notes) && scrub.notes.length) shown += `; ${scrub.notes.join("; ")}`;
  if (scrub.problem) shown += `; ${scrub.problem}`;
  $("scrub-text").textContent = `${Number(scrub.at).toFixed(2)} / ${scrub.end.toFixed(2)} s (${shown})`;
}
$("scrub").addEventListener("change", (e) => control("seek", Number(e.target.value)));

// A delta the worker took (in order; its canvas and claims drawn already).
function onDelta(d) {
  view.deltas++;
  if (Array.isArray(d.grid)) view.grid = d.grid;
  part("agents", () => agents.update(d.agents, d.agents_removed));
  if ("mailboxes" in d) part("mailboxes", () => agents.mail(d.mailboxes));
  if ("board" in d) part("board", () => board.show(d.board));
  part("events", () => flashConflicts(log.add(d.events || [], d.events_skipped || 0)));
  part("series", () => chart.add(d.point));
  if (d.session_id && d.session_id !== view.session) {
    view.session = d.session_id;
    $("run-title").textContent = `session ${view.session}`;
  }
  view.progress = typeof d.progress === "number" ? d.progress : view.progress;
  part("progress", () => showProgress($("progress"), $("progress-text"), view.progress, d.state));
  setStatus(d);
  view.seq = d.seq;
}

// What the worker says: a frame or a delta to show, a control's answer, something bad,
// the socket opened or closed, a reply to a request of this page.
const replies = new Map();
function onFeed(event) {
  const m = event.data || {};
  const began = performance.now();
  try {
    if (m.type === "frame") onFrame(m.params);
    else if (m.type === "delta") onDelta(m.params);
    else if (m.type === "answer") onAnswer(m.msg);
    else if (m.type === "bad") noteBad(m.what, m.error, m.raw);
    else if (m.type === "open") view.connected = true;
    else if (m.type === "closed") offline();
    else if (m.type === "reply" && replies.has(m.id)) {
      const { done, fail } = replies.get(m.id);
      replies.delete(m.id);
      if (m.error) fail(new Error(m.error)); else done(m.value);
    } else noteBad("unknown message from the worker", String(m.type));
  } catch (error) {
    noteBad(`worker's ${m.type}`, error);
  } finally {
    noteWork(`${m.type} message`, began);
    kick(); // whatever came, there may be something to draw
  }
}

function ask(type, extra) {
  const id = ++requestId;
  return new Promise((done, fail) => {
    replies.set(id, { done, fail });
    feed.postMessage({ type, id, ...extra });
    setTimeout(() => {
      if (replies.delete(id)) fail(new Error(`the worker did not answer ${type} within 10 s`));
    }, 10_000);
  });
}

function offline() {
  view.connected = false;
  view.state = "offline";
  $("status").textContent = "offline: reconnecting";
  $("status").className = "status offline";
  view.seq = -1;
}

function onAnswer(msg) {
  const result = msg.result;
  if (result && result.frame) return; // a fresh frame is on its way
  if (msg.error || !result || result.success === false) {
    const why = msg.error ? msg.error.message : (result ? result.message : "no result");
    $("status").title = why;
    log.add([{ n: null, type: "control refused", from: "view", body: why }], 0);
    return;
  }
  setStatus(result);
}

// The operator's token, when the page was opened at the URL `barnraise serve` printed
// (…/#operator=TOKEN): a fragment never goes to the server in a request line; the page
// sends it in each control frame (and the worker once on connecting, to watch from
// another host). A page without it watches, and its controls are refused.
const operatorToken = new URLSearchParams(location.hash.slice(1)).get("operator") || null;

function control(action, value) {
  if (!feed || !view.connected) return;
  const params = { action, value };
  if (operatorToken) params.token = operatorToken;
  feed.postMessage({ type: "send", text: JSON.stringify({ jsonrpc: "2.0", id: ++requestId,
    method: "view.control", params }) });
}
view.control = control;
// Conflicts flashing now, and the overlay's pixel at a cell (tests; a promise: the
// worker draws the overlay).
view.flashes = () => flashes.filter((until) => until > performance.now()).length;
view.overlayAt = (x, y) => ask("overlay-at", { x, y });
// The tile layer's pixels, for tests: RGBA bytes as a plain array, and a cheap hash
// (promises: the worker holds the canvas).
// The worker's tasks over 50 ms (its own count: browsers report the main thread's);
// reset: count afresh from now.
view.workerStats = (reset = false) => ask("stats", { reset });
view.pixels = async () => Array.from(await ask("pixels"));
view.hash = async () => {
  const d = await ask("pixels");
  let h = 0;
  for (let i = 0; i < d.length; i++) h = (Math.imul(h, 31) + d[i]) | 0;
  return h;
};

function start() {
  const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/view/ws`;
  try {
    feed = new Worker(new URL("./feed.js", import.meta.url), { type: "module" });
    const tiles = $("tiles").transferControlToOffscreen();
    const overlay = $("overlay").transferControlToOffscreen();
    feed.addEventListener("message", onFeed);
    feed.addEventListener("error", (e) => noteBad("worker", e.message || "failed"));
    feed.postMessage({ type: "start", url, tiles, overlay, token: operatorToken },
      [tiles, overlay]);
  } catch (error) { // a browser without module workers or OffscreenCanvas
    noteBad("this browser cannot draw the canvas (module worker, OffscreenCanvas)", error);
    $("status").textContent = "unsupported browser";
    return;
  }
  // The overlay's size in device pixels, for the worker that draws it: kept by a
  // ResizeObserver (asking the layout every frame forced a style and layout pass).
  new ResizeObserver((entries) => {
    const box = entries[entries.length - 1].contentRect;
    const dpr = window.devicePixelRatio || 1;
    feed.postMessage({ type: "overlay-size", width: box.width * dpr, height: box.height * dpr });
  }).observe($("overlay"));
}

$("btn-start").addEventListener("click", () => control("start"));
$("btn-pause").addEventListener("click", () => control("pause"));
$("btn-step-event").addEventListener("click", () => control("step_event", 1));
$("btn-step-time").addEventListener("click", () => control("step_time", 1));
$("speed").addEventListener("change", (e) => {
  const v = e.target.value;
  control("speed", v === "" ? null : Number(v));
});

// Drawing on demand: a frame is asked for when something arrives or changes, and the
// loop goes on only while there is more to draw (panels waiting their turn; the worker
// animates the canvas's flashes). An idle page asks for no frames at all: in headless Chromium a page
// that animated every frame used a tenth of a core doing nothing.
const PANEL_PERIOD = 400; // each panel redraws at most two and a half times a second
let frameAsked = false;
let panelTimer = null;
function kick() {
  if (!frameAsked) { frameAsked = true; requestAnimationFrame(animate); }
}

// One panel at most per frame, each at most every PANEL_PERIOD: a thousand agents and
// a burst of events drawn in the same frame made frames of 50-90 ms.
const panels = [
  { name: "agents", part: agents, last: -1e9, draw: () => agents.render() },
  { name: "log", part: log, last: -1e9, draw: () => log.render() },
  { name: "chart", part: chart, last: -1e9, draw: () => chart.draw() },
  { name: "board", part: board, last: -1e9, draw: () => board.render() },
];

let nextPanel = 0;

function animate(now) {
  frameAsked = false;
  view.frames++;
  try {
    let waiting = Infinity;
    let drawn = false;
    const first = nextPanel;
    for (let i = 0; i < panels.length; i++) {
      const panel = panels[(first + i) % panels.length];
      if (!panel.part.dirty) continue;
      const due = panel.last + PANEL_PERIOD - now;
      if (!drawn && due <= 0) {
        panel.last = now;
        const began = performance.now();
        panel.draw();
        noteWork(`${panel.name} panel`, began);
        drawn = true;
        nextPanel = (first + i + 1) % panels.length;
      } else {
        waiting = Math.min(waiting, Math.max(0, due));
      }
    }
    if (waiting === 0) kick(); // another panel is due: the next frame draws it
    else if (waiting < Infinity && panelTimer === null) {
      panelTimer = setTimeout(() => { panelTimer = null; kick(); }, waiting);
    }
  } catch (error) {
    noteBad("drawing", error);
  }
}

// The worst frames, for the benchmark and the curious: Chromium reports every animation
// frame over 50 ms (long-animation-frame) and every task over 50 ms (longtask, which a
// long frame may contain: they are counted apart). A page with neither could draw 20
// frames in every second, whenever there was something to draw.
view.longFrames = 0;
view.longFrameTime = 0; // ms spent in frames over 50 ms
view.worstFrame = 0;
view.longTasks = 0;
view.worstTask = 0;
view.frameWatch = [];
// What each long frame was made of (the first 100): the scripts Chromium names (what
// invoked them, where they are, how long they ran and how much of that was a layout
// they forced), and the frame's own style and layout and paint at its end.
view.longFrameLog = [];
view.longTaskLog = []; // (the first 100: when, how long)
const ms = (v) => Math.round(v * 10) / 10;
function describeFrame(entry) {
  const end = entry.startTime + entry.duration;
  const scripts = Array.from(entry.scripts || [], (s) => ({
    invoker: s.invoker, kind: s.invokerType, source: String(s.sourceURL || "").split("/").pop(),
    fn: s.sourceFunctionName, ms: ms(s.duration), forced_layout_ms: ms(s.forcedStyleAndLayoutDuration || 0),
    start_ms: ms(s.startTime - entry.startTime),
  }));
  return {
    at_ms: ms(entry.startTime), ms: ms(entry.duration), blocking_ms: ms(entry.blockingDuration || 0),
    scripts_ms: ms(scripts.reduce((sum, s) => sum + s.ms, 0)),
    // from the frame's update of the rendering to its end: rAF callbacks, style, layout, paint
    render_ms: entry.renderStart ? ms(end - entry.renderStart) : 0,
    style_layout_ms: entry.styleAndLayoutStart ? ms(end - entry.styleAndLayoutStart) : 0,
    scripts,
    work: workLog.filter(([at]) => at >= entry.startTime && at <= end)
      .map(([, name, took]) => `${name} ${ms(took)}`),
  };
}
const entryTypes = (typeof PerformanceObserver === "function" &&
  PerformanceObserver.supportedEntryTypes) || [];
const watchers = {
  "long-animation-frame": (entry) => {
    view.longFrames++;
    view.longFrameTime += entry.duration;
    view.worstFrame = Math.max(view.worstFrame, entry.duration);
    if (view.longFrameLog.length < 100) view.longFrameLog.push(describeFrame(entry));
  },
  longtask: (entry) => {
    view.longTasks++;
    view.worstTask = Math.max(view.worstTask, entry.duration);
    if (view.longTaskLog.length < 100) view.longTaskLog.push({ at_ms: ms(entry.startTime), ms: entry.duration });
  },
};
for (const [type, note] of Object.entries(watchers)) {
  if (!entryTypes.includes(type)) continue; // Firefox has neither: not measured there
  try {
    new PerformanceObserver((list) => { for (const entry of list.getEntries()) note(entry); })
      .observe({ type, buffered: true });
    view.frameWatch.push(type);
  } catch (error) {
    // refused all the same: that part is not measured
  }
}

for (const kind of ["input", "change", "keyup"]) document.addEventListener(kind, kick, true);
window.addEventListener("resize", kick);

setStatus({ state: "offline", controls: false });
kick();
start();
