"""Predict and training throughput of the neural estimators in float32 and float64, beside
the machine's measured matmul rate (issue 18, parts 3 and 5).

    python benchmarks/throughput.py [--parts predict train] [--predict-n 1e6]
        [--train-n 1e4 1e5] [--methods NAME ...] [--quick | --smoke] [--name NAME]

Canonical run (a variant of the scaling area): ``OMP_NUM_THREADS=1 python benchmarks/throughput.py``.

Everything runs in one process with one thread (``torch.set_num_threads(1)``; start it with
``OMP_NUM_THREADS=1``); times are process CPU seconds (``time.process_time``).

* **matmul rate**: ``torch.mm`` of two 2,048 x 2,048 matrices in float32 and float64, best of 3:
  the arithmetic limit the networks are measured against.
* **predict**: each registry method (``REGISTRY[name].build(10)``) fitted on 2,000 x 64 blobs at
  its shortest training (every ``*epochs``/``n_iter`` budget 1: predict's cost does not depend on
  it), then ``predict`` on ``--predict-n`` x 64 float32 rows, best of 2, beside
  ``KMeans.predict`` in the same run. The estimators whose working dtype on the CPU is float32
  (read from the class's ``_cpu_dtype``) are fitted and timed twice: as shipped and with the
  class's ``_cpu_dtype`` set to float64. FLOPs per row come from
  ``torch.utils.flop_counter.FlopCounterMode`` on a 8,192-row predict (matmuls and
  convolutions; C2M's distances to its reference rows are one of them, an ``addmm``).
* **roofline** (issue 31, item 4): each method's ``predict`` on ``--predict-n`` x 64 float32
  rows (fitted as in *predict*, as shipped) is first run once under a dispatch mode that records
  every matrix product it executes (``mm``, ``addmm``, ``bmm``, and ``cdist`` as the product it
  amounts to), with shapes and dtype. FLOPs per row = 2 m k n of those products over the rows
  (C2M's distances to its reference rows are an ``addmm``; its selection of the k nearest, a
  sort, is not a product). The *same-shape matmul time* replays each recorded product (same
  shapes, dtype, the second operand transposed as ``linear`` passes it) as often as it ran, in
  the same process at 1 thread. Predict and replay alternate, ``--rounds`` times (3): on a
  machine whose load drifts, both see the same minutes. *predict s* and *same-shape matmul s*
  are the best round of each; the *share of the matmul rate* is the second over the first,
  i.e. the predict's GFLOP/s over what torch's matmul reaches on the very same products; the
  share of each round (its replay over its predict) is kept too, and the table gives their
  range. The load average is read after each method. ``KMeans.predict`` is the peer (its
  distances, 2 d K FLOPs per row).
* **train**: per-epoch process time of each training phase (read at the epoch boundaries by a
  training callback, ``_common.observing``) of every registry method that has training budgets,
  at n rows of 64-feature blobs, float32 (as shipped) against float64. Each budget is set to the
  number of timed epochs (``n_iter``, which counts generator steps, to 20 per epoch); samples/s =
  rows per epoch / seconds per epoch (the GAN: minibatch rows through a
  network per second, ``batch_size * (n_critic + n_classifier + 1)`` per generator step).
  FLOPs per epoch are counted in a separate float32 run at n = 2,000 and scaled by n; the
  fraction of peak is the achieved GFLOP/s over the float32 (or float64) matmul rate. Aten
  operations per sample are counted in the same small run; times the cost per operation of an
  Adam step of a tiny MLP (ops too small to cost anything but eager overhead), measured in the
  same process, they give the share of an epoch that per-operation overhead alone accounts for.

Writes benchmarks/results/scaling/variants/<name>.{json,md} (default name ``throughput``;
``--smoke``: 2,000 predict rows, n = 300, K = 3, the registry's smallest budgets, under a
temporary folder).
"""

import argparse
import contextlib
import os
import time

import _common
import numpy as np
import torch
from _common import add_name_argument, fit_source, observing, write
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

K, D = 10, 64


def predict_estimator(method):
    """The method at its shortest training: predict's cost does not depend on how long it trained."""
    return _common.build(method, K, budget="shortest", random_state=0, device="cpu")


