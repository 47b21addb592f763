"""The page side of the view benchmark, in a process of its own.

``python -m benchmarks.view_page URL`` opens the live view's page at URL in headless
Chromium (Debian's, through Playwright), prints one JSON line once the page has drawn
its first frame (``{"ready": true}``), waits until the page shows the run finished,
then prints one JSON line with what the page counted over that span (and keeps the
browser open until a line or the end of input comes on stdin): the frames it
drew per second (it draws on demand), its animation frames and tasks over 50 ms and
the longest (Chromium's long-animation-frame and longtask entries), the deltas it
applied, the bad messages it showed and its progress. Errors are one JSON line
``{"error": ...}`` and exit 1.

``python -m benchmarks.view_page --socket WS_URL`` is the page without a browser: a
plain WebSocket client that reads every frame and delta (ready after the first)
until one says the run is finished, then prints the bytes it read.

It runs apart from the benchmark's process because Playwright's Python client is a
harness, not part of a viewer: in the benchmark's process its event loop and the
protocol traffic it parses would take the interpreter's lock from the run being
measured, as no browser on a user's machine does.
"""

from __future__ import annotations

import json
import sys


def _socket(url: str) -> int:
    from websockets.sync.client import connect

    received = 0
    with connect(url, max_size=None, open_timeout=30) as ws:
        while True:
            message = ws.recv(timeout=600)
            data = message if isinstance(message, bytes) else message.encode()
            if not received:
                print(json.dumps({"ready": True}), flush=True)
            received += len(data)
            if b'"state":"finished"' in data:
                break
    print(json.dumps({"bytes": received}), flush=True)
    return 0


def main(argv: list[str]) -> int:
    from playwright.sync_api import sync_playwright

    from barnraise.view import headless

    if len(argv) == 2 and argv[0] == "--socket":
        try:
            return _socket(argv[1])
        except Exception as exc:
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
            return 1
    if len(argv) != 1:
        print(json.dumps({"error": "usage: python -m benchmarks.view_page [--socket] URL"}),
              flush=True)
        return 1
    try:
        with sync_playwright() as playwright:
            browser = headless.launch(playwright)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.set_default_timeout(600_000)
                page.goto(argv[0])
                page.wait_for_function("window.__view && window.__view.frameMessages > 0")
                before = page.evaluate("async () => ({worker: __view.workerStats ? "
                                       "await __view.workerStats(true) : null, "
                                       "frames: __view.frames, at: performance.now(), "
                                       "long: __view.longFrames, tasks: __view.longTasks, "
                                       "longTime: __view.longFrameTime})")
                print(json.dumps({"ready": True}), flush=True)
                # Polled five times a second, not every animation frame: the harness's
                # own checking should not be counted as the page's work.
                page.wait_for_function("window.__view.state === 'finished'", polling=200)
                after = page.evaluate("async () => ({worker: __view.workerStats ? "
                                      "await __view.workerStats() : null, "
                                      "frames: __view.frames, at: performance.now(), "
                                      "deltas: __view.deltas, bad: __view.bad, "
                                      "progress: __view.progress, long: __view.longFrames, "
                                      "longTime: __view.longFrameTime, "
                                      "tasks: __view.longTasks, worstTask: __view.worstTask, "
                                      "worst: __view.worstFrame, watch: __view.frameWatch, "
                                      "frameLog: __view.longFrameLog, "
                                      "taskLog: __view.longTaskLog})")
                seconds = (after["at"] - before["at"]) / 1000
                # Frames and tasks that began while the run went. (Chromium reports an
                # entry after it ends: the page's first frame, drawn before "ready", is
                # often reported after it, so the counters' difference is not used while
                # the entries, which are kept up to 100, say when each began.)
                worker = after["worker"]
                frames = [f for f in after["frameLog"] if f["at_ms"] >= before["at"]]
                tasks = [t for t in after["taskLog"] if t["at_ms"] >= before["at"]]
                if len(after["frameLog"]) >= 100 or len(after["taskLog"]) >= 100:
                    raise RuntimeError("over 100 long frames or tasks: not all kept")
                # Said before the browser closes: the benchmark reads its CPU then.
                print(json.dumps({
                    "frames_drawn_per_s": (after["frames"] - before["frames"]) / seconds
                    if seconds > 0 else 0.0,
                    "long_frames": len(frames),
                    # the share of the span spent in frames over 50 ms (under 20 fps);
                    # (long tasks are counted apart: a long frame may contain one)
                    "long_frame_share": sum(f["ms"] for f in frames)
                    / (after["at"] - before["at"]) if after["at"] > before["at"] else 0.0,
                    "long_tasks": len(tasks),
                    "worst_frame_ms": max((f["ms"] for f in frames), default=0.0),
                    "worst_task_ms": max((t["ms"] for t in tasks), default=0.0),
                    # the page's first frame (before the run) and anything else before it
                    "before_run": {"long_frames": len(after["frameLog"]) - len(frames),
                                   "worst_frame_ms": after["worst"]},
                    "frame_watch": after["watch"],
                    # what each long frame was made of (long frames before "ready" too)
                    "long_frame_log": frames,
                    # the worker's own tasks (parse, decode, draw) over 50 ms
                    # (none: a page without the worker, measured for a comparison)
                    "worker_long_tasks": worker and worker["longTasks"],
                    "worker_worst_task_ms": worker and worker["worst"],
                    "worker_worst_task": worker and worker["worstWhat"],
                    "page_resyncs": worker and worker["resyncs"],
                    "page_deltas": after["deltas"], "page_bad": after["bad"],
                    "page_progress": after["progress"]}), flush=True)
                # The benchmark reads the browser's CPU and threads now: the browser stays
                # until it says so (a line, or the end of its pipe).
                sys.stdin.readline()
            finally:
                browser.close()
    except Exception as exc:  # reported to the benchmark, which raises it
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
