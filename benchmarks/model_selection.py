"""Label-free model selection: GridSearchCV with ``score`` against the best-ARI choice.

    python benchmarks/model_selection.py [--methods SinkhornKMeans TDCMCluster]
        [--datasets imbalanced digits mnist] [--seeds 0 1 2] [--mnist-seeds 0] [--folds 3] [--quick | --smoke]

Canonical runs: ``python benchmarks/model_selection.py`` and ``python benchmarks/model_selection.py --cost``.

For each method, data set and seed, ``GridSearchCV(estimator, grid, cv=KFold(folds,
shuffle=True, random_state=seed))`` runs with three scorers on the held-out folds:

* ``score``     -- the estimator's own ``score`` (minus the within-cluster sum of squares
                   of the predicted partition, in the input space): the label-free choice;
* ``old score`` -- the previous ``score``: minus the regularised transport cost
                   ``n [<P, C> + reg_ KL(P | a w^T)]`` (SinkhornKMeans) or minus the
                   training objective on the smoothed rows (TDCMCluster);
* ``ARI``       -- ARI of ``predict`` on the held-out fold against the classes (uses labels;
                   only to judge the choices).

The grid: ``epsilon`` (SinkhornKMeans) or ``tau`` (TDCMCluster), every other parameter at
its default. Data sets: sklearn's digits (1797 x 64, /16, K=10), MNIST-5k
(``load_mnist_5k``, 5000 x 784, K=10), and ``imbalanced``: four 10-D Gaussians of
800/400/200/100 points (unit variance, centres N(0, 2.5^2) per coordinate, K=4), where the
default uniform size prior is wrong and a larger epsilon is better. Results go to
``benchmarks/results/model_selection/model_selection.{json,md}``
(``--name`` for another stem; ``--quick`` writes ``<name>_quick``; ``--smoke`` -- the
imbalanced set cut to 300 rows, one seed, 2 folds, the first 2 grid values, the registry's
smallest budgets -- writes under a temporary folder and leaves ``--cost`` out).

    python benchmarks/model_selection.py --cost [--cost-n 1000000]

The cost of ``SinkhornKMeans.score`` (issue 19.5) beside ``predict``, one OT-Lloyd iteration
(the unit of ``fit``) and KMeans' ``predict``/``score``, on n x 64 float32 blobs (K=8,
models fitted on the first 20,000 rows): CPU and wall seconds and the peak resident memory
above the state before the call (``ru_maxrss``), each operation in a fresh subprocess so
that one peak does not hide the next. Writes ``cost.{json,md}`` beside the grid results.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402
from _common import command_line, machine  # noqa: E402

GRIDS = {
    "SinkhornKMeans": ("epsilon", [0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0]),
    "TDCMCluster": ("tau", [0.1, 0.3, 1.0, 3.0, 10.0]),
}


def out_dir():
    """results/model_selection/ (read after ``_common.setup``: a smoke run writes elsewhere)."""
    return _common.RESULTS / "model_selection"


def load(name, quick):
    from sklearn.datasets import load_digits, make_blobs

    from sktransfer_cluster.datasets import load_mnist_5k

    if name == "digits":
        X, y = load_digits(return_X_y=True)
        X, y, k = X / 16.0, y, 10
    elif name == "mnist":
        X, y = load_mnist_5k()
        k = 10
    elif name == "imbalanced":
        centres = np.random.RandomState(0).normal(size=(4, 10)) * 2.5
        X, y = make_blobs(n_samples=[800, 400, 200, 100], centers=centres, cluster_std=1.0, random_state=0)
        k = 4
    else:
        raise ValueError(f"unknown data set {name!r}")
    if quick:
        keep = np.random.RandomState(0).permutation(X.shape[0])[: min(X.shape[0], 300 if _common.SMOKE else 600)]
        X, y = X[keep], y[keep]
    return X, y, k


def old_score(est, X, y=None):
    """The previous ``score``: regularised OT cost (SinkhornKMeans), training objective (TDCM)."""
    X = np.asarray(X, dtype=np.float64)
    if type(est).__name__ == "SinkhornKMeans":
        P = est.transport_plan(X)
        C = est.transform(X) ** 2
        n = X.shape[0]
        ab = np.outer(np.full(n, 1.0 / n), est.weights_)
        Pc = np.clip(P, 1e-300, None)
        kl = (P * (np.log(Pc) - np.log(ab))).sum() - P.sum() + 1.0
        return -n * float((P * C).sum() + est.reg_ * kl)
    return -est._full_objective(est._smoothed(X, est._input_projection()))


def ari_scorer(est, X, y):
    from sklearn.metrics import adjusted_rand_score

    return adjusted_rand_score(y, est.predict(X))


def own_score(est, X, y=None):
    return est.score(X)


def make(method, k, seed):
    # Through the registry (a smoke run gets the smallest budget); GRIDS names registry methods.
    return _common.build(method, k, device="cpu", random_state=seed)


def run_one(method, X, y, k, seed, folds):
    from sklearn.model_selection import GridSearchCV, KFold

    param, grid = GRIDS[method]
    search = GridSearchCV(
        make(method, k, seed),
        {param: grid},
        scoring={"score": own_score, "old": old_score, "ari": ari_scorer},
        refit=False,
        cv=KFold(folds, shuffle=True, random_state=seed),
        error_score="raise",
    )
    t0 = time.process_time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        search.fit(X, y)
    res = search.cv_results_
    out = {
        "seed": seed,
        "score": res["mean_test_score"].tolist(),
        "old": res["mean_test_old"].tolist(),
        "ari": res["mean_test_ari"].tolist(),
        "cpu_s": time.process_time() - t0,
        "warnings": sorted({str(w.message)[:160] for w in caught}),
    }
    out["chosen"] = grid[int(np.argmax(out["score"]))]
    out["chosen_old"] = grid[int(np.argmax(out["old"]))]
    out["best_ari"] = grid[int(np.argmax(out["ari"]))]
    return out


def fmt(v):
    return f"{v:.3f}" if abs(v) < 100 else f"{v:.1f}"


def table(method, dataset, runs):
    param, grid = GRIDS[method]
    lines = [
        f"### {method}, {dataset} (grid over `{param}`, {len(runs)} seed(s))",
        "",
        f"| {param} | score (median) | old score (median) | held-out ARI median [min, max] "
        "| chosen by score | chosen by old score | best ARI |",
        "|---|---|---|---|---|---|---|",
    ]
    for j, v in enumerate(grid):
        s = np.median([r["score"][j] for r in runs])
        o = np.median([r["old"][j] for r in runs])
        a = [r["ari"][j] for r in runs]
        c = sum(r["chosen"] == v for r in runs)
        co = sum(r["chosen_old"] == v for r in runs)
        b = sum(r["best_ari"] == v for r in runs)
        lines.append(
            f"| {v:g} | {fmt(s)} | {fmt(o)} | {np.median(a):.3f} [{min(a):.3f}, {max(a):.3f}] "
            f"| {c}/{len(runs)} | {co}/{len(runs)} | {b}/{len(runs)} |"
        )
    gap = [max(r["ari"]) - r["ari"][grid.index(r["chosen"])] for r in runs]
    gap_old = [max(r["ari"]) - r["ari"][grid.index(r["chosen_old"])] for r in runs]
    lines += [
        "",
        f"ARI lost by the label-free choice against the best-ARI value, per seed: "
        f"{', '.join(f'{g:.3f}' for g in gap)} (old score: {', '.join(f'{g:.3f}' for g in gap_old)}). "
        "CPU s per search: " + ", ".join(f"{r['cpu_s']:.0f}" for r in runs) + ".",
        "",
    ]
    return "\n".join(lines)


COST_D, COST_K = 64, 8
COST_OPS = ["kmeans_predict", "kmeans_score", "predict", "score", "lloyd_iteration"]


def cost_data(n):
    """n x 64 float32 rows around 8 centres, built in chunks (no float64 (n, d) temporary)."""
    rs = np.random.RandomState(0)
    centres = rs.normal(size=(COST_K, COST_D)).astype(np.float32) * 3
    X = np.empty((n, COST_D), dtype=np.float32)
    for start in range(0, n, 50000):
        m = min(50000, n - start)
        X[start : start + m] = centres[rs.randint(0, COST_K, m)] + rs.normal(size=(m, COST_D))
    return X


def cost_child(op, n):
    """Time one operation and print its JSON record (run in a fresh process)."""
    import resource

    from sklearn.cluster import KMeans

    from sktransfer_cluster import SinkhornKMeans
    from sktransfer_cluster.ot import lloyd

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    X = cost_data(n)
    if op.startswith("kmeans"):
        est = KMeans(COST_K, n_init=1, random_state=0).fit(X[:20000])
    else:
        est = SinkhornKMeans(COST_K, n_init=1, device="cpu", random_state=0).fit(X[:20000])
    if op == "lloyd_iteration":
        # fit's float64 working copy of X is made before its iterations: not counted.
        Xt = est._tensor(X)
        init = torch.as_tensor(est.cluster_centers_ - est._input_affine[0], dtype=Xt.dtype).unsqueeze(0)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cpu, wall = time.process_time(), time.perf_counter()
    with torch.no_grad():
        if op in ("predict", "kmeans_predict"):
            est.predict(X)
        elif op in ("score", "kmeans_score"):
            est.score(X)
        else:
            lloyd.ot_lloyd(Xt, init, est.epsilon, est._log_weights(), 1, est._abs_tol(Xt))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"op": op, "cpu_s": cpu, "wall_s": wall, "extra_peak_mib": (peak - base) / 1024}))


def cost(n, name):
    import subprocess

    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE")
    rows = []
    for op in COST_OPS:
        out = subprocess.run(
            [sys.executable, __file__, "--cost-child", op, "--cost-n", str(n)],
            env=env, capture_output=True, text=True, check=True,
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    unit = next(r for r in rows if r["op"] == "lloyd_iteration")["cpu_s"]
    pred = next(r for r in rows if r["op"] == "predict")["cpu_s"]
    m = machine()
    md = [
        f"Measured {m['date']} on {m['cpu_count']} CPU cores ({m['processor']}), torch {m['torch']}, "
        "1 thread (torch and OMP_NUM_THREADS=1), each operation in a fresh process.",
        "",
        f"Command: `{command_line()}`.",
        "",
        f"n = {n:,} x {COST_D} float32, K = {COST_K}; models fitted on the first 20,000 rows.",
        "",
        "| operation | CPU s | wall s | / SinkhornKMeans predict (CPU) | / one OT-Lloyd iteration (CPU) "
        "| extra peak RSS MiB |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        md.append(
            f"| {r['op']} | {r['cpu_s']:.2f} | {r['wall_s']:.2f} | {r['cpu_s'] / pred:.2f} | "
            f"{r['cpu_s'] / unit:.2f} | {r['extra_peak_mib']:.0f} |"
        )
    out_dir().mkdir(parents=True, exist_ok=True)
    payload = {"machine": m, "command": command_line(), "n": n, "rows": rows}
    (out_dir() / f"{name}.json").write_text(json.dumps(payload, indent=2))
    (out_dir() / f"{name}.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", nargs="+", default=list(GRIDS), choices=list(GRIDS))
    parser.add_argument("--datasets", nargs="+", default=["imbalanced", "digits", "mnist"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument(
        "--mnist-seeds", nargs="+", type=int, default=[0], help="seeds on MNIST-5k (default one: slow fits)"
    )
    parser.add_argument("--folds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="600 rows per data set, one seed")
    parser.add_argument("--name", default=None, help="results file stem (default model_selection, or cost)")
    parser.add_argument("--cost", action="store_true", help="time score beside predict instead (issue 19.5)")
    parser.add_argument("--cost-n", type=int, default=1_000_000)
    parser.add_argument("--cost-child", default=None, help=argparse.SUPPRESS)
    _common.add_smoke_argument(parser)
    args = _common.setup(parser.parse_args(argv))
    if args.smoke:  # imbalanced only (K = 4 fits the smallest TDCM), 300 rows, one seed, 2 folds, 2 grid values
        args.datasets, args.seeds, args.folds = ["imbalanced"], [0], 2
        for method, (param, grid) in GRIDS.items():
            GRIDS[method] = (param, grid[:2])
    if args.cost_child:
        return cost_child(args.cost_child, args.cost_n)
    if args.cost:
        return cost(args.cost_n, args.name or "cost")
    args.name = args.name or "model_selection"
    torch.set_num_threads(1)
    results, md = [], []
    m = machine()
    header = (
        f"Measured {m['date']} on {m['cpu_count']} CPU cores ({m['processor']}), torch {m['torch']} "
        f"with {m['torch_threads']} threads "
        f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}).\n\n"
        f"Command: `{command_line()}`.\n\n"
        f"{args.folds}-fold GridSearchCV per seed (seeds {args.seeds}, MNIST-5k {args.mnist_seeds}; "
        "a seed is the estimator's random_state and the fold split); "
        "score, old score and ARI are means over the held-out folds. \"chosen by\" counts the seeds "
        "whose search picked that value.\n\n"
    )
    out_dir().mkdir(parents=True, exist_ok=True)
    stem = out_dir() / (args.name + ("_quick" if args.quick else ""))
    for dataset in args.datasets:
        X, y, k = load(dataset, args.quick)
        seeds = args.mnist_seeds if dataset == "mnist" else args.seeds
        seeds = seeds[:1] if args.quick else seeds
        for method in args.methods:
            runs = []
            for seed in seeds:
                runs.append(run_one(method, X, y, k, seed, args.folds))
                brief = {key: runs[-1][key] for key in ("seed", "chosen", "chosen_old", "best_ari", "cpu_s")}
                print(method, dataset, json.dumps(brief), flush=True)
            results.append(
                {"method": method, "dataset": dataset, "n": int(X.shape[0]), "k": k, "grid": GRIDS[method],
                 "runs": runs}
            )
            md.append(table(method, dataset, runs))
            # Written after every block: a long run that is stopped keeps what it measured.
            payload = {"machine": m, "command": command_line(), "folds": args.folds, "results": results}
            stem.with_suffix(".json").write_text(json.dumps(payload, indent=2))
            stem.with_suffix(".md").write_text(header + "\n".join(md) + "\n")
    print(header + "\n".join(md))


if __name__ == "__main__":
    main()
