"""``compile=True`` against eager mode, compile time included (issue 31 item 5).

TDCMCluster at its defaults on MNIST-5k (``load_mnist_5k``, flat rows). Each fit runs in a fresh
Python process (no in-memory compile cache carries over):

1. ``eager``: ``compile=False``;
2. ``own-cold`` / ``own-warm`` (TDCM: "blocks compiled"): ``compile=True`` with the neighbour
   encoder's training eager: an empty inductor cache (``TORCHINDUCTOR_CACHE_DIR`` a new folder,
   a first fit on a new machine), then a second fit on the cache the first filled (a later fit
   on the same machine, which still traces the steps but reuses the compiled code);
3. ``all-cold`` / ``all-warm``: the same with the neighbour encoder's step compiled too
   (``train_neighbour_encoder(compile=True)``), on a cache of its own;
4. ``rule-cold`` / ``rule-warm``: the estimator's ``compile=True`` as shipped: each phase's step
   eager for its probe (TDCM: its first epoch; the GAN: the encoder's first epoch, 20 generator
   steps), then compiled only where its ``CompileRule`` expects the compilation to be repaid (the
   decisions are listed under the table), on a cache of its own;
5. ``neighbours-cold`` / ``neighbours-warm``: only the neighbour encoder's step compiled, from its
   first call (the GAN's ``compile="always"``; TDCM's ``"always"`` with its blocks kept eager), on a
   cache of its own: what the neighbour encoder's step gains and costs, the GAN's expectations;
6. ``critic-cold`` / ``classifier-cold`` / ``generator-cold`` (the GAN only): that adversarial step
   alone compiled from its first call, the others and the encoder eager, each on an empty cache of
   its own: the per-step expectations of the GAN's rule.

In rows 2-3 the estimator runs with ``compile="always"`` (the GAN with ``_compile_adversarial``
on) and which steps compile is set in the child by wrapping ``representation.train_neighbour_encoder``
(``compile=`` forced per row). Every process
runs on one thread with ``TORCHINDUCTOR_COMPILE_THREADS=1`` (inductor compiles in-process:
``time.process_time()`` plus the CPU time of its waited-for children, the C++ compiler runs, is
the whole cost). Per phase of the fit (``neighbours``: the
neighbour encoder; ``fit``: TDCM's blocks) a training callback records the CPU seconds of each
epoch. Reported per phase: the median epoch after the first two, its ratio to eager's, the
compilation (the first two epochs minus twice the median one) and the phase's CPU seconds; per fit the
whole fit's CPU seconds and ACC; and the peer, ``UMAP(10, n_neighbors=15, min_dist=0) +
GaussianMixture(10, n_init=3)`` on the same rows, in the same run. The machine's load average
is recorded before every fit.

Usage::

    python benchmarks/compile_speed.py [--seeds 0 1 2] [--rows eager own-cold own-warm] [--estimator gan]
    python benchmarks/compile_speed.py --rows eager rule-cold rule-warm --max-epochs 500  # a longer fit
    python benchmarks/compile_speed.py --smoke   # 400 blobs, 3 epochs, eager and aot_eager (no C++ build)

``--estimator gan``: PreciseFeatureGAN at its defaults instead, the "own" rows with the critic's,
classifier's and generator's losses compiled (``_compile_adversarial``: off in the estimator's
``"always"``, and its ``compile=True`` rule expects them slower compiled); phases ``representation``
and ``fit``, one epoch per generator step.

Writes ``benchmarks/results/compile/<estimator>[_epochs<n>]_seed<seeds>.{md,json}``, or ``<name>.{md,json}``
with ``--name`` (``--smoke``: a temporary folder).
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

#: row -> (mode of the child, cache folder key, whether the cache is cold). "own": the estimator's
#: ``compile=True`` with the neighbour encoder's training eager; "all": that training compiled too.
ROWS = {
    "eager": ("eager", None, None),
    "own-cold": ("own", "own", True),
    "own-warm": ("own", "own", False),
    "all-cold": ("all", "all", True),
    "all-warm": ("all", "all", False),
    "rule-cold": ("rule", "rule", True),
    "rule-warm": ("rule", "rule", False),
    "neighbours-cold": ("neighbours", "neighbours", True),
    "neighbours-warm": ("neighbours", "neighbours", False),
    "critic-cold": ("critic", "critic", True),
    "classifier-cold": ("classifier", "classifier", True),
    "generator-cold": ("generator", "generator", True),
}
#: The GAN's adversarial steps, each a row compiled alone.
ADVERSARIAL = ("critic", "classifier", "generator")
#: estimator -> (what its own compile=True compiles, its training phases in the table).
ESTIMATORS = {
    "tdcm": ("blocks", ("neighbours", "fit")),
    "gan": ("adversarial steps", ("representation", "fit")),
}


def label(row, estimator):
    own = ESTIMATORS[estimator][0]
    return {"eager": "eager", "own-cold": f"{own} compiled, cold cache", "own-warm": f"{own} compiled, warm cache",
            "all-cold": f"{own} + neighbour encoder compiled, cold cache",
            "all-warm": f"{own} + neighbour encoder compiled, warm cache",
            "rule-cold": "compile=True (compiles where it repays), cold cache",
            "rule-warm": "compile=True (compiles where it repays), warm cache",
            "neighbours-cold": "neighbour encoder compiled, cold cache",
            "neighbours-warm": "neighbour encoder compiled, warm cache",
            **{f"{s}-cold": f"{s} step alone compiled, cold cache" for s in ADVERSARIAL},
            "peer": "peer: UMAP(10) + GMM(n_init=3)"}[row]


def _cpu():
    """CPU seconds of this process and of its waited-for children (the C++ compiler runs)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + r.ru_utime + r.ru_stime


