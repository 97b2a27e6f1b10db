"""Our Sinkhorn solver against POT in the same run.

    python benchmarks/sinkhorn_speed.py [--n 20000] [--k 10] [--d 10] [--repeats 3] [--quick | --smoke] [--name NAME]

Canonical run: ``python benchmarks/sinkhorn_speed.py``.

Problem 1: raw squared distances, reg = 1e-2 x mean cost, to L1 marginal error
1e-6 -- ours vs ``ot.sinkhorn(..., method="sinkhorn_log")`` (POT's plain
Sinkhorn underflows there). Problem 2: the same cost divided by its max with
reg = 1e-2, where POT's plain ``ot.sinkhorn`` converges -- ours vs that.
POT stops on the L2 error of one marginal, so it is given ``1e-6 / sqrt(K)``
(which bounds the L1 error by 1e-6); both plans' actual errors are reported.

Then the solver against the memory system (issue 18): at ``--n-big`` x K (10^6 x 10) in
float64, the time of one iteration of each scheme (stabilised: two matrix-vector passes;
log-domain: two log-sum-exp passes; the semi-dual Newton pass of OT-Lloyd) beside a numpy
copy of the same array, into a fresh array and into a preallocated one, timed in the same
run. One iteration reads the array twice, so "two copies" is the bandwidth bound.

Writes benchmarks/results/sinkhorn/sinkhorn_speed.{json,md} (another ``--name``, or
``--quick``: n = 2,000, n-big = 10^5 and one repeat, goes to ``sinkhorn/variants/``;
``--smoke``: n = 500, n-big = 2,000, one repeat, at most 50 iterations, under a temporary folder). ``speed.py`` runs it
too, in its own process. Timings use ``_common.best_of`` (wall clock).
"""

import argparse

import _common
import numpy as np
import ot
import torch
from _common import add_name_argument, best_of, write

from sktransfer_cluster.ot import sinkhorn, sinkhorn_potentials
from sktransfer_cluster.ot.semi_dual import row_chunks, semi_dual_pass


def marginal_error(P, a, b):
    return float(max(np.abs(P.sum(1) - a).sum(), np.abs(P.sum(0) - b).sum()))


def best_time(fn, repeats):
    return best_of(fn, repeats, clock="wall")


