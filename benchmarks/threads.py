"""The thread policy on an idle and on a busy machine (issue 31, item 3).

    python benchmarks/threads.py [--parts solver predict] [--methods A B ...] [--n-predict N]
        [--repeats R] [--name NAME] [--smoke]

Canonical run: ``python benchmarks/threads.py`` (written to ``results/busy/variants/threads``).

Each part runs in a fresh process with the environment a user has (``OMP_NUM_THREADS``,
``MKL_NUM_THREADS`` and ``OMP_WAIT_POLICY`` removed, so torch, MKL and OpenBLAS start with one
thread per core), first alone and then beside ``python -c "while True: pass"``, which this
script starts before the part and stops after it. Wall seconds, median of ``--repeats``:

* ``solver``: ``sktransfer_cluster.ot.sinkhorn`` against POT's plain ``ot.sinkhorn``, each at
  its default threads and at one thread (torch and BLAS limited), on a 20,000 x 10
  squared-distance cost divided by its maximum, ``reg=1e-2``, stopped at an L1 marginal
  error of 1e-6 (POT's L2 criterion given 1e-6 / sqrt(10)). Goal: ours at the default threads
  no slower than POT's default, alone and busy.
* ``predict``: every registry method and ``KMeans`` fitted on 2,000 x 64 float32 blobs
  (K = 10, every training budget at 1: the cost of predict does not depend on it), then
  ``predict`` on ``--n-predict`` x 64 rows at the default threads and under
  ``limit_threads(1)``. Goal: default / one thread at most 1.2x when the machine is busy.

``--smoke``: 2,000 x 10 for the solver, 2,000 rows for predict, SinkhornKMeans and KMeans only,
one repeat, and a *sleeping* neighbour instead of a spinning one; files under a temporary folder.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import _common
import numpy as np

HERE = Path(__file__).resolve().parent
_MARK = "SKTC-THREADS "


def user_environment():
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_WAIT_POLICY"):
        env.pop(var, None)
    return env


def median_wall(fn, repeats):
    walls, cpus = [], []
    for _ in range(repeats):
        _, wall, cpu = _common.timed(fn)
        walls.append(wall)
        cpus.append(cpu)
    return float(np.median(walls)), float(np.median(cpus))


def solver_part(n, repeats):
    import ot
    import torch
    from threadpoolctl import threadpool_limits

    from sktransfer_cluster.base import limit_threads
    from sktransfer_cluster.ot import sinkhorn

    k = 10
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 10))
    M = ot.dist(X, X[rng.choice(n, k, replace=False)] + 0.1)
    M /= M.max()
    a, b = np.full(n, 1 / n), np.full(k, 1 / k)
    tol = 1e-6

    def ours():
        return sinkhorn(a, b, M, 1e-2, tol=tol, max_iter=100000)

    def pot():
        return ot.sinkhorn(a, b, M, 1e-2, numItermax=100000, stopThr=tol / np.sqrt(k))

    ours(), pot()  # lazy imports and first-call costs
    out = {"default_torch_threads": torch.get_num_threads()}
    out["ours_default"] = median_wall(ours, repeats)
    out["pot_default"] = median_wall(pot, repeats)
    with limit_threads(1):
        out["ours_1"] = median_wall(ours, repeats)
    with threadpool_limits(1):
        out["pot_1"] = median_wall(pot, repeats)
    return out


def predict_part(methods, n_predict, repeats):
    import torch

    from sktransfer_cluster.base import limit_threads

    k, d = 10, 64
    X, y = _common.blobs(2000, d, k)
    Xp, _ = _common.blobs(n_predict, d, k, seed=1)
    out = {"default_torch_threads": torch.get_num_threads(), "methods": {}}
    for name in methods:
        with limit_threads(1):
            est = _common.estimator(name, k, budget="shortest", smallest=_common.SMOKE)
            _common.fit_source(est, X, y)
            est.predict(Xp[:10])
        default = median_wall(lambda est=est: est.predict(Xp), repeats)
        with limit_threads(1):
            one = median_wall(lambda est=est: est.predict(Xp), repeats)
        out["methods"][name] = {"default": default, "one": one}
        print(name, default, one, file=sys.stderr, flush=True)
    return out


def child(args):
    parts = {}
    if "solver" in args.parts:
        parts["solver"] = solver_part(args.n_solver, args.repeats)
    if "predict" in args.parts:
        parts["predict"] = predict_part(args.methods, args.n_predict, args.repeats)
    print(_MARK + json.dumps(parts), flush=True)


def run(args, busy):
    hog = None
    if busy:
        hog = subprocess.Popen([sys.executable, "-c",
                                "import time; time.sleep(3600)" if _common.SMOKE else "while True: pass"])
        time.sleep(1.0)
    load = os.getloadavg()[0]
    cmd = [sys.executable, str(HERE / "threads.py"), "--child", "--parts", *args.parts, "--methods", *args.methods,
           "--n-predict", str(args.n_predict), "--n-solver", str(args.n_solver), "--repeats", str(args.repeats)]
    if _common.SMOKE:
        cmd.append("--smoke")
    try:
        done = subprocess.run(cmd, cwd=HERE, env=user_environment(), capture_output=True, text=True, check=True)
    except subprocess.CalledProcessError as exc:
        sys.stderr.write(exc.stderr)
        raise
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    line = next(line for line in done.stdout.splitlines() if line.startswith(_MARK))
    return {"busy": busy, "load_before": load, **json.loads(line[len(_MARK):])}


def markdown(runs, args):
    neighbour = "a *sleeping* process (smoke run)" if _common.SMOKE else '`python -c "while True: pass"`'
    md = [f"A fresh process with the user's environment (no `OMP_NUM_THREADS`), alone and beside {neighbour}. "
          f"Wall seconds, median of {args.repeats}; load average before each run: "
          + ", ".join(f"{r['load_before']:.2f} ({'busy' if r['busy'] else 'alone'})" for r in runs) + "."]
    if "solver" in args.parts:
        md += ["", f"### Solver: {args.n_solver:,} x 10, reg 1e-2 (goal: ours at the default threads <= POT's default)",
               "", ("| run | torch threads at start | ours, default | POT `sinkhorn`, default | ours / POT | "
                     "ours, 1 thread | POT, 1 thread |"), "|---|---|---|---|---|---|---|"]
        for r in runs:
            s = r["solver"]
            md.append(f"| {'busy' if r['busy'] else 'alone'} | {s['default_torch_threads']} | "
                      f"{s['ours_default'][0]:.4f} | {s['pot_default'][0]:.4f} | "
                      f"**{s['ours_default'][0] / s['pot_default'][0]:.2f}x** | {s['ours_1'][0]:.4f} | "
                      f"{s['pot_1'][0]:.4f} |")
    if "predict" in args.parts:
        md += ["", f"### predict on {args.n_predict:,} x 64 float32 rows (goal: busy, default / 1 thread <= 1.2x)",
               "", ("| method | alone: default s | alone: 1 thread s | alone ratio | busy: default s | "
                     "busy: 1 thread s | **busy ratio** |"), "|---|---|---|---|---|---|---|"]
        idle, busy = runs
        for name in args.methods:
            a, b = idle["predict"]["methods"][name], busy["predict"]["methods"][name]
            md.append(f"| {name} | {a['default'][0]:.3f} | {a['one'][0]:.3f} | {a['default'][0] / a['one'][0]:.2f}x | "
                      f"{b['default'][0]:.3f} | {b['one'][0]:.3f} | **{b['default'][0] / b['one'][0]:.2f}x** |")
    return "\n".join(md)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", nargs="+", default=["solver", "predict"], choices=["solver", "predict"])
    parser.add_argument("--methods", nargs="+", default=None, help="default: KMeans and every registry method")
    parser.add_argument("--n-predict", type=int, default=200_000)
    parser.add_argument("--n-solver", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    _common.add_name_argument(parser, "busy")
    args = _common.setup(parser.parse_args())
    if args.smoke:
        args.n_predict, args.n_solver, args.repeats = 2000, 2000, 1
        args.methods = args.methods or ["KMeans", "SinkhornKMeans"]
    if args.methods is None:
        args.methods = ["KMeans", *_common.method_names()]
    if args.child:
        return child(args)
    if args.name == _common.CANONICAL["busy"]:
        args.name = "threads"
    runs = [run(args, busy) for busy in (False, True)]
    _common.write("busy", args.name, {"runs": runs, "n_predict": args.n_predict, "n_solver": args.n_solver},
                  markdown(runs, args))


if __name__ == "__main__":
    main()
