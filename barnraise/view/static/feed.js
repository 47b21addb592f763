// The page's worker (a module worker, started by main.js): it holds the WebSocket
// (/view/ws), parses every message, keeps the order of frames and deltas, and draws the
// tile layer and the overlay on the two canvases the page handed it (OffscreenCanvas).
// The page's main thread gets each frame and delta without its canvas rectangles and
// claims (what is left is the panels' part) and keeps to the panels and the DOM: parsing
// a megabyte of JSON, decoding a canvas rectangle and outlining a thousand claims on the
// main thread made its animation frames long (docs/view.md).

import { TileView } from "./canvas.js";
import { brief } from "./panels.js";

let tiles = null;
let url = null;
let token = null; // the operator's token, from the page's URL fragment
let socket = null;
let retry = 250;
let seq = -1; // the sequence number of what is drawn
let stale = 0;
let lastEvent = 0; // the last event number seen (a conflict flashes once)

const post = (message, transfer) => self.postMessage(message, transfer || []);

// The worker's own tasks over 50 ms (a message taken in, a frame drawn): no browser
// reports a worker's long tasks, so it times them itself. The canvas shows what the
// worker drew last, so these are the canvas's own late frames.
const stats = { tasks: 0, longTasks: 0, longTime: 0, worst: 0, worstWhat: null, resyncs: [] };
function timed(what, fn) {
  const t0 = performance.now();
  try { fn(); } finally {
    const ms = performance.now() - t0;
    stats.tasks++;
    if (ms > 50) { stats.longTasks++; stats.longTime += ms; }
    if (ms > stats.worst) { stats.worst = ms; stats.worstWhat = what; }
  }
}

function bad(what, error, raw) {
  post({ type: "bad", what, error: String(error && error.message ? error.message : error),
    raw: typeof raw === "string" ? raw.slice(0, 200) : raw });
}

function part(what, fn) {
  try { fn(); } catch (error) { bad(what, error); }
}

// Drawing: an animation frame of the worker's own, asked for when something changed and
// going on while a flash lasts. (requestAnimationFrame exists in dedicated workers in
// Chromium and Firefox; a timer stands in where it does not.)
const nextFrame = typeof self.requestAnimationFrame === "function"
  ? (fn) => self.requestAnimationFrame(fn) : (fn) => setTimeout(() => fn(performance.now()), 16);
let frameAsked = false;
function kick() {
  if (!frameAsked && tiles) { frameAsked = true; nextFrame(draw); }
}
function draw(now) {
  frameAsked = false;
  timed("draw", () => {
    try { tiles.draw(now); } catch (error) { bad("drawing", error); }
  });
  if (tiles.busy(now)) kick();
}

function applyCanvas(rects) {
  for (const r of Array.isArray(rects) ? rects : []) part("canvas rectangle", () => tiles.putRect(r));
}

function applyGrid(grid) {
  part("grid", () => { if (Array.isArray(grid)) tiles.resize(grid[0], grid[1]); });
}

function flashConflicts(events) {
  const now = performance.now();
  for (const e of Array.isArray(events) ? events : []) {
    if (!e || typeof e !== "object") continue;
    if (typeof e.n === "number") {
      if (e.n <= lastEvent) continue;
      lastEvent = e.n;
    }
    if (e.type === "conflict_detected" && e.body && e.body.region) tiles.flash(e.body.region, now);
  }
}

// Each event's body cut to the text the log shows (here, not on the page's thread); the
// body itself goes on only where the page uses it (a refused claim's region).
function briefEvents(events) {
  if (!Array.isArray(events)) return events;
  return events.map((e) => {
    if (!e || typeof e !== "object" || typeof e.type !== "string" || !("body" in e)) return e;
    const { body, ...rest } = e;
    rest.text = brief(body);
    if (e.type === "conflict_detected") rest.body = body;
    return rest;
  });
}

function onFrame(f) {
  part("palette", () => { if (Array.isArray(f.palette)) tiles.setPalette(f.palette); });
  applyGrid(f.grid);
  applyCanvas(f.canvas);
  part("claims", () => tiles.setClaims(Array.isArray(f.claims) ? f.claims : []));
  for (const e of Array.isArray(f.events) ? f.events : []) {
    if (e && typeof e.n === "number" && e.n > lastEvent) lastEvent = e.n;
  }
  seq = typeof f.seq === "number" ? f.seq : 0;
  stale = 0;
  delete f.canvas;
  delete f.claims;
  part("events", () => { f.events = briefEvents(f.events); });
  post({ type: "frame", params: f });
}

