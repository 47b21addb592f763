"""A/B of the hot paths issue 23 touched: an old tree against a new one, alternated, a
fresh process per tree and round, medians. ``python benchmarks/ab.py OLD NEW ROUNDS``
(each tree a checkout; the probe runs with that tree on PYTHONPATH)."""
from __future__ import annotations

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

def once(tree: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": tree}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=tree, env=env, capture_output=True,
                          text=True, timeout=900)
    line = [text for text in done.stdout.splitlines() if text.startswith("AB")]
    if not line:
        raise SystemExit(f"{tree}: {done.stderr[-2000:]}")
    return json.loads(line[0][2:])


def main() -> None:
    old, new, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    for r in range(rounds):
        order = [("old", old), ("new", new)] if r % 2 == 0 else [("new", new), ("old", old)]
        for name, tree in order:
            runs[name].append(once(tree))
            print(name, r, json.dumps(runs[name][-1]), file=sys.stderr, flush=True)
    keys = runs["old"][0].keys()
    summary = {}
    for k in keys:
        o = statistics.median(x[k] for x in runs["old"] if x[k] is not None)
        n = statistics.median(x[k] for x in runs["new"] if x[k] is not None)
        summary[k] = {"old": round(o, 4), "new": round(n, 4), "new/old": round(n / o, 3)}
    print(json.dumps({"rounds": rounds, "median": summary, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
