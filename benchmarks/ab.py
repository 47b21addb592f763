"""A/B of an old tree against a new one, alternated, a fresh process per tree and round,
medians of every figure.

``python benchmarks/ab.py OLD NEW ROUNDS`` runs a short probe of the hot paths (the
request/reply rate, tells, fan-out, kernel_build, WebSocket calls);
``python benchmarks/ab.py OLD NEW ROUNDS --sections runtime,world,...`` runs
``python -m benchmarks --only SECTION ...`` in each tree instead and compares every number
of its JSON (the key path names it; a key ending in ``_s``/``seconds``/``_us``/``_ms`` is a
time, lower is better; ``per_s``, ``ratio`` and the like read the other way). Each tree is a
checkout; it runs with that tree first on PYTHONPATH."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

PROBE = r'''
import json, time, gc
from benchmarks import runtime, gateway_bench
import barnraise
out = {}
out["request_reply_per_s"] = runtime.barnraise_request_rate(20000)
out["throughput_det_per_s"] = runtime.barnraise_throughput("deterministic", 100, 100000)
out["fanout_per_s"] = runtime.barnraise_fanout_rate(1000, 100)
gc.collect()
w, c = time.perf_counter(), time.process_time()
r = barnraise.run("kernel_build", seed=0, grid_size=840)
out["kernel_build_wall_s"] = time.perf_counter() - w
out["kernel_build_cpu_s"] = time.process_time() - c
assert r.success
ws = gateway_bench.bench_ws_calls(clients=20, calls=100, repeats=1)
out["ws_calls_per_s"] = ws["barnraise"]["calls_per_s"]
out["ws_server_cpu_us_per_call"] = ws["barnraise"].get("server_cpu_us_per_call")
print("AB" + json.dumps(out))
'''

def flat(value: object, path: str = "") -> dict[str, float]:
    """Every number in a JSON value, keyed by its path (``runtime.request_reply.rate``)."""
    if isinstance(value, bool):
        return {}
    if isinstance(value, (int, float)):
        return {path: float(value)}
    out: dict[str, float] = {}
    if isinstance(value, dict):
        for key, item in value.items():
            out.update(flat(item, f"{path}.{key}" if path else str(key)))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out.update(flat(item, f"{path}[{i}]"))
    return out


def once(tree: str, sections: list[str] | None = None, quick: bool = False) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": tree}
    if sections:
        argv = [sys.executable, "-m", "benchmarks"]
        for section in sections:
            argv += ["--only", section]
        argv += ["--quick"] if quick else []
        done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True,
                              timeout=7200)
        if done.returncode:
            raise SystemExit(f"{tree}: {done.stderr[-2000:]}")
        figures = flat(json.loads(done.stdout))
        return {k: v for k, v in figures.items() if not k.startswith(("machine.", "quick"))}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=tree, env=env, capture_output=True,
                          text=True, timeout=900)
    line = [text for text in done.stdout.splitlines() if text.startswith("AB")]
    if not line:
        raise SystemExit(f"{tree}: {done.stderr[-2000:]}")
    return dict(json.loads(line[0][2:]))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python benchmarks/ab.py")
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("rounds", type=int)
    parser.add_argument("--sections", help="comma-separated sections of python -m benchmarks")
    parser.add_argument("--quick", action="store_true", help="pass --quick: a smoke run")
    args = parser.parse_args()
    old, new, rounds = args.old, args.new, args.rounds
    sections = args.sections.split(",") if args.sections else None
    runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    for r in range(rounds):
        order = [("old", old), ("new", new)] if r % 2 == 0 else [("new", new), ("old", old)]
        for name, tree in order:
            runs[name].append(once(tree, sections, args.quick))
            print(name, r, json.dumps(runs[name][-1]), file=sys.stderr, flush=True)
    summary = {}
    for k in runs["old"][0]:
        olds = [x[k] for x in runs["old"] if x.get(k) is not None]
        news = [x[k] for x in runs["new"] if x.get(k) is not None]
        if not olds or not news:
            continue  # a figure only one tree has
        o, n = statistics.median(olds), statistics.median(news)
        summary[k] = {"old": round(o, 4), "new": round(n, 4),
                      "new/old": round(n / o, 3) if o else None}
    # the figures that moved by more than 5% either way, for a reader to judge by their names
    moved = {k: v["new/old"] for k, v in summary.items()
             if v["new/old"] is not None and abs(v["new/old"] - 1) > 0.05}
    print(json.dumps({"rounds": rounds, "moved_over_5pct": moved, "median": summary,
                      "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
