"""``compile=True`` against eager mode: TDCMCluster at its defaults on MNIST-5k (issue 31 item 5).

Three fits of ``TDCMCluster(10, random_state=seed)`` on MNIST-5k (``load_mnist_5k``, flat rows),
each in a fresh Python process so that no in-memory compile cache carries over:

1. ``eager``: ``compile=False``;
2. ``compiled, cold cache``: ``compile=True`` with an empty inductor cache
   (``TORCHINDUCTOR_CACHE_DIR`` a new temporary folder): a first fit on a new machine;
3. ``compiled, warm cache``: ``compile=True`` again on the cache that fit 2 filled: a
   later fit on the same machine, which still traces the step but reuses the compiled code.

Every process runs on one thread with ``TORCHINDUCTOR_COMPILE_THREADS=1`` (inductor compiles
in-process, so ``time.process_time()`` plus the CPU time of its waited-for children, the
C++ compiler runs, is the whole cost). Per phase of the fit (``neighbours``: the neighbour
encoder, not compiled; ``fit``: TDCM's blocks, compiled) it records the CPU seconds of each
epoch, through a training callback. Reported: the median epoch of the blocks' phase after its
first two, the first epoch (which holds the compilation), the compilation's cost (the first
epoch minus a median one), the whole fit, the ACC of each fit, and the break-even point
(the eager blocks-phase CPU seconds beyond which compilation pays).

Usage::

    python benchmarks/compile_speed.py [--seed 0]
    python benchmarks/compile_speed.py --smoke   # 400 blobs, 3 epochs, eager and aot_eager (no C++ build): ~20 CPU s

Writes ``benchmarks/results/tdcm/compile_speed.{md,json}`` (``--smoke``: a temporary folder).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _cpu():
    """CPU seconds of this process and of its waited-for children (the C++ compiler runs)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + r.ru_utime + r.ru_stime


def one_fit(mode, seed, smoke):
    """Fit once in this process; return the per-phase epoch CPU seconds, the total and the ACC."""
    import torch

    sys.path.insert(0, str(ROOT))
    from sktransfer_cluster import TDCMCluster
    from sktransfer_cluster.metrics import clustering_accuracy

    torch.set_num_threads(1)

    class EpochTimes:
        def __init__(self):
            self.times, self.last = {}, None

        def on_phase_begin(self, run):
            self.last = _cpu()

        def on_epoch_end(self, run, values):
            now = _cpu()
            self.times.setdefault(run.phase, []).append(now - self.last)
            self.last = now

    if smoke:
        from sklearn.datasets import make_blobs

        X, y = make_blobs(400, n_features=10, centers=4, random_state=seed)
        params = dict(n_clusters=4, max_epochs=3)
        TDCMCluster._compile_options = {"backend": "aot_eager"}
    else:
        from sktransfer_cluster.datasets import load_mnist_5k

        X, y = load_mnist_5k()
        params = dict(n_clusters=10)
    timer = EpochTimes()
    est = TDCMCluster(**params, compile=mode != "eager", random_state=seed, callbacks=[timer])
    start = _cpu()
    labels = est.fit(X).labels_
    total = _cpu() - start
    return {"mode": mode, "epochs": timer.times, "total": total, "acc": float(clustering_accuracy(y, labels))}


def run_child(mode, seed, smoke, cache_dir):
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache_dir, TORCHINDUCTOR_COMPILE_THREADS="1",
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    cmd = [sys.executable, __file__, "--child", mode, "--seed", str(seed)] + (["--smoke"] if smoke else [])
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def summarise(result):
    fit = np.asarray(result["epochs"]["fit"])
    median = float(np.median(fit[2:])) if fit.size > 2 else float(np.median(fit))
    return {
        "fit_epochs": int(fit.size),
        "median_epoch": median,
        "first_epoch": float(fit[0]),
        "compile_cost": float(fit[0] - median),
        "blocks_phase": float(fit.sum()),
        "neighbour_phase": float(np.sum(result["epochs"].get("neighbours", []))),
        "total": result["total"],
        "acc": result["acc"],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--child", choices=["eager", "compiled"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_fit(args.child, args.seed, args.smoke)))
        return

    out_dir = Path(tempfile.mkdtemp()) if args.smoke else ROOT / "benchmarks" / "results" / "tdcm"
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = {}
    with tempfile.TemporaryDirectory() as cache:
        fits = (("eager", "eager"), ("compiled, cold cache", "compiled"), ("compiled, warm cache", "compiled"))
        for label, mode in fits[:2] if args.smoke else fits:  # the smoke run: the two code paths, no cache row
            rows[label] = summarise(run_child(mode, args.seed, args.smoke, cache))
            print(label, {k: round(v, 3) for k, v in rows[label].items()}, file=sys.stderr, flush=True)

    eager = rows["eager"]
    lines = [
        f"# compile=True against eager: TDCMCluster defaults on {'400 blobs (smoke)' if args.smoke else 'MNIST-5k'} "
        f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, seed {args.seed}, 1 thread, CPU seconds)",
        "",
        f"`python benchmarks/compile_speed.py{' --smoke' if args.smoke else ''} --seed {args.seed}`; each row a fresh process; "
        "CPU seconds = process_time + the C++ compiler's (children's) CPU; inductor compiles in-process.",
        "",
        "| fit | blocks' epoch (median) | speed-up per epoch | first epoch | compilation | blocks' phase "
        "| neighbour phase | whole fit | ACC |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, r in rows.items():
        lines.append(
            f"| {label} | {r['median_epoch']:.3f} | {eager['median_epoch'] / r['median_epoch']:.2f}x | {r['first_epoch']:.1f} "
            f"| {r['compile_cost'] if label != 'eager' else 0.0:.1f} | {r['blocks_phase']:.1f} | {r['neighbour_phase']:.1f} "
            f"| {r['total']:.1f} | {r['acc']:.3f} |"
        )
    lines.append("")
    for label in ("compiled, cold cache", "compiled, warm cache"):
        if label not in rows:
            continue
        r = rows[label]
        saved = eager["median_epoch"] - r["median_epoch"]
        if saved > 0:
            epochs = r["compile_cost"] / saved
            lines.append(
                f"- {label}: compilation repaid after {epochs:.0f} blocks' epochs, i.e. once the eager blocks' phase "
                f"is longer than {epochs * eager['median_epoch']:.1f} CPU s."
            )
    text = "\n".join(lines) + "\n"
    (out_dir / "compile_speed.md").write_text(text)
    (out_dir / "compile_speed.json").write_text(json.dumps({"seed": args.seed, "smoke": args.smoke, "rows": rows}, indent=1))
    print(text)


if __name__ == "__main__":
    main()
