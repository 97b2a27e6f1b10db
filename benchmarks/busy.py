"""``compare`` on an idle machine and beside a CPU-bound process (issue 18, part 6).

    python benchmarks/busy.py [--data digits tdcm] [--methods A,B] [--quick | --smoke] [--timeout SECONDS]
        [--name NAME]

Canonical run: ``python benchmarks/busy.py``.

Runs ``python -m sktransfer_cluster compare`` in a fresh subprocess, first alone and then beside
``python -c "while True: pass"``, which this script starts before the run and stops after it.
Both runs get the environment a user has: ``OMP_NUM_THREADS`` and ``OMP_WAIT_POLICY`` are
removed, so compare uses its default thread count (the physical cores) and OpenMP its default
(spinning) wait policy. Recorded per run: wall and CPU seconds of the whole compare (the child's
``resource`` usage), each method's fit and transfer seconds from its ``results.json``, the thread
count compare reports, and the load average just before the run. The loaded run should take no
more than about 2.5x the idle one. A run still going after ``--timeout`` seconds is stopped and
marked as such.

Writes benchmarks/results/busy/busy.{json,md} (another ``--name``, or ``--quick``, goes to
``busy/variants/``; ``--smoke`` -- ``compare --quick`` of SinkhornKMeans on a 150 + 150-row
.npz task, alone and then beside a *sleeping* process stopped after 5 s -- under a temporary folder).
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common

ROOT = Path(__file__).resolve().parent.parent


def smoke_task():
    """A tiny transfer task as an .npz file (compare reads it like a user's), in the smoke folder."""
    import numpy as np

    X, y = _common.blobs(300, 5, _common.SMOKE_K)
    path = _common.RESULTS / "busy_smoke_task.npz"
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, X_source=X[:150], y_source=y[:150], X_target=X[150:] + 0.5, y_target=y[150:])
    return str(path)


def user_environment():
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY"):
        env.pop(var, None)
    return env


def run_compare(data, quick, busy, timeout, methods=None):
    """One compare in a fresh process; returns its timings and rows."""
    hog = None
    if busy:
        # A smoke run starts and stops a sleeping process instead: it checks the path, not the
        # contention, and a spinning one would hold a CI core for the whole compare.
        hog = subprocess.Popen([sys.executable, "-c",
                                "import time; time.sleep(3600)" if _common.SMOKE else "while True: pass"])
        time.sleep(1.0)  # let the scheduler see it
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "sktransfer_cluster", "compare", "--data", *data, "--out", out]
        if quick:
            cmd.append("--quick")
        if methods:
            cmd += ["--methods", methods]
        if _common.SMOKE:  # one thread: spinning OpenMP threads on a shared CI core cost more than the run
            cmd += ["--threads", "1"]
        t0 = time.perf_counter()
        try:
            subprocess.run(cmd, check=True, cwd=ROOT, env=user_environment(), stdout=subprocess.DEVNULL,
                           timeout=timeout)
            finished = True
        except subprocess.TimeoutExpired:  # run() kills and reaps the child
            finished = False
        finally:
            wall = time.perf_counter() - t0
            # Read before the hog is reaped: a child's CPU time counts once it is waited for.
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if hog is not None:
                hog.kill()
                hog.wait()
        result = json.loads(Path(out, "results.json").read_text()) if finished else {"metadata": {}, "rows": []}
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"busy": busy, "finished": finished, "wall_s": wall, "cpu_s": cpu, "load_before": load,
            "threads": result["metadata"].get("threads"), "rows": result["rows"]}


def per_method(run):
    out = {}
    for r in run["rows"]:
        out[r["method"]] = out.get(r["method"], 0.0) + r["fit_s"] + r["transfer_s"]
    return out


def markdown(runs):
    idle, busy = runs
    md = ["`compare` in a fresh process with the user's environment (`OMP_NUM_THREADS` and "
          "`OMP_WAIT_POLICY` unset), alone and beside one "
          + ("*sleeping* process (a smoke run)" if _common.SMOKE else "`python -c \"while True: pass\"`")
          + f" started and stopped by the benchmark. compare's thread count: {idle['threads']}.", "",
          "| run | wall s | CPU s | load before |", "|---|---|---|---|"]
    for r in runs:
        stopped = "" if r["finished"] else " (stopped at the timeout)"
        md.append(f"| {'beside a busy process' if r['busy'] else 'alone'}{stopped} | {r['wall_s']:.1f} | "
                  f"{r['cpu_s']:.1f} | {r['load_before']:.2f} |")
    ratio = f"{busy['wall_s'] / idle['wall_s']:.2f}x" + ("" if busy["finished"] else " or more (stopped)")
    md += ["", f"**Loaded / idle wall time: {ratio}** (goal: at most about 2.5x).",
           "", "Per method, fit + transfer wall seconds summed over the tasks (compare's own timings):", "",
           "| method | alone s | beside a busy process s | ratio |", "|---|---|---|---|"]
    a, b = per_method(idle), per_method(busy)
    for m in a:
        md.append(f"| {m} | {a[m]:.1f} | {b.get(m, float('nan')):.1f} | {b.get(m, float('nan')) / a[m]:.2f}x |")
    return "\n".join(md)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", nargs="+", default=["digits", "tdcm"])
    parser.add_argument("--methods", default=None, help="compare --methods (default: every registry method)")
    parser.add_argument("--quick", action="store_true", help="compare --quick; written to variants/")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds after which a run is stopped")
    _common.add_name_argument(parser, "busy")
    args = _common.setup(parser.parse_args())
    if args.smoke:  # one fast method on a 150 + 150-row file task: the two runs and the hog, in seconds
        args.data, args.methods, args.timeout = [smoke_task()], "SinkhornKMeans", min(args.timeout, 120.0)
    runs = []
    for busy in (False, True):
        # A smoke run stops the second run after 5 s: it checks the neighbour's start and stop and
        # the timeout path at the price of half a compare.
        timeout = 5.0 if args.smoke and busy else args.timeout
        runs.append(run_compare(args.data, args.quick, busy, timeout, args.methods))
        print({k: v for k, v in runs[-1].items() if k != "rows"}, flush=True)
    for r in runs:
        for row in r["rows"]:
            row.pop("labels", None)
    _common.write("busy", args.name, {"runs": runs}, markdown(runs), quick=args.quick)


if __name__ == "__main__":
    main()