def _data(seed, smoke):
    if smoke:
        from sklearn.datasets import make_blobs

        X, y = make_blobs(400, n_features=10, centers=4, random_state=seed)
        return X, y, 4
    from sktransfer_cluster.datasets import load_mnist_5k

    X, y = load_mnist_5k()
    return X, y, 10


def one_fit(mode, seed, smoke, estimator="tdcm", max_epochs=None):
    """Fit once in this process; return the per-phase epoch CPU seconds, the total and the ACC."""
    import torch

    sys.path.insert(0, str(ROOT))
    from sktransfer_cluster.metrics import clustering_accuracy

    torch.set_num_threads(1)
    X, y, k = _data(seed, smoke)
    if mode == "peer":
        from sklearn.mixture import GaussianMixture
        from umap import UMAP

        start = _cpu()
        Z = UMAP(n_components=10, n_neighbors=15, min_dist=0.0, random_state=seed).fit_transform(X)
        labels = GaussianMixture(k, n_init=3, random_state=seed).fit_predict(Z)
        return {"mode": mode, "epochs": {}, "total": _cpu() - start, "acc": float(clustering_accuracy(y, labels))}

    import sktransfer_cluster.representation as representation
    import sktransfer_cluster.representation.encoder as encoder_module
    import sktransfer_cluster.cluster.tdcm.estimator as tdcm_estimator
    from sktransfer_cluster import PreciseFeatureGAN, TDCMCluster

    real = representation.train_neighbour_encoder

    def neighbour_training(*args, **kwargs):
        kwargs["compile"] = mode in ("all", "neighbours")
        return real(*args, **kwargs)

    if mode in ("own", "all", "neighbours"):
        # TDCM imports the function at import time; the GAN from the package when it trains.
        tdcm_estimator.train_neighbour_encoder = representation.train_neighbour_encoder = neighbour_training

    class EpochTimes:
        def __init__(self):
            self.times, self.last = {}, None

        def on_phase_begin(self, run):
            self.last = _cpu()

        def on_epoch_end(self, run, values):
            now = _cpu()
            self.times.setdefault(run.phase, []).append(now - self.last)
            self.last = now

    cls = TDCMCluster if estimator == "tdcm" else PreciseFeatureGAN
    # The GAN's compile="always" leaves its adversarial steps eager (measured slower compiled): the
    # "own" and "all" rows measure them compiled, as they were chosen against.
    PreciseFeatureGAN._compile_adversarial = mode in ("own", "all")
    if mode == "neighbours":  # TDCM's blocks eager: only the neighbour encoder's step compiled
        real_rule = TDCMCluster._compile_rule
        TDCMCluster._compile_rule = lambda self, step, *args: step == "neighbours" and real_rule(self, step, *args)
    if mode in ADVERSARIAL:  # one adversarial step compiled from its first call, every other step eager
        assert estimator == "gan", f"{mode}: a row of the GAN only"
        PreciseFeatureGAN._compile_rule = lambda self, step, *args, **kwargs: step == mode
    params = dict(n_clusters=k)
    if max_epochs is not None:
        params.update(max_epochs=max_epochs) if estimator == "tdcm" else params.update(n_iter=max_epochs)
    if smoke:
        TDCMCluster._neighbour_epochs = 3
        # The GAN on the blobs' codes too (10 features are below "auto"'s threshold): the encoder's step is smoked.
        params.update(max_epochs=3) if estimator == "tdcm" else params.update(
            n_iter=20, representation_epochs=3, representation="neighbours")
        cls._compile_options = {"backend": "aot_eager"}
        encoder_module.NEIGHBOUR_COMPILE_OPTIONS.update(backend="aot_eager")
    timer = EpochTimes()
    # "own"/"all"/"neighbours": steps compiled from their first call (compile="always"); "rule": the
    # estimator's compile=True, which compiles a phase's step only where its CompileRule expects it to repay.
    compile = {"eager": False, "rule": True}.get(mode, "always")
    if smoke and mode == "rule":
        # Free and worth it: every step compiles after its probe (the GAN expects its steps no faster).
        cls._compile_expectations = {key: dict(value, speedup=max(2.0, value["speedup"]), cold_cost=0.0, warm_cost=0.0)
                                     for key, value in cls._compile_expectations.items()}
    est = cls(**params, compile=compile, random_state=seed, callbacks=[timer])
    start = _cpu()
    labels = est.fit(X).labels_
    total = _cpu() - start
    decisions = est.compile_decisions_ if mode == "rule" else []
    return {"mode": mode, "epochs": timer.times, "total": total, "acc": float(clustering_accuracy(y, labels)),
            "decisions": decisions}


