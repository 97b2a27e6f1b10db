"""How fit time, predict time and memory grow with n: every registry method beside KMeans.

    python benchmarks/scaling.py [--quick | --smoke] [--n 1000 10000 100000 1000000] [--d 10 64]
        [--methods NAME ...] [--cell-limit 600] [--budget SECONDS] [--predict-n 1e6] [--name NAME]

Canonical run: ``python benchmarks/scaling.py --budget 3300``.

The methods are ``KMeans`` and ``MiniBatchKMeans`` (the peers) and every method of
``sktransfer_cluster.registry.REGISTRY``, in registry order. Each cell (method, d, n) runs
in a fresh subprocess (``_common.run_cells``) on ``make_blobs(n, 10 centres, d)`` in float32,
K = 10, every method built as ``REGISTRY[name].build(10)`` at its default budgets (KMeans with
``n_init=10``, as SinkhornKMeans' default; MiniBatchKMeans at its defaults). The subprocess
measures

* fit and predict (on the same n rows) in process CPU time (``time.process_time``);
  every process runs with ``OMP_NUM_THREADS=MKL_NUM_THREADS=1`` and
  ``torch.set_num_threads(1)``, KMeans included, so ratios are fair on a shared machine;
* peak extra memory of fit and of predict: the growth of the peak resident set
  (``VmHWM`` after resetting it through ``/proc/self/clear_refs``) over the resident set
  before the call (``_common.measured``);
* ACC of ``labels_`` against the blob labels (the supervised estimators get them as
  source labels, as the other benchmarks do).

Memory includes whatever a first fit imports lazily (a few MiB); no warm-up fit is run,
as a default-budget warm-up costs a neural estimator as much as the cell.
A predict-only part (run first) fits each method on 2,000 x 64 rows at the shortest
training (every ``*epochs``/``n_iter`` budget set to 1, ``_common.build(budget="shortest")``:
predict's cost does not depend on it), and times ``predict`` on ``--predict-n`` (10^6) x 64
float32 rows, with its peak extra memory (issue 18, part 3).

A cell whose fit is estimated above ``--cell-limit`` seconds, from the previous n by the
measured slope of that method's line (slope 1 from a single point), is skipped and marked;
so is every larger n of that method. A cell that runs past the limit is killed and marked.
``--budget`` bounds the whole run: cells left when it is spent are marked as such.
Methods run one after the other, cheapest first, so a budget cut falls on the slow ones.

The figure has a third column, the streamed and Dask fits at d = 16 (issue 31): the
SinkhornKMeans minibatch fit of a ``np.memmap``, MiniBatchKMeans over the same memmap and the
in-memory fit, median CPU seconds per n from every ``variants/memmap_fit_*.json``
(``benchmarks/memmap_fit.py``), and the Dask fits on a 2-worker LocalCluster, SinkhornKMeans and
``dask_ml.cluster.KMeans``, median *wall* seconds per n from every ``variants/dask_fit*.json``
(``benchmarks/dask_fit.py``; the work runs in the worker processes, so the client's CPU time
would not show it). Those runs are separate commands; ``--redraw`` draws the figure again
from the existing ``scaling.json`` and those files without measuring anything.

Writes benchmarks/results/scaling/scaling.{json,md,png} (another ``--name``, or
``--quick`` -- n <= 10^4, d = 10, a 120 s cell limit -- goes to ``scaling/variants/``).
``--smoke``: n = 300, d = 10, predict on 1,000 rows, the registry's smallest budgets, every
cell in one subprocess, written under a temporary folder.
"""

import argparse
import json
import math
import time

import _common
import numpy as np
from _common import command_line, machine

PEERS = ("KMeans", "MiniBatchKMeans")


def all_methods():
    return [*PEERS, *_common.method_names()]


# Cells measured ahead in one process (``--smoke``), keyed by their job.
_PREFETCHED = {}


def _job(method, n, d, n_pred=None, budget=None):
    k = _common.SMOKE_K if _common.SMOKE else 10
    return {"method": method, "n": n, "d": d, "n_pred": n_pred, "budget": budget, "smallest": _common.SMOKE, "k": k}