def train_estimator(method, epochs):
    """The method with each training budget set to ``epochs`` (``n_iter`` counts generator steps:
    20 per epoch, so that the median step time has enough samples); only per-epoch times are used."""
    est = _common.build(method, K, random_state=0, device="cpu")
    est.set_params(**{p: epochs if p.endswith("epochs") else 20 * epochs for p in _common.budget_names(est)})
    return est


def shipped_dtype(method):
    """The estimator's working dtype on the CPU, as shipped (``_cpu_dtype``, an attribute or a property)."""
    return str(predict_estimator(method)._cpu_dtype).replace("torch.", "")


@contextlib.contextmanager
def working_dtype(method, dtype):
    """The estimator class as shipped (``dtype=None``) or with its CPU working dtype set to ``dtype``:
    the class's own ``_cpu_dtype`` (or, if it inherits it, a new one) is replaced for the block."""
    if dtype is None:
        yield
        return
    cls = _common.build(method, K).__class__
    value = getattr(torch, dtype)
    had, old = "_cpu_dtype" in cls.__dict__, cls.__dict__.get("_cpu_dtype")
    cls._cpu_dtype = property(lambda self: value) if isinstance(old, property) else value
    try:
        yield
    finally:
        if had:
            cls._cpu_dtype = old
        else:
            del cls._cpu_dtype


def best_time(fn, repeat):
    return _common.best_of(fn, repeat, clock="cpu")