def run_child(mode, seed, smoke, cache_dir, estimator, max_epochs=None):
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache_dir, TORCHINDUCTOR_COMPILE_THREADS="1",
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", NUMBA_NUM_THREADS="1",
               PYTHONWARNINGS="ignore")
    cmd = [sys.executable, __file__, "--child", mode, "--seed", str(seed), "--estimator", estimator]
    cmd += ["--smoke"] if smoke else []
    cmd += ["--max-epochs", str(max_epochs)] if max_epochs is not None else []
    load = os.getloadavg()[0]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    result["load"] = load
    return result


def phase_summary(times):
    t = np.asarray(times, dtype=float)
    median = float(np.median(t[2:])) if t.size > 2 else float(np.median(t))
    # The first two epochs: compile=True's rule compiles after its first (eager, probing) epoch.
    return {"epochs": int(t.size), "median_epoch": median, "first_epoch": float(t[0]),
            "compile_cost": float(t[:2].sum() - median * min(2, t.size)), "phase": float(t.sum())}


def summarise(result):
    return {
        "phases": {phase: phase_summary(times) for phase, times in result["epochs"].items()},
        "total": result["total"], "acc": result["acc"], "load": result["load"],
        "decisions": result.get("decisions", []),
    }


def _code_state():
    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return None

    return {"commit": git("rev-parse", "--short", "HEAD"), "dirty": git("status", "--porcelain", "--", "sktransfer_cluster")}


def _range(values, fmt):
    v = np.asarray(values, dtype=float)
    if v.size == 1:
        return format(v[0], fmt)
    return f"{format(np.median(v), fmt)} [{format(v.min(), fmt)}, {format(v.max(), fmt)}]"


def table(results, rows, seeds, estimator):
    """Markdown rows: per row, medians over the seeds with [min, max]."""
    # The phases the fits ran (a GAN on tabular rows trains no representation).
    phases = [p for p in ESTIMATORS[estimator][1] if any(p in results[s][r].get("phases", {}) for s in seeds for r in rows)]
    lines = [
        "| fit | " + " | ".join(f"{p}: epoch (median) | {p}: speed-up per epoch | {p}: compilation | {p}: phase"
                                 for p in phases) + " | whole fit | ACC | load |",
        "|---|" + "---|---|---|---|" * len(phases) + "---|---|---|",
    ]
    for row in rows:
        runs = [results[s][row] for s in seeds]
        cells = []
        for p in phases:
            if row == "peer":
                cells += ["-"] * 4
                continue
            eager = [results[s]["eager"]["phases"][p]["median_epoch"] for s in seeds] if "eager" in rows else None
            med = [r["phases"][p]["median_epoch"] for r in runs]
            ratio = _range([e / m for e, m in zip(eager, med)], ".2f") + "x" if eager else "-"
            comp = _range([r["phases"][p]["compile_cost"] for r in runs], ".1f") if row != "eager" else "0"
            cells += [_range(med, ".3f"), ratio, comp, _range([r["phases"][p]["phase"] for r in runs], ".1f")]
        lines.append(f"| {label(row, estimator)} | " + " | ".join(cells)
                     + f" | {_range([r['total'] for r in runs], '.1f')} | {_range([r['acc'] for r in runs], '.3f')} "
                     f"| {_range([r['load'] for r in runs], '.1f')} |")
    return lines