def run_cell(method, n, d, limit, n_pred=None, budget=None):
    job = _job(method, n, d, n_pred, budget)
    key = json.dumps(job, sort_keys=True)
    if key in _PREFETCHED:
        return _PREFETCHED[key]
    return next(_common.run_cells([job], limit=limit, threads=1))


def prefetch(jobs, limit):
    """Measure ``jobs`` in one subprocess (a smoke run: one torch import, not one per cell)."""
    for job, row in zip(jobs, _common.run_cells(jobs, limit=limit, threads=1, fresh=False)):
        _PREFETCHED[json.dumps(job, sort_keys=True)] = row


def estimate(points, n):
    """Fit time at ``n`` extrapolated from the measured ``(n, seconds)`` points."""
    if not points:
        return None
    if len(points) == 1:
        slope = 1.0
    else:
        (n0, t0), (n1, t1) = points[-2], points[-1]
        slope = max(1.0, math.log(t1 / t0) / math.log(n1 / n0))
    n1, t1 = points[-1]
    return t1 * (n / n1) ** slope


def slope(points):
    """Least-squares slope of log time against log n (None for fewer than two points)."""
    if len(points) < 2:
        return None
    x, y = np.log([p[0] for p in points]), np.log([max(p[1], 1e-6) for p in points])
    return float(np.polyfit(x, y, 1)[0])


def streamed_points(folder):
    """``{label: [(n, seconds), ...]}`` of the streamed (memmap) and Dask fits stored in ``folder``.

    Memmap fits: median CPU seconds per (method, n) over every ``memmap_fit_*.json``; Dask fits:
    median wall seconds per (method, n) over every ``dask_fit*.json`` (smoke files excluded)."""
    seconds = {}
    for pattern, key, tag in (("memmap_fit_*.json", "cpu_s", "memmap, CPU s"), ("dask_fit*.json", "wall_s", "Dask, wall s")):
        for path in sorted(folder.glob(pattern)):
            if path.stem.endswith("_quick"):
                continue
            res = json.loads(path.read_text())
            for r in res.get("rows", []):
                if key in r:
                    seconds.setdefault((f"{r['method']} ({tag})", int(res["n"])), []).append(r[key])
    out = {}
    for (label, n), values in sorted(seconds.items()):
        out.setdefault(label, []).append((n, float(np.median(values))))
    return out