def package_state():
    """The imported package's folder, git commit and uncommitted changes (a worktree of another
    commit on ``PYTHONPATH`` is measured by this script), and the thread settings of the run."""
    import subprocess

    import sktransfer_cluster

    here = os.path.dirname(os.path.abspath(sktransfer_cluster.__file__))

    def git(*cmd):
        try:
            return subprocess.run(["git", *cmd], cwd=here, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return None

    env = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY")}
    return {"path": here, "commit": git("rev-parse", "HEAD"), "dirty": git("status", "--porcelain", "--", "."),
            "thread_env": env}


def matmul_rates(size=2048):
    rates = {}
    for dtype in (torch.float32, torch.float64):
        a = torch.randn(size, size, dtype=dtype)
        b = torch.randn(size, size, dtype=dtype)
        t, _ = best_time(lambda: torch.mm(a, b), 3)
        rates[str(dtype).replace("torch.", "")] = 2 * size**3 / t / 1e9
    return rates


def fit(est, X, y):
    return fit_source(est, X, y)


def predict_flops_per_row(method, est, X):
    rows = X[:8192]
    with FlopCounterMode(display=False) as fc:
        est.predict(rows)
    # C2M's distances to its reference rows are an addmm (graph.nearest_reference), counted here.
    return fc.get_total_flops() / rows.shape[0]


def _predict_data_and_kmeans(args):
    """The predict rows, the fit rows and KMeans.predict's best time on them (the peer of both parts)."""
    n_pred = int(args.predict_n)
    X, y = _common.blobs(n_pred, D, K)
    n_fit = 300 if args.smoke else 2000
    Xs, ys = X[:n_fit], y[:n_fit]
    km = _common.peer("KMeans", K).fit(Xs)
    t_km, _ = best_time(lambda: km.predict(X), 3)
    return n_pred, X, Xs, ys, t_km


def predict_part(args, rates, methods):
    n_pred, X, Xs, ys, t_km = _predict_data_and_kmeans(args)
    rows = [{"method": "KMeans", "dtype": "float32", "predict_s": t_km, "ratio": 1.0,
             "flops_per_row": 2 * D * K, "gflops": 2 * D * K * n_pred / t_km / 1e9}]
    print(f"KMeans.predict {t_km:.3f} s", flush=True)
    for method in methods:
        shipped = shipped_dtype(method)
        arms = [None] + (["float64"] if shipped != "float64" else [])
        for arm in arms:
            with working_dtype(method, arm):
                est = fit(predict_estimator(method), Xs, ys)
                est.predict(X[:1000])  # warm-up
                t, labels = best_time(lambda: est.predict(X), 2)
                flops = predict_flops_per_row(method, est, X)
            dtype = arm or shipped
            row = {"method": method, "dtype": dtype, "shipped": arm is None, "predict_s": t, "ratio": t / t_km,
                   "flops_per_row": flops, "gflops": flops * n_pred / t / 1e9}
            row["fraction_of_mm"] = row["gflops"] / rates[dtype]
            rows.append(row)
            print(row, flush=True)
    return rows


class MatmulRecorder(TorchDispatchMode):
    """Records the matrix products run under it, any overload (``out=`` too): ``(kind, (m, k, n) or
    (b, m, k, n), dtype)``.

    ``cdist(x1 (m, k), x2 (n, k))`` (``_cdist_forward`` or, for large inputs, ``_euclidean_dist``)
    is recorded as the ``mm`` it amounts to (the matmul rate is
    its roofline too: the squared distances are a product plus row norms)."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        aten = torch.ops.aten
        # Any overload: ``out=`` variants (``addmm.out``: C2M's distance blocks) are products too.
        # They are replayed the same way (into a kept result: no allocation per call).
        packet = getattr(func, "overloadpacket", None)
        out = "_out" if "out" in (kwargs or {}) else ""
        if packet is aten.mm:
            (m, k), n = args[0].shape, args[1].shape[1]
            self.calls.append(("mm" + out, (m, k, n), args[0].dtype))
        elif packet is aten.addmm:
            (m, k), n = args[1].shape, args[2].shape[1]
            self.calls.append(("addmm" + out, (m, k, n), args[1].dtype))
        elif packet is aten.bmm:
            b, m, k = args[0].shape
            self.calls.append(("bmm" + out, (b, m, k, args[1].shape[2]), args[0].dtype))
        elif func in (aten._cdist_forward.default, aten._euclidean_dist.default):
            *_, m, k = args[0].shape
            self.calls.append(("mm", (m, k, args[1].shape[-2]), args[0].dtype))
        return func(*args, **(kwargs or {}))


def call_flops(kind, shape):
    if kind.startswith("bmm"):
        b, m, k, n = shape
        return 2 * b * m * k * n
    m, k, n = shape
    return 2 * m * k * n


def replay_matmuls(calls, repeat=2):
    """Process seconds of torch's own matmul on the recorded products (same shapes, dtype, count):
    the sum over the distinct products of the best of ``repeat`` replays of each."""
    total = 0.0
    for (kind, shape, dtype), count in sorted(_count(calls).items(), key=str):
        kw = {}
        if kind.startswith("bmm"):
            b, m, k, n = shape
            a, w = torch.randn(b, m, k, dtype=dtype), torch.randn(b, k, n, dtype=dtype)
            if kind.endswith("_out"):
                kw["out"] = torch.empty(b, m, n, dtype=dtype)
            op = lambda: torch.bmm(a, w, **kw)  # noqa: E731
        else:
            m, k, n = shape
            a, w, bias = torch.randn(m, k, dtype=dtype), torch.randn(n, k, dtype=dtype).t(), torch.randn(n, dtype=dtype)
            if kind.endswith("_out"):
                kw["out"] = torch.empty(m, n, dtype=dtype)
            if kind.startswith("addmm"):
                op = lambda: torch.addmm(bias, a, w, **kw)  # noqa: E731
            else:
                op = lambda: torch.mm(a, w, **kw)  # noqa: E731

        def run(op=op, count=count):
            for _ in range(count):
                op()

        t, _ = best_time(run, repeat)
        total += t
    return total


def _count(calls):
    out = {}
    for c in calls:
        out[c] = out.get(c, 0) + 1
    return out


def roofline_part(args, methods):
    n_pred, X, Xs, ys, t_km = _predict_data_and_kmeans(args)
    rows = [{"method": "KMeans", "predict_s": t_km, "flops_per_row": 2 * D * K,
             "gflops": 2 * D * K * n_pred / t_km / 1e9}]
    print(f"KMeans.predict {t_km:.3f} s", flush=True)
    for method in methods:
        est = fit(predict_estimator(method), Xs, ys)
        est.predict(X[:1000])  # warm-up
        with MatmulRecorder() as rec:
            est.predict(X)
        flops = sum(call_flops(kind, shape) for kind, shape, _ in rec.calls)
        # Predict and replay alternate: each round's pair is timed within seconds.
        t_rounds, mm_rounds = [], []
        for _ in range(args.rounds):
            t_rounds.append(best_time(lambda: est.predict(X), 1)[0])
            mm_rounds.append(replay_matmuls(rec.calls, repeat=1))
        t, t_mm = min(t_rounds), min(mm_rounds)
        # The recorded products, the costliest (FLOPs summed over the predict) first.
        by_shape = {}
        for kind, shape, dt in rec.calls:
            key = f"{kind} {'x'.join(map(str, shape))} {str(dt).replace('torch.', '')}"
            by_shape[key] = by_shape.get(key, 0) + call_flops(kind, shape)
        shapes = sorted(by_shape, key=by_shape.get, reverse=True)
        row = {"method": method, "dtype": shipped_dtype(method), "predict_s": t, "ratio": t / t_km,
               "flops_per_row": flops / n_pred, "gflops": flops / t / 1e9, "matmul_s": t_mm,
               "matmul_gflops": flops / t_mm / 1e9 if t_mm > 0 else float("nan"),
               "share": t_mm / t, "n_matmuls": len(rec.calls), "shapes": shapes[:8],
               "predict_rounds_s": t_rounds, "matmul_rounds_s": mm_rounds,
               "share_rounds": [m / p for m, p in zip(mm_rounds, t_rounds)], "load_average": os.getloadavg()}
        rows.append(row)
        print(row, flush=True)
    return rows


class OpCounter(TorchDispatchMode):
    """Counts the aten operations run under it (forward and backward)."""

    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


def op_floor(steps=2000):
    """Process seconds per aten operation of an Adam training step of a tiny MLP (batch 4,
    widths 4): every op is too small to cost anything but torch's eager overhead (Python,
    autograd, dispatch), so this is the per-op cost no arithmetic hides."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    x = torch.randn(4, 4)

    def step():
        loss = (net(x) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    step()
    with OpCounter() as ops:
        step()
    t0 = time.process_time()
    for _ in range(steps):
        step()
    return (time.process_time() - t0) / steps / ops.n


class EpochClock:
    """A training callback: process time (and, optionally, counted FLOPs and aten ops) of every
    epoch (or generator step) of every training phase, from one epoch end to the next."""

    def __init__(self, counter=None, ops=None):
        self.records, self.counter, self.ops = [], counter, ops

    def _now(self):
        flops = self.counter.get_total_flops() if self.counter is not None else 0
        return time.process_time(), (flops, self.ops.n if self.ops is not None else 0)

    def on_phase_begin(self, run):
        self._mark = self._now()

    def on_epoch_end(self, run, values):
        (t, f), (t2, f2) = self._mark, self._now()
        self.records.append({"phase": run.phase, "unit": run.unit, "s": t2 - t, "flops": f2[0] - f[0],
                             "ops": f2[1] - f[1]})
        self._mark = self._now()

    def per_phase(self):
        out = {}
        for r in self.records:
            out.setdefault(r["phase"], []).append(r)
        return out


def rows_per_epoch(method, est, n):
    if method == "PreciseFeatureGAN":
        return est.batch_size * (est.n_critic + est.n_classifier + 1)
    return n


def train_part(args, rates, methods):
    rows = []
    floor = op_floor(200 if args.smoke else 2000)
    print(f"per-op floor of a tiny training step {1e6 * floor:.2f} us", flush=True)
    n_flops = min(2000, min(int(v) for v in args.train_n))
    for n in [int(v) for v in args.train_n]:
        X, y = _common.blobs(n, D, K)
        for method in methods:
            if not _common.budget_names(_common.build(method, K)):
                continue  # no training phase to time
            # FLOPs per row of each phase's epoch, counted on a small float32 run.
            Xf, yf = X[:n_flops], y[:n_flops]
            est = train_estimator(method, 1)
            try:
                with FlopCounterMode(display=False) as fc, OpCounter() as ops:
                    clock = EpochClock(fc, ops)
                    with observing(est, clock):
                        fit(est, Xf, yf)
                per_row = {key: {p: float(np.median([r[key] for r in recs])) / rows_per_epoch(method, est, n_flops)
                                 for p, recs in clock.per_phase().items()} for key in ("flops", "ops")}
            except RuntimeError as exc:
                # FlopCounterMode's module hooks break double backward (C2M's gradient penalty):
                # the epochs are still timed below, without FLOPs or op counts.
                print(f"{method}: FLOPs not counted ({str(exc).splitlines()[0][:100]})", flush=True)
                per_row = {"flops": {}, "ops": {}}
            flops_row, ops_row = per_row["flops"], per_row["ops"]
            epochs = 2 if n <= 10_000 else 1
            for arm in (None, "float64"):
                est, clock = train_estimator(method, epochs), EpochClock()
                with working_dtype(method, arm), observing(est, clock):
                    t0 = time.process_time()
                    fit(est, X, y)
                    total = time.process_time() - t0
                dtype = arm or "float32"
                # No phase at these settings (SinkhornKMeans on raw X has budgets but no training): no rows.
                for phase, recs in clock.per_phase().items():
                    s = float(np.median([r["s"] for r in recs]))
                    per = rows_per_epoch(method, est, n)
                    fl = flops_row.get(phase, np.nan)
                    row = {"method": method, "n": n, "dtype": dtype, "phase": phase, "unit": recs[0]["unit"],
                           "epochs_timed": len(recs), "s_per_epoch": s, "rows_per_epoch": per,
                           "samples_per_s": per / s, "flops_per_sample": fl,
                           "gflops": fl * per / s / 1e9, "fit_s": total}
                    row["fraction_of_mm"] = row["gflops"] / rates[dtype]
                    # The share of the epoch that its op count costs at the small-op floor.
                    row["ops_per_sample"] = ops_row.get(phase, np.nan)
                    row["op_floor_us"] = 1e6 * floor
                    row["op_floor_share"] = row["ops_per_sample"] * per * floor / s
                    rows.append(row)
                    print(row, flush=True)
    return rows


def markdown(res, args):
    r = res["matmul_gflops"]
    md = ["Every measurement in one process, 1 thread (`torch.set_num_threads(1)`, `OMP_NUM_THREADS=1`), "
          "process CPU seconds. Data: `make_blobs` with 10 centres, 64 features, float32.", "",
          f"**Matmul rate** (`torch.mm` 2,048 x 2,048, best of 3): float32 {r['float32']:.1f} GFLOP/s, "
          f"float64 {r['float64']:.1f} GFLOP/s. torch threads {res['torch_threads']}; load average at the start "
          f"{res['load_average_start'][0]:.2f}" + (f", after the roofline part {res['load_average'][0]:.2f}"
                                                    if "load_average" in res else "") + ".", ""]
    pkg = res.get("package")
    if pkg:
        env = ", ".join(f"{k}={v}" for k, v in pkg["thread_env"].items())
        md[-1:-1] = [f"Package: `{pkg['path']}` at commit {pkg['commit']}"
                     + (" (uncommitted changes)" if pkg["dirty"] else "") + f"; {env}.", ""]
    if res.get("predict"):
        n_pred = int(args.predict_n)
        n_fit = 300 if args.smoke else 2000
        md += [f"### predict on {n_pred:,} x 64 float32 rows (fit on {n_fit:,} x 64, shortest training)", "",
               "| method | working dtype | predict s | / KMeans.predict | FLOPs per row | GFLOP/s | of mm peak |",
               "|---|---|---|---|---|---|---|"]
        for row in res["predict"]:
            tag = row["dtype"] + ("" if row.get("shipped", True) else " (before)")
            frac = f"{100 * row['fraction_of_mm']:.0f}%" if "fraction_of_mm" in row else "-"
            md.append(f"| {row['method']} | {tag} | {row['predict_s']:.3g} | {row['ratio']:.1f}x | "
                      f"{row['flops_per_row']:,.0f} | {row['gflops']:.2f} | {frac} |")
        md.append("")
    if res.get("roofline"):
        n_pred = int(args.predict_n)
        md += [f"### roofline of predict on {n_pred:,} x 64 float32 rows (as shipped)", "",
               "FLOPs per row: the matrix products the predict runs (recorded), 2 m k n each. *same-shape "
               "matmul s*: torch's matmul replaying those products (shapes, dtype, count) in this process; "
               "*share of the matmul rate*: that time over the predict's. Predict and replay alternate "
               f"{args.rounds} times; the times are each one's best round, *rounds* the range of the "
               "rounds' own shares, *load* the 1-minute load average after the method. KMeans.predict's "
               "row: its distance arithmetic (2 d K), for scale.", "",
               "| method | dtype | predict s | / KMeans.predict | FLOPs per row | GFLOP/s | same-shape matmul s "
               "| its GFLOP/s | share of the matmul rate | rounds | load | largest product |",
               "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        km = res["roofline"][0]["predict_s"]
        for row in res["roofline"]:
            if row["method"] == "KMeans":
                md.append(f"| KMeans | float32 | {row['predict_s']:.3g} | 1.0x | {row['flops_per_row']:,.0f} | "
                          f"{row['gflops']:.2f} | | | | | | |")
                continue
            big = row["shapes"][0] if row["shapes"] else "-"
            rounds = row.get("share_rounds") or [row["share"]]
            load = f"{row['load_average'][0]:.1f}" if "load_average" in row else ""
            md.append(f"| {row['method']} | {row['dtype']} | {row['predict_s']:.3g} | {row['predict_s'] / km:.1f}x | "
                      f"{row['flops_per_row']:,.0f} | {row['gflops']:.2f} | {row['matmul_s']:.3g} | "
                      f"{row['matmul_gflops']:.1f} | {100 * row['share']:.0f} % | "
                      f"{100 * min(rounds):.0f}-{100 * max(rounds):.0f} % | {load} | {big} |")
        md.append("")
    if res.get("train"):
        md += [f"### training throughput per epoch (d = 64, K = {K})", "",
               "Seconds per epoch of each phase (the GAN: per generator step), median over the timed "
               "epochs; samples/s = rows per epoch / s; FLOPs and aten operations (forward and backward) per "
               f"sample counted in float32 at n = {min(2000, min(int(v) for v in args.train_n)):,}. "
               "*ops x floor*: the epoch's operation count times the "
               f"cost per operation of an Adam step of a tiny MLP ({res['train'][0]['op_floor_us']:.2f} us: "
               "batch 4, widths 4, same process), as a share of the epoch's time; near 100 % the phase is "
               "bound by torch's per-operation overhead, not by arithmetic.", "",
               "| method | phase | n | dtype | s / epoch | samples / s | f32 speed-up | FLOPs / sample | GFLOP/s "
               "| of mm peak | aten ops / sample | ops x floor |",
               "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        f32 = {(x["method"], x["phase"], x["n"]): x for x in res["train"] if x["dtype"] == "float32"}
        for row in res["train"]:
            ref = f32.get((row["method"], row["phase"], row["n"]))
            sp = f"{row['s_per_epoch'] / ref['s_per_epoch']:.2f}x" if row["dtype"] == "float64" and ref else ""
            md.append(f"| {row['method']} | {row['phase']} | {row['n']:,} | {row['dtype']} | "
                      f"{row['s_per_epoch']:.3g} | {row['samples_per_s']:,.0f} | {sp} | "
                      f"{row['flops_per_sample']:,.0f} | {row['gflops']:.2f} | {100 * row['fraction_of_mm']:.0f}% | "
                      f"{row.get('ops_per_sample', float('nan')):.2f} | {100 * row.get('op_floor_share', float('nan')):.0f}% |")
    return "\n".join(md)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", nargs="+", default=["predict", "train"], choices=["predict", "train", "roofline"])
    parser.add_argument("--methods", nargs="+", default=_common.method_names(), choices=_common.method_names())
    parser.add_argument("--predict-n", type=float, default=1e6)
    parser.add_argument("--train-n", type=float, nargs="+", default=[1e4, 1e5])
    parser.add_argument("--quick", action="store_true", help="smoke run: 2*10^4 predict rows, n = 2,000")
    parser.add_argument("--rounds", type=int, default=3,
                        help="roofline: alternating rounds of predict and the same-shape replay (default 3)")
    add_name_argument(parser, "scaling")
    args = _common.setup(parser.parse_args())
    if args.name == "scaling":
        args.name = "throughput"
    global K
    if args.smoke:
        K, args.predict_n, args.train_n = _common.SMOKE_K, 2e3, [300]
    elif args.quick:
        args.predict_n, args.train_n = 2e4, [2e3]
    torch.set_num_threads(1)
    size = 256 if args.smoke else 2048
    rates = matmul_rates(size)
    print("matmul GFLOP/s", rates, flush=True)
    res = {"matmul_gflops": rates, "torch_threads": torch.get_num_threads(), "load_average_start": os.getloadavg(),
           "package": package_state()}
    if "predict" in args.parts:
        res["predict"] = predict_part(args, rates, args.methods)
    if "roofline" in args.parts:
        res["roofline"] = roofline_part(args, args.methods)
        res["load_average"] = os.getloadavg()
    if "train" in args.parts:
        res["train"] = train_part(args, rates, args.methods)
    res["matmul_gflops_end"] = matmul_rates(size)
    write("scaling", args.name, res, markdown(res, args), quick=args.quick)


if __name__ == "__main__":
    main()
