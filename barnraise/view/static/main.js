// The live view: one WebSocket (/view/ws) brings a frame, then deltas; an animation
// loop draws. Nothing a server sends can break the page: a message that cannot be
// applied is counted and shown in the log as bad.

import { TileView } from "./canvas.js";
import { Chart } from "./chart.js";
import { Agents, Board, Log, showProgress } from "./panels.js";

const $ = (id) => document.getElementById(id);

const view = {
  seq: -1, stale: 0, frames: 0, deltas: 0, frameMessages: 0, bad: 0, progress: null, state: "offline",
  t: 0, grid: null, session: null, controls: false, lastError: null, connected: false,
};
window.__view = view; // what tests and curious people may read

const tiles = new TileView($("tiles"), $("overlay"));
tiles.onResize = () => kick();
const chart = new Chart($("chart"), $("chart-legend"));
const agents = new Agents($("agents"), $("agent-count"), $("agents-more"), $("agent-filter"));
let board = new Board($("board-counts"), $("frontier"), $("frontier-size"), {});
const log = new Log($("log"), $("event-count"), $("log-filter"), $("log-follow"), $("log-odd"));
let socket = null;
let requestId = 0;
let retry = 250;

function noteBad(what, error, raw) {
  view.bad++;
  view.lastError = `${what}: ${error && error.message ? error.message : error}`;
  log.add([{ bad: true, what, error: String(error && error.message ? error.message : error),
    raw: typeof raw === "string" ? raw.slice(0, 200) : raw }], 0);
  kick();
}

// Each part of a message is applied on its own, so one bad part spoils only itself.
function part(what, fn) {
  try { fn(); } catch (error) { noteBad(what, error); }
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

function applyCanvas(rects) {
  for (const r of rects || []) part("canvas rectangle", () => tiles.putRect(r));
}

function flashConflicts(entries) {
  const now = performance.now();
  for (const e of entries) {
    if (e.type === "conflict_detected" && e.body && e.body.region) tiles.flash(e.body.region, now);
  }
}

function onFrame(f) {
  view.frameMessages++;
  part("palette", () => {
    if (Array.isArray(f.palette)) {
      tiles.setPalette(f.palette);
      $("legend").innerHTML = f.palette.slice(1).map((c, i) =>
        `<span><i style="background:${c}"></i>${(f.tile_names || [])[i + 1] || i + 1}</span>`).join("");
    }
    if (f.status_colours) board = new Board($("board-counts"), $("frontier"), $("frontier-size"), f.status_colours);
  });
  part("grid", () => {
    view.grid = Array.isArray(f.grid) ? f.grid : null;
    if (view.grid) tiles.resize(view.grid[0], view.grid[1]);
  });
  applyCanvas(f.canvas);
  part("claims", () => tiles.setClaims(Array.isArray(f.claims) ? f.claims : []));
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

let lastFrameAsk = -1e9;
let frameAskPending = false;
function askForFrame() { // at most once a second; a later ask waits its turn
  if (frameAskPending) return;
  const wait = Math.max(0, lastFrameAsk + 1000 - performance.now());
  frameAskPending = true;
  setTimeout(() => {
    frameAskPending = false;
    lastFrameAsk = performance.now();
    control("frame");
  }, wait);
}

function onDelta(d) {
  if (typeof d.seq !== "number") { noteBad("delta without a seq", "ignored", d); return; }
  if (d.seq <= view.seq) { // older than what is drawn: normal just after a frame
    if (++view.stale > 20) askForFrame(); // many in a row: our seq is wrong, start afresh
    return;
  }
  view.stale = 0;
  // A gap (base null is a delta from nothing: complete in itself): draw it, and ask
  // for the whole picture.
  if (d.base !== null && d.base !== view.seq) askForFrame();
  view.deltas++;
  part("grid", () => {
    if (Array.isArray(d.grid) && (!view.grid || d.grid[0] !== view.grid[0] || d.grid[1] !== view.grid[1])) {
      view.grid = d.grid;
      tiles.resize(d.grid[0], d.grid[1]);
    }
  });
  applyCanvas(d.canvas);
  part("claims", () => tiles.updateClaims(d.claims_added, d.claims_removed));
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

const utf8 = new TextDecoder();

function onMessage(event) {
  try { handle(event); } finally { kick(); } // whatever came, there may be something to draw
}

function handle(event) {
  let msg;
  let text = event.data;
  try {
    if (typeof text !== "string") text = utf8.decode(text); // frames come as binary UTF-8
    msg = JSON.parse(text);
  } catch (error) { noteBad("not JSON", error, text); return; }
  if (!msg || typeof msg !== "object") { noteBad("not an object", "message", event.data); return; }
  if (msg.method === "view.frame" && msg.params && typeof msg.params === "object") onFrame(msg.params);
  else if (msg.method === "view.delta" && msg.params && typeof msg.params === "object") onDelta(msg.params);
  else if ("id" in msg) onAnswer(msg);
  else noteBad("unknown message", msg.method ?? "no method", text);
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

function control(action, value) {
  if (!socket || socket.readyState !== WebSocket.OPEN) return;
  socket.send(JSON.stringify({ jsonrpc: "2.0", id: ++requestId, method: "view.control",
    params: { action, value } }));
}
view.control = control;
// Conflicts flashing now, and the overlay's pixel at a cell (tests).
view.flashes = () => tiles.flashes.filter((f) => f.until > performance.now()).length;
view.overlayAt = (x, y) => {
  const o = tiles.overlay;
  const px = Math.floor(((x + 0.5) / tiles.width) * o.width);
  const py = Math.floor(((y + 0.5) / tiles.height) * o.height);
  return Array.from(tiles.octx.getImageData(px, py, 1, 1).data);
};
// The tile layer's pixels, for tests: RGBA bytes as a plain array, and a cheap hash.
view.pixels = () => Array.from(tiles.pixels());
view.hash = () => {
  const d = tiles.pixels();
  let h = 0;
  for (let i = 0; i < d.length; i++) h = (Math.imul(h, 31) + d[i]) | 0;
  return h;
};

function connect() {
  const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/view/ws`;
  socket = new WebSocket(url);
  socket.binaryType = "arraybuffer";
  socket.addEventListener("open", () => { view.connected = true; retry = 250; });
  socket.addEventListener("message", onMessage);
  socket.addEventListener("close", () => {
    view.connected = false;
    view.state = "offline";
    $("status").textContent = "offline: reconnecting";
    $("status").className = "status offline";
    view.seq = -1;
    setTimeout(connect, retry);
    retry = Math.min(5000, retry * 2);
  });
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
// loop goes on only while there is more to draw (a conflict flashing, panels waiting
// their turn). An idle page asks for no frames at all: in headless Chromium a page
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
  { part: agents, last: -1e9, draw: () => agents.render() },
  { part: log, last: -1e9, draw: () => log.render() },
  { part: chart, last: -1e9, draw: () => chart.draw() },
];
let nextPanel = 0;

function animate(now) {
  frameAsked = false;
  view.frames++;
  try {
    tiles.draw(now);
    let waiting = Infinity;
    let drawn = false;
    const first = nextPanel;
    for (let i = 0; i < panels.length; i++) {
      const panel = panels[(first + i) % panels.length];
      if (!panel.part.dirty) continue;
      const due = panel.last + PANEL_PERIOD - now;
      if (!drawn && due <= 0) {
        panel.last = now;
        panel.draw();
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
  if (tiles.busy(now)) kick(); // flashes animate, an overlay waits to be drawn
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
connect();
