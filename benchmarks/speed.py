"""Speed and memory of every registry method beside KMeans, measured in one run.

    python benchmarks/speed.py [--quick | --smoke] [--threads 2] [--methods NAME ...]
        [--budget-scale 1.0] [--no-sinkhorn] [--name NAME]

Canonical run: ``python benchmarks/speed.py --no-sinkhorn`` (the Sinkhorn part has its own
canonical file, written by ``sinkhorn_speed.py``).

* fit wall time on a 2,000 x 10 blobs source and predict throughput on 10^5 rows, each as a
  ratio to ``KMeans(n_init=10)`` measured in the same run. The methods are those of
  ``sktransfer_cluster.registry.REGISTRY``, each ``REGISTRY[name].build(10)`` at its default
  budgets (``--budget-scale`` multiplies every ``*epochs``/``n_iter`` budget, as
  ``compare --quick``/``--full`` do);
* extra peak memory of ``predict`` on 10^6 x 64 float32 (the goal is < 1 GiB), each model
  refitted on 500 x 64 rows at the shortest training (predict's memory does not depend on how
  long it trained), pickled, and loaded by a fresh subprocess that reads the kernel's peak-RSS
  counter around its predict (``_common.predict_peaks``);
* our Sinkhorn against POT, from ``sinkhorn_speed.py`` in the same process (``--no-sinkhorn``
  skips it; it writes its own file).

Writes benchmarks/results/speed/speed.{json,md} (another ``--name``, or ``--quick``, goes to
``speed/variants/``; ``--smoke`` -- 300 rows, K = 3, the registry's smallest budgets, the memory
part on the same models and 2,000 x 10 rows -- under a temporary folder). Whether ``fit`` gets the labels
is read from each estimator's tags.
"""

import argparse

import _common
from sktransfer_cluster.base import limit_threads
import numpy as np
from _common import Timer, fit_source, write


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="budgets x0.2, written to variants/")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--methods", nargs="+", default=_common.method_names(), choices=_common.method_names())
    parser.add_argument("--budget-scale", type=float, default=1.0,
                        help="factor on every training budget (default 1: the registry's defaults)")
    parser.add_argument("--no-sinkhorn", action="store_true", help="skip the Sinkhorn-vs-POT part")
    _common.add_name_argument(parser, "speed")
    args = _common.setup(parser.parse_args())
    scale = 0.2 if args.quick and not args.smoke else args.budget_scale
    # A smoke run leaves the Sinkhorn part to sinkhorn_speed.py --smoke, which runs in the same loop.
    if not args.no_sinkhorn and not args.smoke:
        import sinkhorn_speed  # its own file, in this process (one torch import, not two)

        sinkhorn_speed.main(["--threads", str(args.threads)] + (["--quick"] if args.quick else []))
    k = _common.SMOKE_K if args.smoke else 10
    n_fit, n_mem_pred = (300, 2000) if args.smoke else (2000, 1_000_000)
    X, y = _common.blobs(n_fit, 10, k)
    X_pred = np.concatenate([X] * (10 if args.smoke else 50))  # 10^5 rows (smoke: 3,000)
    rows = []
    with limit_threads(args.threads):
        km = _common.peer("KMeans", k)
        with Timer() as t_km_fit:
            km.fit(X)
        with Timer() as t_km_pred:
            km.predict(X_pred)
        ests = {name: _common.build(name, k, budget=scale, random_state=0, device="cpu") for name in args.methods}
        for name, est in ests.items():
            with Timer() as t_fit:
                fit_source(est, X, y)
            with Timer() as t_pred:
                est.predict(X_pred)
            rows.append({"method": name, "fit_s": t_fit.wall, "fit_ratio_vs_kmeans": t_fit.wall / t_km_fit.wall,
                         "predict_rows_per_s": X_pred.shape[0] / t_pred.wall,
                         "predict_ratio_vs_kmeans": t_pred.wall / t_km_pred.wall,
                         "budgets": {p: est.get_params()[p] for p in _common.budget_names(est)}})
            print(rows[-1], flush=True)
    # Peak memory of predict: each model refitted on 500 x 64 normal rows at the shortest training
    # (predict's memory does not depend on how long it trained), pickled, and loaded by a fresh
    # process that predicts 10^6 x 64 rows (in a smoke run: every model in one process).
    # (A smoke run reuses the models above, fitted on 10 features: one fit per method, not two.)
    d_mem = 10 if args.smoke else 64
    rng = np.random.default_rng(1)
    X64, y64 = rng.normal(size=(500, 64)).astype(np.float32), np.arange(500) % k
    models = list(ests.values()) if args.smoke else []
    with limit_threads(args.threads):
        for name in [] if args.smoke else args.methods:
            models.append(fit_source(_common.build(name, k, budget="shortest", random_state=0, device="cpu"), X64, y64))
    peaks = _common.predict_peaks(models, n_mem_pred, d_mem, limit=600, threads=args.threads, fresh=not args.smoke)
    for row, cell in zip(rows, peaks):
        row["predict_peak_extra_mib"] = cell.get("predict_peak_extra_mib")
        if cell["status"] != "ok":
            print(f"{row['method']}: the peak-memory process failed: {cell.get('stderr')}", flush=True)
    budget_text = ("the registry's smallest budgets (smoke run)" if args.smoke else "the registry's defaults"
                   if scale == 1.0 else f"every training budget x{scale:g}")
    md = [
        f"Methods at {budget_text}; {args.threads} threads (training phases run on one).",
        "",
        f"KMeans(n_init=10): fit {t_km_fit.wall:.3f} s on {n_fit:,} x 10; predict "
        f"{X_pred.shape[0] / t_km_pred.wall:,.0f} rows/s.",
        "",
        f"| method | fit s | fit / KMeans | predict rows/s | predict time / KMeans | predict {n_mem_pred:,} x {d_mem} "
        "float32: extra peak MiB |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        peak = "failed" if r["predict_peak_extra_mib"] is None else f"{r['predict_peak_extra_mib']:.0f}"
        md.append(
            f"| {r['method']} | {r['fit_s']:.2f} | {r['fit_ratio_vs_kmeans']:.0f}x | {r['predict_rows_per_s']:,.0f} | "
            f"{r['predict_ratio_vs_kmeans']:.1f}x | {peak} |"
        )
    write("speed", args.name, {"kmeans_fit_s": t_km_fit.wall, "kmeans_predict_s": t_km_pred.wall,
                               "budget_scale": scale, "results": rows}, "\n".join(md), quick=args.quick)


if __name__ == "__main__":
    main()