let lastFrameAsk = -1e9;
let frameAskPending = false;
function askForFrame(why) { // at most once a second; a later ask waits its turn
  if (stats.resyncs.length < 20) stats.resyncs.push(why);
  if (frameAskPending) return;
  const wait = Math.max(0, lastFrameAsk + 1000 - performance.now());
  frameAskPending = true;
  setTimeout(() => {
    frameAskPending = false;
    lastFrameAsk = performance.now();
    send(JSON.stringify({ jsonrpc: "2.0", id: "frame", method: "view.control",
      params: { action: "frame" } }));
  }, wait);
}

function onDelta(d) {
  if (typeof d.seq !== "number") { bad("delta without a seq", "ignored", d); return; }
  if (d.seq <= seq) { // older than what is drawn: normal just after a frame
    if (++stale > 20) askForFrame(`stale ${d.seq} <= ${seq}`); // many in a row: our seq is wrong, start afresh
    return;
  }
  stale = 0;
  // A gap (base null is a delta from nothing: complete in itself): draw it, and ask
  // for the whole picture.
  if (d.base !== null && d.base !== seq) askForFrame(`gap: base ${d.base}, drawn ${seq}`);
  part("grid", () => {
    if (Array.isArray(d.grid) && (d.grid[0] !== tiles.height || d.grid[1] !== tiles.width)) {
      tiles.resize(d.grid[0], d.grid[1]);
    }
  });
  applyCanvas(d.canvas);
  part("claims", () => tiles.updateClaims(d.claims_added, d.claims_removed));
  part("flashes", () => flashConflicts(d.events));
  seq = d.seq;
  delete d.canvas;
  delete d.claims_added;
  delete d.claims_removed;
  part("events", () => { d.events = briefEvents(d.events); });
  post({ type: "delta", params: d });
}

const utf8 = new TextDecoder();

function onMessage(event) {
  let msg;
  let text = event.data;
  try {
    if (typeof text !== "string") text = utf8.decode(text); // frames come as binary UTF-8
    msg = JSON.parse(text);
  } catch (error) { bad("not JSON", error, text); return; }
  if (!msg || typeof msg !== "object") { bad("not an object", "message", text); return; }
  if (msg.method === "view.frame" && msg.params && typeof msg.params === "object") onFrame(msg.params);
  else if (msg.method === "view.delta" && msg.params && typeof msg.params === "object") onDelta(msg.params);
  else if ("id" in msg) {
    // the frame asks' answers are the frames; a good token's answer is the frame too
    const quiet = msg.id === "frame" || (msg.id === "auth" && msg.result && msg.result.success);
    if (!quiet) post({ type: "answer", msg });
  }
  else bad("unknown message", msg.method ?? "no method", text);
  kick();
}

function send(text) {
  if (socket && socket.readyState === WebSocket.OPEN) socket.send(text);
}

function connect() {
  socket = new WebSocket(url);
  socket.binaryType = "arraybuffer";
  socket.addEventListener("open", () => {
    retry = 250;
    // who this page is: the operator's token, if its URL has one (watching from another
    // host needs it; on loopback the answer is yes either way, and a no is shown)
    send(JSON.stringify({ jsonrpc: "2.0", id: "auth", method: "view.auth",
      params: { token } }));
    post({ type: "open" });
  });
  socket.addEventListener("message", (event) => timed("message", () => onMessage(event)));
  socket.addEventListener("close", () => {
    seq = -1;
    post({ type: "closed" });
    setTimeout(connect, retry);
    retry = Math.min(5000, retry * 2);
  });
}

// What the page asks: start (with the canvases and the socket's URL), a message to
// send, the overlay's size, and the pixels tests read.
self.onmessage = (event) => {
  const m = event.data || {};
  try {
    if (m.type === "start") {
      tiles = new TileView(m.tiles, m.overlay);
      url = m.url;
      token = typeof m.token === "string" ? m.token : null;
      connect();
    } else if (m.type === "send") {
      send(m.text);
    } else if (m.type === "overlay-size") {
      tiles.setOverlaySize(m.width, m.height);
      kick();
    } else if (m.type === "pixels") {
      const data = tiles.pixels();
      post({ type: "reply", id: m.id, value: data }, [data.buffer]);
    } else if (m.type === "stats") {
      post({ type: "reply", id: m.id, value: { ...stats } });
      if (m.reset) Object.assign(stats, { tasks: 0, longTasks: 0, longTime: 0, worst: 0, worstWhat: null, resyncs: [] });
    } else if (m.type === "overlay-at") {
      post({ type: "reply", id: m.id, value: tiles.overlayAt(m.x, m.y, performance.now()) });
    } else {
      bad("unknown request from the page", m.type);
    }
  } catch (error) {
    if (m.id !== undefined) post({ type: "reply", id: m.id, error: String(error) });
    else bad(`page request ${m.type}`, error);
  }
};
