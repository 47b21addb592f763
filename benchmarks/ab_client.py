"""A/B of the paths the typed tool surface touches: an old tree against a new one,
alternated, a fresh process per tree and round, CPU time (``time.process_time``),
medians. ``python benchmarks/ab_client.py OLD NEW ROUNDS`` (each tree a checkout; the
probe runs with that tree on PYTHONPATH).

Figures: deterministic request/reply round trips per second (``benchmarks.runtime``),
the CPU seconds of ``barnraise.run("kernel_build", seed=0)`` (median of three in the
process), and the CPU microseconds of one ``Client`` tool call in deterministic mode,
by its method (``client.region_query(...)``) and by ``client.call("region_query", ...)``.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

PROBE = r'''
import gc, json, statistics, time
from benchmarks import runtime
import barnraise
from barnraise.actors.world import Simulation
out = {}
out["request_reply_per_s"] = runtime.barnraise_request_rate(20000)
spent = []
for _ in range(3):
    gc.collect()
    started = time.process_time()
    result = barnraise.run("kernel_build", seed=0)
    spent.append(time.process_time() - started)
    assert result.success
out["kernel_build_cpu_s"] = statistics.median(spent)
with Simulation(seed=1) as simu:
    client = simu.client()
    client.call("session_create", session_name="S", grid_size=50)
    client.call("session_join", agent_name="A")
    region = {"x": 0, "y": 0, "width": 5, "height": 5}
    for _ in range(200):
        client.region_query(region=region)
    started = time.process_time()
    for _ in range(3000):
        client.region_query(region=region)
    out["client_method_us_per_call"] = (time.process_time() - started) / 3000 * 1e6
    started = time.process_time()
    for _ in range(3000):
        client.call("region_query", region=region)
    out["client_call_us_per_call"] = (time.process_time() - started) / 3000 * 1e6
print("AB" + json.dumps(out))
'''


def once(tree: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": tree}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=tree, env=env, capture_output=True,
                          text=True, timeout=900, check=False)
    line = [text for text in done.stdout.splitlines() if text.startswith("AB")]
    if not line:
        raise SystemExit(f"{tree}: {done.stderr[-2000:]}")
    figures: dict[str, float] = json.loads(line[0][2:])
    return figures


def main() -> None:
    old, new, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    for r in range(rounds):
        order = [("old", old), ("new", new)] if r % 2 == 0 else [("new", new), ("old", old)]
        for name, tree in order:
            runs[name].append(once(tree))
            print(name, r, json.dumps(runs[name][-1]), file=sys.stderr, flush=True)
    summary = {}
    for key in runs["old"][0]:
        o = statistics.median(x[key] for x in runs["old"])
        n = statistics.median(x[key] for x in runs["new"])
        summary[key] = {"old": round(o, 4), "new": round(n, 4), "new/old": round(n / o, 3)}
    print(json.dumps({"rounds": rounds, "median": summary, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