def figure(rows, ds, path, streamed=None):
    """The log-log figure; False (and no file) without matplotlib (the plot extra).

    ``streamed`` (:func:`streamed_points`) adds a third column: the memmap and Dask fits."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = len(ds) + (1 if streamed else 0)
    fig, axes = plt.subplots(2, cols, figsize=(5.5 * cols, 8), squeeze=False)
    for j, d in enumerate(ds):
        for i, key in enumerate(("fit_s", "predict_s")):
            ax = axes[i, j]
            for method in all_methods():
                pts = [(r["n"], r[key]) for r in rows if r["method"] == method and r["d"] == d and r["status"] == "ok"]
                if pts:
                    ax.loglog(*zip(*pts), marker="o", label=method)
            ax.set_title(f"{key.split('_')[0]} time, d = {d}, K = 10")
            ax.set_xlabel("n (rows)")
            ax.set_ylabel("CPU seconds (1 thread)")
            ax.grid(True, which="both", alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    if streamed:
        ax = axes[0, -1]
        for label, pts in streamed.items():
            ax.loglog(*zip(*pts), marker="o", linestyle="--" if "Dask" in label else "-", label=label)
        ax.set_title("streamed and Dask fits, d = 16, K = 10")
        ax.set_xlabel("n (rows)")
        ax.set_ylabel("s (memmap: CPU, 1 thread; Dask: wall)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        axes[1, -1].axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def fmt(x, spec=".3g"):
    return "-" if x is None else format(x, spec)


def markdown(rows, ds, ns, args):
    md = [
        "Every cell is a fresh process with 1 thread (`OMP_NUM_THREADS=1`, `torch.set_num_threads(1)`) "
        "for every method, KMeans included; times are process CPU seconds; memory is the growth of "
        "the peak resident set over the resident set before the call (RSS sees torch's allocations). "
        f"Data: `make_blobs(n, 10 centres, d)` in float32, K = 10; predict runs on the same n rows. "
        f"Cell limit {args.cell_limit:.0f} s (skipped cells estimated from the previous n by the "
        "method's measured slope).",
        "",
    ]
    for d in ds:
        km = {r["n"]: r for r in rows if r["method"] == "KMeans" and r["d"] == d and r["status"] == "ok"}
        md += [f"### d = {d}", "", "| method | n | fit s | fit / KMeans | predict s | predict / KMeans | "
               "fit peak MiB | predict peak MiB | ACC |", "|---|---|---|---|---|---|---|---|---|"]
        for method in all_methods():
            for n in ns:
                r = next((r for r in rows if r["method"] == method and r["d"] == d and r["n"] == n), None)
                if r is None:
                    continue
                if r["status"] != "ok":
                    md.append(f"| {method} | {n:,} | {r['status']} | | | | | | |")
                    continue
                k = km.get(n)
                md.append(
                    f"| {method} | {n:,} | {r['fit_s']:.3g} | {fmt(k and r['fit_s'] / k['fit_s'], '.2f')}x | "
                    f"{r['predict_s']:.3g} | {fmt(k and r['predict_s'] / k['predict_s'], '.2f')}x | "
                    f"{r['fit_peak_extra_mib']:.0f} | {r['predict_peak_extra_mib']:.0f} | {r['acc']:.3f} |"
                )
        md.append("")
    md += ["### Fitted slopes (log time against log n, least squares over the measured n)", "",
           "| method | " + " | ".join(f"fit d={d} | predict d={d}" for d in ds) + " |",
           "|---|" + "---|---|" * len(ds)]
    for method in all_methods():
        cells = []
        for d in ds:
            for key in ("fit_s", "predict_s"):
                pts = [(r["n"], r[key]) for r in rows if r["method"] == method and r["d"] == d and r["status"] == "ok"]
                s = slope(pts)
                cells.append("-" if s is None else f"{s:.2f} ({pts[0][0]:.0e}-{pts[-1][0]:.0e})")
        md.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(md)


def predict_markdown(rows, args):
    if not rows:
        return ""
    km = next((r for r in rows if r["method"] == "KMeans" and r["status"] == "ok"), None)
    md = ["", f"### predict on {rows[0]['n_pred']:,} x 64 float32 rows, after a fit on {args.predict_fit_n:,} x 64",
          "", "The fit uses the shortest training (every epoch and step budget set to 1); predict's cost "
          "does not depend on it.", "",
          "| method | predict s | predict / KMeans.predict | predict peak extra MiB | ACC of predict |",
          "|---|---|---|---|---|"]
    for r in rows:
        if r["status"] != "ok":
            md.append(f"| {r['method']} | {r['status']} | | | |")
            continue
        ratio = fmt(km and r["predict_s"] / km["predict_s"], ".2f")
        md.append(f"| {r['method']} | {r['predict_s']:.3g} | {ratio}x | {r['predict_peak_extra_mib']:.0f} | "
                  f"{r['predict_acc']:.3f} |")
    return "\n".join(md)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: n <= 10^4, d = 10, 120 s cells")
    parser.add_argument("--n", type=float, nargs="+", default=[1e3, 1e4, 1e5, 1e6])
    parser.add_argument("--d", type=int, nargs="+", default=[10, 64])
    parser.add_argument("--methods", nargs="+", default=all_methods(), choices=all_methods())
    parser.add_argument("--cell-limit", type=float, default=600.0)
    parser.add_argument("--budget", type=float, default=math.inf, help="seconds for the whole run")
    parser.add_argument("--predict-n", type=float, default=1e6,
                        help="rows of the predict-only part (d = 64, float32; 0 skips it)")
    parser.add_argument("--predict-fit-n", type=int, default=2000, help="rows the predict-only part fits on")
    parser.add_argument("--redraw", action="store_true",
                        help="measure nothing: draw the figure again from the stored json and the streamed/Dask runs")
    _common.add_name_argument(parser, "scaling")
    args = _common.setup(parser.parse_args())
    if args.redraw:
        stem = _common.result_stem("scaling", args.name, args.quick)
        payload = json.loads(stem.with_suffix(".json").read_text())
        streamed = streamed_points(_common.result_stem("scaling", "x").parent)
        ds = sorted({r["d"] for r in payload["results"]})
        print("wrote", stem.with_suffix(".png") if figure(payload["results"], ds, stem.with_suffix(".png"), streamed)
              else "nothing (matplotlib is not installed)")
        return
    ns = sorted(int(n) for n in args.n)
    ds = args.d
    if args.smoke:
        ns, ds, args.cell_limit, args.predict_n, args.predict_fit_n = [300], [10], 120.0, 1000, 300
        args.budget = min(args.budget, 120.0)
    elif args.quick:
        ns, ds, args.cell_limit = [n for n in ns if n <= 10_000] or [1000], [10], min(args.cell_limit, 120.0)
    start = time.perf_counter()
    if args.smoke:
        jobs = [_job(m, args.predict_fit_n, 64, int(args.predict_n), "shortest") for m in args.methods]
        prefetch(jobs + [_job(m, n, d) for m in args.methods for d in ds for n in ns], args.cell_limit)
    pred_rows = []
    if args.predict_n:
        n_pred = int(args.predict_n) if args.smoke else 10_000 if args.quick else int(args.predict_n)
        for method in args.methods:
            left = args.budget - (time.perf_counter() - start)
            row = {"method": method, "n": args.predict_fit_n, "d": 64, "n_pred": n_pred}
            if left <= 0:
                row["status"] = "not run (run budget spent)"
            else:
                limit = min(args.cell_limit, max(left, 1.0))
                row.update(run_cell(method, args.predict_fit_n, 64, limit, n_pred, budget="shortest"))
            pred_rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "stderr"}), flush=True)
    rows, points, stopped = [], {}, set()
    for method in args.methods:  # listed cheapest first: a budget cut falls on the slow ones
        for d in ds:
            for n in ns:
                key = (method, d)
                row = {"method": method, "n": n, "d": d}
                est = estimate(points.get(key, []), n)
                left = args.budget - (time.perf_counter() - start)
                if key in stopped:
                    row["status"] = "skipped (a smaller n was over the limit)"
                elif est is not None and est > args.cell_limit:
                    row["status"] = f"skipped (estimated {est:.0f} s)"
                    stopped.add(key)
                elif left <= 0:
                    row["status"] = "not run (run budget spent)"
                else:
                    row.update(run_cell(method, n, d, min(args.cell_limit, max(left, 1.0))))
                    if row["status"] == "ok":
                        points.setdefault(key, []).append((n, row["fit_s"]))
                    else:
                        stopped.add(key)
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "stderr"}), flush=True)
    stem = _common.result_stem("scaling", args.name, args.quick)
    stem.parent.mkdir(parents=True, exist_ok=True)
    payload = {"machine": {**machine(), "torch_threads": 1}, "command": command_line(),
               "threads": "1 per process (OMP/MKL/OpenBLAS and torch), every method",
               "cell_limit_s": args.cell_limit, "results": rows, "predict_1e6x64": pred_rows}
    stem.with_suffix(".json").write_text(json.dumps(payload, indent=2))
    png = figure(rows, ds, stem.with_suffix(".png"), streamed_points(_common.result_stem("scaling", "x").parent))
    m = payload["machine"]
    text = (f"Measured {m['date']} on {m['cpu_count']} CPU cores ({m['processor']}), torch {m['torch']}, "
            f"1 thread per process.\n\nCommand: `{payload['command']}`.\n\n"
            + (f"![fit and predict time against n]({stem.name}.png)\n\n" if png else "")
            + markdown(rows, ds, ns, args) + "\n"
            + predict_markdown(pred_rows, args) + "\n")
    stem.with_suffix(".md").write_text(text)
    print(text)
    print(f"wrote {stem}.json, .md" + (" and .png" if png else " (no figure: matplotlib is not installed)"),
          flush=True)


if __name__ == "__main__":
    main()