def per_iteration(n, k, repeats, warm_iter=2000):
    """Seconds per iteration of each scheme at n x k, beside numpy copies of the n x k array."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 10))
    M = torch.as_tensor(ot.dist(X, X[rng.choice(n, k, replace=False)]))
    M = M / (0.05 * M.mean())
    log_b = torch.full((k,), -np.log(k), dtype=torch.float64)
    warm = sinkhorn_potentials(M, 1.0, None, log_b, tol=1e-3, max_iter=warm_iter)
    init = (warm.f, warm.g)
    iters = 20
    out = {}
    for method in ("stabilized", "log"):
        t, _ = best_time(lambda: sinkhorn_potentials(M, 1.0, None, log_b, init=init, max_iter=iters, tol=0.0,
                                                     check_every=iters, method=method), repeats)
        out[f"{method}_iteration_s"] = t / iters
    f = torch.empty(n, dtype=torch.float64)
    chunks = row_chunks(n, k)
    t, _ = best_time(lambda: semi_dual_pass(M, warm.g + log_b, None, f, chunks), repeats)
    out["semi_dual_pass_s"] = t
    A = M.numpy()
    B = np.empty_like(A)
    out["numpy_copy_fresh_s"], _ = best_time(lambda: A.copy(), repeats)
    out["numpy_copy_prealloc_s"], _ = best_time(lambda: np.copyto(B, A), repeats)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--d", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n-big", type=int, default=1_000_000, help="rows of the per-iteration timing")
    parser.add_argument("--quick", action="store_true", help="a smoke run: n = 2,000, n-big = 10^5, one repeat")
    add_name_argument(parser, "sinkhorn")
    args = _common.setup(parser.parse_args(argv))
    tol, max_iter = 1e-6, 100000
    if args.smoke:  # a check that it runs: the solvers stop early, the numbers mean nothing
        args.n, args.repeats, args.n_big, tol, max_iter = min(args.n, 500), 1, min(args.n_big, 2000), 1e-3, 50
    elif args.quick:
        args.n, args.repeats, args.n_big = min(args.n, 2000), 1, min(args.n_big, 100_000)
    torch.set_num_threads(args.threads)  # the solver's threads; not restored: the process is ours
    rng = np.random.default_rng(0)
    X = rng.normal(size=(args.n, args.d))
    centers = X[rng.choice(args.n, args.k, replace=False)] + 0.1
    M = ot.dist(X, centers)
    a, b = np.full(args.n, 1 / args.n), np.full(args.k, 1 / args.k)
    pot_tol = tol / np.sqrt(args.k)
    rows = []
    problems = [
        ("raw cost, reg=1e-2*mean", M, 1e-2 * M.mean(), "sinkhorn_log"),
        ("normalised cost, reg=1e-2", M / M.max(), 1e-2, "sinkhorn"),
    ]
    for label, cost, reg, pot_method in problems:
        t_ours, P_ours = best_time(lambda: sinkhorn(a, b, cost, reg, tol=tol, max_iter=max_iter), args.repeats)
        t_pot, P_pot = best_time(
            lambda: ot.sinkhorn(a, b, cost, reg, method=pot_method, numItermax=max_iter, stopThr=pot_tol),
            args.repeats,
        )
        rows.append(
            {
                "problem": label,
                "pot_method": pot_method,
                "ours_s": t_ours,
                "pot_s": t_pot,
                "speedup": t_pot / t_ours,
                "ours_err": marginal_error(P_ours, a, b),
                "pot_err": marginal_error(P_pot, a, b),
                "max_plan_diff": float(np.abs(P_ours - P_pot).max()),
            }
        )
    md = [
        "| problem | POT method | ours (s) | POT (s) | POT / ours | our marginal err | POT marginal err | max plan diff |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        md.append(
            f"| {r['problem']} | `{r['pot_method']}` | {r['ours_s']:.4f} | {r['pot_s']:.4f} | "
            f"{r['speedup']:.1f}x | {r['ours_err']:.1e} | {r['pot_err']:.1e} | {r['max_plan_diff']:.1e} |"
        )
    it = per_iteration(args.n_big, args.k, args.repeats, warm_iter=50 if args.smoke else 2000)
    two_copies = 2 * it["numpy_copy_prealloc_s"]
    md += [
        "",
        f"One iteration at {args.n_big:,} x {args.k} float64 ({args.n_big * args.k * 8 / 2**20:.0f} MiB) "
        f"against a numpy copy of the same array, best of {args.repeats}:",
        "",
        "| what | ms | / two preallocated copies |",
        "|---|---|---|",
    ]
    for key, label in [
        ("stabilized_iteration_s", "stabilised Sinkhorn iteration (2 matrix-vector passes)"),
        ("log_iteration_s", "log-domain Sinkhorn iteration (2 log-sum-exp passes)"),
        ("semi_dual_pass_s", "semi-dual Newton pass (OT-Lloyd; also builds the K x K Hessian)"),
        ("numpy_copy_fresh_s", "numpy copy into a fresh array (`A.copy()`)"),
        ("numpy_copy_prealloc_s", "numpy copy into a preallocated array (`np.copyto`)"),
    ]:
        md.append(f"| {label} | {1e3 * it[key]:.1f} | {it[key] / two_copies:.1f}x |")
    write(
        "sinkhorn",
        args.name,
        {"n": args.n, "k": args.k, "d": args.d, "results": rows, "n_big": args.n_big, "per_iteration": it},
        f"Sinkhorn, n={args.n} points x K={args.k} clusters, d={args.d}, best of {args.repeats}, "
        f"{args.threads} torch threads.\n\n" + "\n".join(md),
        quick=args.quick,
    )


if __name__ == "__main__":
    main()