def decision_lines(results, rows, seeds):
    """What compile=True decided per phase (CompileRule), seed by seed."""
    lines = []
    for row in rows:
        for s in seeds:
            for d in results[s][row].get("decisions", []):
                where = f"{d['phase']} ({d['step']})"
                if d.get("eager_step_s") is None:
                    lines.append(f"* {row}, seed {s}, {where}: eager (too few steps to probe)")
                    continue
                lines.append(f"* {row}, seed {s}, {where}: {'compiled' if d['compiled'] else 'eager'} "
                             f"({d['steps_left']} steps left x {1e3 * d['eager_step_s']:.2f} ms: expected saving "
                             f"{d['expected_saving_s']:.1f} s against {d['expected_cost_s']:.1f} s, {d['cache']} cache)")
    return lines + [""] if lines else []


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS))
    parser.add_argument("--no-peer", action="store_true", help="skip the UMAP + GMM row")
    parser.add_argument("--estimator", choices=list(ESTIMATORS), default="tdcm")
    parser.add_argument("--max-epochs", type=int, help="TDCM's max_epochs (the GAN's n_iter); default: the estimator's")
    parser.add_argument("--name", help="file stem of the results (default: <estimator>[_epochs<n>]_seed<seeds>)")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--child", choices=["eager", "own", "all", "rule", "neighbours", *ADVERSARIAL, "peer"],
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_fit(args.child, args.seed, args.smoke, args.estimator, args.max_epochs)))
        return

    # The smoke run: every code path (eager, all compiled, the rule with zero costs: compiles after its probe).
    rows = ["eager", "all-cold", "rule-cold"] if args.smoke else list(args.rows)
    if not (args.smoke or args.no_peer):
        rows.append("peer")
    out_dir = Path(tempfile.mkdtemp()) if args.smoke else ROOT / "benchmarks" / "results" / "compile"
    out_dir.mkdir(parents=True, exist_ok=True)
    state = _code_state()
    results = {}
    for seed in args.seeds:
        results[seed] = {}
        with tempfile.TemporaryDirectory() as caches:
            for row in rows:
                mode, key, cold = ROWS.get(row, ("peer", None, None))
                cache = os.path.join(caches, key or "none")
                if cold:
                    assert not os.path.exists(cache), f"{row}: the cache is not empty"
                results[seed][row] = summarise(run_child(mode, seed, args.smoke, cache, args.estimator, args.max_epochs))
                print(seed, row, json.dumps(results[seed][row]), file=sys.stderr, flush=True)

    seeds = list(args.seeds)
    what = "400 blobs (smoke)" if args.smoke else "MNIST-5k"
    name = {"tdcm": "TDCMCluster", "gan": "PreciseFeatureGAN"}[args.estimator]
    command = f"python benchmarks/compile_speed.py --estimator {args.estimator}"
    command += " --smoke" if args.smoke else f" --seeds {' '.join(map(str, seeds))}"
    command += f" --max-epochs {args.max_epochs}" if args.max_epochs is not None else ""
    if not args.smoke and rows[:-1 if rows[-1] == "peer" else None] != list(ROWS):
        command += " --rows " + " ".join(r for r in rows if r != "peer")
    epochs = args.max_epochs or 100
    phases = {"tdcm": f"`neighbours` = the neighbour encoder (40 epochs), `fit` = TDCM's blocks ({epochs} epochs)",
              "gan": "`representation` = the neighbour encoder (40 epochs), `fit` = the adversarial training "
                     "(one 'epoch' = one generator step with its 5 critic and 4 classifier steps; 2,000 steps)"}
    lines = [
        f"# compile=True against eager: {name} defaults on {what} "
        f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, seeds {', '.join(map(str, seeds))}, 1 thread, CPU seconds)",
        "",
        f"`{command}` at commit {state['commit']}{' (uncommitted changes: ' + state['dirty'] + ')' if state['dirty'] else ''}; "
        "each row a fresh process; CPU seconds = process_time + the C++ compiler's (children's) CPU; inductor compiles "
        f"in-process. Medians over the seeds [min, max]. Phases: {phases[args.estimator]}; compilation = the first two epochs "
        "minus twice the median epoch; load = the 1-minute load average before the fit.",
        "",
        *table(results, rows, seeds, args.estimator),
        "",
        *decision_lines(results, rows, seeds),
    ]
    text = "\n".join(lines) + "\n"
    stem = args.name or (f"{args.estimator}{f'_epochs{args.max_epochs}' if args.max_epochs is not None else ''}"
                         f"_seed{'-'.join(map(str, seeds))}")
    (out_dir / f"{stem}.md").write_text(text)
    (out_dir / f"{stem}.json").write_text(json.dumps({"seeds": seeds, "smoke": args.smoke, "code": state,
                                                      "results": results}, indent=1))
    print(text)


if __name__ == "__main__":
    main()
