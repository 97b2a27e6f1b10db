"""SinkhornKMeans fitted on a memory-mapped array by minibatches (issue 31, item 1).

    python benchmarks/memmap_fit.py [--n 2000000] [--d 16] [--k 10] [--std 4.0] [--seeds 0 1 2]
        [--no-full] [--no-peer] [--name NAME] [--smoke]
    python benchmarks/memmap_fit.py --neural [--n 1000000] [--d 784] [--k 10] [--std 0.3]
        [--epochs 50] [--landmarks M] [--methods ae paper tdcm ccn] [--tdcm-epochs 1] [--neighbour-epochs 40]
        [--paper-epochs 1 1] [--paper-inference] [--methods ae-transfer] [--transfer-source-rows 20000]
        [--ccn-params JSON] [--ccn-source-rows 20000] [--methods c2m] [--c2m-params JSON]
        [--c2m-encoder-epochs 40] [--methods c2m-transfer] [--c2m-source-rows 20000]
        [--seeds 0] [--no-peer] [--name NAME] [--smoke]

``--neural`` (the streamed neural fit): ``SinkhornKMeans(embedding="autoencoder")`` at its
defaults but ``pretrain_epochs=--epochs`` on ``--n`` x ``--d`` non-negative blob rows (``--k``
sparse centres: each feature is 0 with probability 0.7, else uniform in [0, 1]; plus normal
noise of standard deviation ``--std``, clipped at 0, so rows hold zeros and the graph is
cosine, as for images), against ``MiniBatchKMeans(K, batch_size=8192)`` at its other
defaults over the same memmap, each in a fresh process; CPU s, peak RSS growth, ARI. Past
``representation.LANDMARK_ROWS`` rows the fit trains on the graph of that many landmark rows
and computes codes chunk by chunk; the peak does not depend on ``--epochs`` (every epoch
runs the same steps on the same landmarks), the CPU time does. Goal (issue 31): peak RSS
growth <= 1 GiB at 10^6 x 784.

``--methods paper`` adds the paper's autoencoder, ``SinkhornKMeans(K, **PAPER_PARAMS)``
(``neighbour_weight=0``: 500-250-10, batch 300, no graph) but ``pretrain_epochs, max_epochs =
--paper-epochs``, over the same memmap: past ``LANDMARK_ROWS`` rows every minibatch is read by
index, the codes chunk by chunk, the OT k-means start is chosen on the codes of that many rows,
and the final assignment is chunked. Every epoch reads the same number of batches of the same
size, so only the CPU time grows with the epochs. ``--paper-inference`` also measures, in the
same process after the fit (peak reset before each), ``predict(X)`` and ``transfer(X)`` at its
defaults (no joint epochs, no restarts) on the same memmap.

``--methods ae-transfer`` measures ``transfer(X, fine_tune_epochs=--epochs)`` of the default
(graph) autoencoder on the whole memmap: ``SinkhornKMeans(K, embedding="autoencoder",
pretrain_epochs=--epochs)`` is fitted, before the measurement, on the first
``--transfer-source-rows`` rows in memory; past ``LANDMARK_ROWS`` target rows the refinement and
the joint phase train on the graph of that many target rows drawn by index, the codes come chunk
by chunk, and the ``n_init`` restarts are drawn on the landmarks' codes. The ARI is that of the
target's labels.

``--methods tdcm`` adds ``TDCMCluster(K)`` at its defaults (``representation="neighbours"``)
but ``max_epochs=--tdcm-epochs`` over the same memmap: past ``LANDMARK_ROWS`` its neighbour
encoder trains on the landmarks' graph (``--neighbour-epochs`` epochs: the class's private
``_neighbour_epochs``, 40 by default), the codes of every row are computed chunk by chunk and
smoothed over their nearest landmarks' codes, and the blocks train on all ``n`` codes
(``--tdcm-epochs`` passes). Only the CPU time grows with the epochs.

``--methods ccn`` adds ``CCNCluster(K, **--ccn-params)`` (its defaults where the JSON names
nothing) fitted with the blobs' labels as its labelled source, ``fit(X, y)``: past
``LANDMARK_ROWS`` its neighbour encoder trains on the landmarks' graph, every row's code is
computed chunk by chunk, ``G`` and ``f`` train on minibatches of the ``n`` codes drawn by index,
and each row's ``similar_neighbors`` neighbourhood is a radius estimated from
``ccn.streamed.RADIUS_ROWS`` reference rows. The ARI is that of ``labels_`` (``f``'s clusters
of the source) against the labels ``G`` learned from. ``--methods ccn-transfer`` measures
``transfer`` on the whole memmap instead: the same ``CCNCluster`` is fitted, before the
measurement, on the first ``--ccn-source-rows`` rows and their labels (in memory); the ARI is
that of the target's labels.

``--methods c2m`` adds ``C2MCluster(K, **--c2m-params)`` (its defaults where the JSON names
nothing) fitted with the blobs' labels as its source, ``fit(X, y)``, its neighbour encoder
trained ``--c2m-encoder-epochs`` epochs (the class's private ``_neighbour_epochs``, 40 by
default): past ``LANDMARK_ROWS`` the encoder trains on the landmarks' graph, every row's code is
computed chunk by chunk, each critic step reads its set by index, the clustering's statistics
come from one pass over the codes, and every code is labelled chunk by chunk. The ARI is that
of ``labels_`` against the blobs' labels. ``--methods c2m-transfer`` measures ``transfer(X)`` on
the whole memmap instead, its encoder refined ``--c2m-encoder-epochs`` epochs (the class's
private ``_refine_epochs``) on the graph of ``LANDMARK_ROWS`` target rows drawn by index: the
same ``C2MCluster`` is fitted, before the measurement, on the first ``--c2m-source-rows`` rows and
their labels (in memory); the ARI is that of the target's labels.

Canonical run: ``python benchmarks/memmap_fit.py`` (results/scaling/variants/memmap_fit).

Writes ``--n`` x ``--d`` float32 blobs (``--k`` centres uniform in [-10, 10]^d, standard
deviation ``--std``, labels uniform) to a ``.npy`` file in a temporary folder, chunk by
chunk, then measures in a fresh process per cell, one thread (``OMP_NUM_THREADS=1``), each
cell's CPU seconds and the growth of its peak resident set over the fit (``VmHWM`` reset
before it; file pages mapped by reading the memmap count):

* ``SinkhornKMeans(algorithm="minibatch")`` on the memmap (``np.load(mmap_mode="r")``);
* ``MiniBatchKMeans`` on the same memmap with the same batch size (8,192) and the same number
  of passes over the data as SinkhornKMeans made in the same seed (``max_iter`` = its
  ``n_iter_``, ``tol=0``, ``max_no_improvement=None``), its other settings default;
* ``SinkhornKMeans`` fitted in memory at its defaults (``algorithm="full"``) on the array
  loaded into memory (the copy made before the measurement), unless ``--no-full``.

ARI against the blobs' labels for each, and between the minibatch and the in-memory fit of
the same seed. Goals (issue 31): peak RSS growth <= 512 MiB, time <= 3x MiniBatchKMeans with
the same passes, ARI within 0.01 of the in-memory fit.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import _common
import numpy as np

HERE = Path(__file__).resolve().parent
_MARK = "SKTC-MEMMAP "


def write_blobs(path, n, d, k, std, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-10, 10, size=(k, d))
    X = np.lib.format.open_memmap(path / "X.npy", mode="w+", dtype=np.float32, shape=(n, d))
    y = np.lib.format.open_memmap(path / "y.npy", mode="w+", dtype=np.int64, shape=(n,))
    step = 1 << 18
    for start in range(0, n, step):
        stop = min(start + step, n)
        lab = rng.integers(0, k, size=stop - start)
        X[start:stop] = centres[lab] + std * rng.normal(size=(stop - start, d))
        y[start:stop] = lab
    X.flush()
    y.flush()
    del X, y


def write_nonnegative_blobs(path, n, d, k, std, seed=0):
    """``--neural`` data: sparse non-negative centres plus clipped noise (rows with zeros)."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, 1, size=(k, d)) * (rng.random((k, d)) < 0.3)
    X = np.lib.format.open_memmap(path / "X.npy", mode="w+", dtype=np.float32, shape=(n, d))
    y = np.lib.format.open_memmap(path / "y.npy", mode="w+", dtype=np.int64, shape=(n,))
    step = max(1, 2**22 // d)
    for start in range(0, n, step):
        stop = min(start + step, n)
        lab = rng.integers(0, k, size=stop - start)
        block = rng.standard_normal(size=(stop - start, d), dtype=np.float32)
        block *= std
        block += centres[lab]
        np.maximum(block, 0, out=block)
        X[start:stop] = block
        y[start:stop] = lab
        X.flush()
    y.flush()
    del X, y


def open_job(job):
    """The memmap ``X`` and labels ``y`` of a measurement ``job``, in its fresh process: one torch
    thread, and the landmark count the job names (``"landmarks"``)."""
    import torch

    torch.set_num_threads(1)
    folder = Path(job["folder"])
    if job.get("landmarks"):
        from sktransfer_cluster.representation import landmarks

        landmarks.LANDMARK_ROWS = int(job["landmarks"])
    return np.load(folder / "X.npy", mmap_mode="r"), np.load(folder / "y.npy")


def cell(job):
    """One measurement in this (fresh) process."""
    import torch
    from sklearn.cluster import MiniBatchKMeans
    from sklearn.metrics import adjusted_rand_score

    from sktransfer_cluster import C2MCluster, CCNCluster, SinkhornKMeans, TDCMCluster
    from sktransfer_cluster.cluster.sinkhorn_kmeans import PAPER_PARAMS

    method, seed, k = job["method"], job["seed"], job["k"]
    X, y = open_job(job)
    fit_y = ()
    if method == "SinkhornKMeans-AE-transfer":
        model = SinkhornKMeans(k, embedding="autoencoder", pretrain_epochs=job["epochs"], random_state=seed,
                               device="cpu").fit(np.array(X[: job["transfer_source_rows"]]))
    elif method == "CCN-transfer":
        source = slice(0, job["ccn_source_rows"])
        model = CCNCluster(k, random_state=seed, device="cpu", **job["ccn_params"]).fit(np.array(X[source]), y[source])
    elif method == "CCN":
        est = CCNCluster(k, random_state=seed, device="cpu", **job["ccn_params"])
        fit_y = (y,)
    elif method in ("C2M", "C2M-transfer"):
        C2MCluster._neighbour_epochs = C2MCluster._refine_epochs = int(job["c2m_encoder_epochs"])
        est = C2MCluster(k, random_state=seed, device="cpu", **job["c2m_params"])
        fit_y = (y,)
        if method == "C2M-transfer":
            source = slice(0, job["c2m_source_rows"])
            model = est.fit(np.array(X[source]), y[source])
    elif method == "TDCM":
        TDCMCluster._neighbour_epochs = int(job["neighbour_epochs"])
        est = TDCMCluster(k, max_epochs=job["tdcm_epochs"], random_state=seed, device="cpu")
    elif method == "SinkhornKMeans-AE":
        est = SinkhornKMeans(k, embedding="autoencoder", pretrain_epochs=job["epochs"], random_state=seed,
                             device="cpu")
    elif method == "SinkhornKMeans-AE-paper":
        pretrain, joint = job["paper_epochs"]
        est = SinkhornKMeans(k, **{**PAPER_PARAMS, "pretrain_epochs": pretrain, "max_epochs": joint},
                             random_state=seed, device="cpu")
    elif method == "MiniBatchKMeans-defaults":
        est = MiniBatchKMeans(k, batch_size=8192, random_state=seed)
    elif method == "SinkhornKMeans-full":
        X = np.array(X)  # in memory, before the measurement
        est = SinkhornKMeans(k, algorithm="full", random_state=seed, device="cpu")
    elif method == "SinkhornKMeans-minibatch":
        est = SinkhornKMeans(k, algorithm="minibatch", random_state=seed, device="cpu")
    else:
        est = MiniBatchKMeans(k, batch_size=8192, max_iter=job["passes"], tol=0.0, max_no_improvement=None,
                              random_state=seed)
    torch.ones(8, 8) @ torch.ones(8, 8)
    if method in ("CCN-transfer", "C2M-transfer"):
        est, cpu, wall, peak = _common.measured(lambda: model.transfer(X) is not None and model)
    elif method == "SinkhornKMeans-AE-transfer":
        est, cpu, wall, peak = _common.measured(
            lambda: model.transfer(X, fine_tune_epochs=job["epochs"]) is not None and model)
    else:
        est, cpu, wall, peak = _common.measured(lambda: est.fit(X, *fit_y))
    labels = est.labels_
    np.save(Path(job["folder"]) / f"labels_{method}_{seed}.npy", labels)
    passes = int(est.n_iter_) if not method.startswith("MiniBatchKMeans") else float(est.n_steps_ * 8192 / X.shape[0])
    out = {"method": method, "seed": seed, "cpu_s": cpu, "wall_s": wall, "peak_extra_mib": peak / 2**20,
           "ari": float(adjusted_rand_score(y, labels)), "passes": passes}
    if job.get("inference") and method == "SinkhornKMeans-AE-paper":
        # After the fit, in this process: each call's own peak over the resident set before it.
        predicted, cpu, wall, peak = _common.measured(lambda: est.predict(X))
        out["predict"] = {"cpu_s": cpu, "wall_s": wall, "peak_extra_mib": peak / 2**20,
                          "agrees_with_labels": float(np.mean(predicted == labels))}
        transferred, cpu, wall, peak = _common.measured(lambda: est.transfer(X))
        out["transfer"] = {"cpu_s": cpu, "wall_s": wall, "peak_extra_mib": peak / 2**20,
                           "ari": float(adjusted_rand_score(y, transferred))}
    return out


def run_cell(job, script="memmap_fit.py", mark=_MARK):
    """``job`` measured by ``script --cell`` in a fresh process (1 thread); its result line starts with ``mark``."""
    cmd = [sys.executable, str(HERE / script), "--cell", json.dumps(job)]
    done = subprocess.run(cmd, check=False, cwd=HERE, env=_common.thread_env(1), capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise RuntimeError(f"cell {job} failed")
    line = next(line for line in done.stdout.splitlines() if line.startswith(mark))
    out = json.loads(line[len(mark):])
    print(out, flush=True)
    return out


def markdown(rows, args, agreement):
    by = {}
    for r in rows:
        by.setdefault(r["method"], []).append(r)

    def med(method, key):
        v = [r[key] for r in by.get(method, [])]
        return (float(np.median(v)), min(v), max(v)) if v else None

    def fmt(t, digits=2):
        return "n/a" if t is None else f"{t[0]:.{digits}f} [{t[1]:.{digits}f}, {t[2]:.{digits}f}]"

    md = [(f"{args.n:,} x {args.d} float32 blobs (K = {args.k}, std {args.std}), a `.npy` memmap of "
           f"{args.n * args.d * 4 / 2**20:,.0f} MiB; one fresh process per cell, 1 thread, seeds "
           f"{' '.join(map(str, args.seeds))}: median [min, max]."), "",
          "| method | CPU s | / MiniBatchKMeans | peak RSS growth MiB | passes (full fit: OT-Lloyd iterations) | ARI |",
          "|---|---|---|---|---|---|"]
    mbk = {r["seed"]: r["cpu_s"] for r in by.get("MiniBatchKMeans", [])}
    for method in ("SinkhornKMeans-minibatch", "MiniBatchKMeans", "SinkhornKMeans-full"):
        if method not in by:
            continue
        ratios = [r["cpu_s"] / mbk[r["seed"]] for r in by[method] if r["seed"] in mbk]
        ratio = fmt((float(np.median(ratios)), min(ratios), max(ratios))) + "x" if ratios else "n/a"
        md.append(f"| {method} | {fmt(med(method, 'cpu_s'))} | {ratio} | {fmt(med(method, 'peak_extra_mib'), 0)} | "
                  f"{fmt(med(method, 'passes'), 1)} | {fmt(med(method, 'ari'), 4)} |")
    if agreement:
        md += ["", "ARI(minibatch fit, in-memory fit) per seed: " + ", ".join(f"{a:.4f}" for a in agreement)]
    return "\n".join(md)


def neural_markdown(rows, args):
    from sktransfer_cluster.representation import LANDMARK_ROWS

    LANDMARK_ROWS = args.landmarks or LANDMARK_ROWS
    settings = []
    if "ae" in args.methods:
        settings.append(f"SinkhornKMeans-AE with pretrain_epochs={args.epochs}")
    if "ae-transfer" in args.methods:
        settings.append(f"SinkhornKMeans-AE transfer(X, fine_tune_epochs={args.epochs}) after a fit on the first "
                        f"{args.transfer_source_rows:,} rows with pretrain_epochs={args.epochs}")
    if "paper" in args.methods:
        settings.append("SinkhornKMeans-AE-paper (PAPER_PARAMS) with pretrain_epochs={}, max_epochs={}".format(
            *args.paper_epochs))
    if "tdcm" in args.methods:
        settings.append(f"TDCM with max_epochs={args.tdcm_epochs} and {args.neighbour_epochs} neighbour-encoder epochs")
    named = ", ".join(f"{key}={value!r}" for key, value in args.ccn_params.items()) or "its defaults"
    if "ccn" in args.methods:
        settings.append(f"CCN fit(X, y) with {named}")
    if "ccn-transfer" in args.methods:
        settings.append(f"CCN transfer(X) after a fit on the first {args.ccn_source_rows:,} rows, with {named}")
    if "c2m" in args.methods:
        named = ", ".join(f"{key}={value!r}" for key, value in args.c2m_params.items()) or "its defaults"
        settings.append(f"C2M fit(X, y) with {named} and {args.c2m_encoder_epochs} neighbour-encoder epochs")
    if "c2m-transfer" in args.methods:
        named = ", ".join(f"{key}={value!r}" for key, value in args.c2m_params.items()) or "its defaults"
        settings.append(f"C2M transfer(X) after a fit on the first {args.c2m_source_rows:,} rows, with {named} and "
                        f"{args.c2m_encoder_epochs} neighbour-encoder epochs (fit and refinement)")
    md = [(f"{args.n:,} x {args.d} float32 non-negative blob rows (K = {args.k}, noise std {args.std}), a "
           f"`.npy` memmap of {args.n * args.d * 4 / 2**20:,.0f} MiB; one fresh process per cell, 1 thread; "
           + "; ".join(settings) + f"; landmarks min(n, {LANDMARK_ROWS:,})."), "",
          "| method | seed | CPU s | peak RSS growth MiB | ARI |", "|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['method']} | {r['seed']} | {r['cpu_s']:.1f} | {r['peak_extra_mib']:.0f} | {r['ari']:.4f} |")
        for call in ("predict", "transfer"):
            if call in r:
                c = r[call]
                score = (f"{c['ari']:.4f}" if "ari" in c else
                         f"(agrees with labels_ on {c['agrees_with_labels']:.4f})")
                md.append(f"| {r['method']}: {call}(X) after the fit | {r['seed']} | {c['cpu_s']:.1f} | "
                          f"{c['peak_extra_mib']:.0f} | {score} |")
    return "\n".join(md)


def main_neural(args):
    if args.smoke:
        args.n, args.d, args.seeds, args.epochs, args.landmarks = 3000, 64, [0], 1, 1000
        args.paper_epochs = [1, 1]
        args.transfer_source_rows = min(args.transfer_source_rows, 1000)
        args.tdcm_epochs, args.neighbour_epochs = 1, 1
        args.ccn_source_rows = min(args.ccn_source_rows, 1000)
        args.ccn_params = {"embedding_epochs": 1, "similarity_epochs": 1, "clustering_epochs": 1,
                           "n_similarity_nets": 1, **args.ccn_params}
        args.c2m_params = {"max_epochs": 1, "sets_per_epoch": 2, **args.c2m_params}
        args.c2m_encoder_epochs = 1
        args.c2m_source_rows = min(args.c2m_source_rows, 1000)
    args.n = int(args.n)
    if args.name == _common.CANONICAL["scaling"]:
        args.name = "memmap_fit_neural"
    rows = []
    with tempfile.TemporaryDirectory(dir=os.environ.get("SKTC_MEMMAP_DIR")) as tmp:
        write_nonnegative_blobs(Path(tmp), args.n, args.d, args.k, args.std)
        for seed in args.seeds:
            job = {"folder": tmp, "seed": seed, "k": args.k, "epochs": args.epochs, "landmarks": args.landmarks,
                   "tdcm_epochs": args.tdcm_epochs, "neighbour_epochs": args.neighbour_epochs,
                   "ccn_params": args.ccn_params, "ccn_source_rows": args.ccn_source_rows,
                   "paper_epochs": args.paper_epochs, "inference": args.paper_inference,
                   "c2m_params": args.c2m_params, "c2m_encoder_epochs": args.c2m_encoder_epochs,
                   "c2m_source_rows": args.c2m_source_rows}
            if "ae" in args.methods:
                rows.append(run_cell({**job, "method": "SinkhornKMeans-AE"}))
            if "paper" in args.methods:
                rows.append(run_cell({**job, "method": "SinkhornKMeans-AE-paper"}))
            if "ae-transfer" in args.methods:
                rows.append(run_cell({**job, "method": "SinkhornKMeans-AE-transfer",
                                      "transfer_source_rows": args.transfer_source_rows}))
            if "tdcm" in args.methods:
                rows.append(run_cell({**job, "method": "TDCM"}))
            if "ccn" in args.methods:
                rows.append(run_cell({**job, "method": "CCN"}))
            if "ccn-transfer" in args.methods:
                rows.append(run_cell({**job, "method": "CCN-transfer"}))
            if "c2m" in args.methods:
                rows.append(run_cell({**job, "method": "C2M"}))
            if "c2m-transfer" in args.methods:
                rows.append(run_cell({**job, "method": "C2M-transfer"}))
            if not args.no_peer:
                rows.append(run_cell({**job, "method": "MiniBatchKMeans-defaults"}))
    _common.write("scaling", args.name, {"rows": rows, "n": args.n, "d": args.d, "k": args.k, "std": args.std,
                                         "epochs": args.epochs, "tdcm_epochs": args.tdcm_epochs,
                                         "neighbour_epochs": args.neighbour_epochs, "landmarks": args.landmarks,
                                         "ccn_params": args.ccn_params, "ccn_source_rows": args.ccn_source_rows,
                                         "paper_epochs": args.paper_epochs, "paper_inference": args.paper_inference,
                                         "transfer_source_rows": args.transfer_source_rows,
                                         "c2m_params": args.c2m_params, "c2m_encoder_epochs": args.c2m_encoder_epochs,
                                         "c2m_source_rows": args.c2m_source_rows,
                                         "code": _common.code_state()},
                  neural_markdown(rows, args))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=float, default=2e6)
    parser.add_argument("--d", type=int, default=16)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--std", type=float, default=4.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--no-full", action="store_true", help="skip the in-memory fit")
    parser.add_argument("--no-peer", action="store_true", help="skip MiniBatchKMeans")
    parser.add_argument("--neural", action="store_true", help="the streamed autoencoder fit (see above)")
    parser.add_argument("--epochs", type=int, default=50, help="--neural: pretrain_epochs")
    parser.add_argument("--landmarks", type=int, default=None,
                        help="--neural: representation.LANDMARK_ROWS for the fit (default: the package's)")
    parser.add_argument("--methods", nargs="+", choices=["ae", "ae-transfer", "paper", "tdcm", "ccn", "ccn-transfer", "c2m",
                                                       "c2m-transfer"],
                        default=["ae", "tdcm"],
                        help="--neural: the estimators measured (SinkhornKMeans-AE fit, its transfer, the paper's "
                             "autoencoder, TDCM, CCN fit, CCN transfer)")
    parser.add_argument("--transfer-source-rows", type=int, default=20000,
                        help="--neural, ae-transfer: the rows (the first ones) the autoencoder is fitted on before transfer(X)")
    parser.add_argument("--paper-epochs", type=int, nargs=2, default=[1, 1], metavar=("PRETRAIN", "JOINT"),
                        help="--neural, paper: pretrain_epochs and max_epochs of the paper's autoencoder")
    parser.add_argument("--paper-inference", action="store_true",
                        help="--neural, paper: also measure predict(X) and transfer(X) after the fit")
    parser.add_argument("--tdcm-epochs", type=int, default=1, help="--neural: TDCM's max_epochs")
    parser.add_argument("--neighbour-epochs", type=int, default=40,
                        help="--neural: epochs of TDCM's neighbour encoder (its _neighbour_epochs)")
    parser.add_argument("--ccn-params", type=json.loads, default={},
                        help="--neural: CCNCluster's parameters as a JSON object (default: its defaults)")
    parser.add_argument("--ccn-source-rows", type=int, default=20000,
                        help="--neural, ccn-transfer: the rows (the first ones) CCN is fitted on before transfer(X)")
    parser.add_argument("--c2m-params", type=json.loads, default={},
                        help="--neural --methods c2m: C2MCluster parameters as JSON")
    parser.add_argument("--c2m-encoder-epochs", type=int, default=40,
                        help="--neural --methods c2m: epochs of C2M's neighbour encoder (its _neighbour_epochs)")
    parser.add_argument("--c2m-source-rows", type=int, default=20000,
                        help="--neural --methods c2m-transfer: rows of the source fit (in memory)")
    parser.add_argument("--cell", default=None, help=argparse.SUPPRESS)
    _common.add_name_argument(parser, "scaling")
    argv = sys.argv[1:]
    if "--neural" in argv:  # the neural data's own defaults, unless given
        for flag, value in (("--n", "1e6"), ("--d", "784"), ("--std", "0.3"), ("--seeds", "0")):
            if flag not in argv:
                argv += [flag, value]
    args = _common.setup(parser.parse_args(argv))
    if args.cell:
        print(_MARK + json.dumps(cell(json.loads(args.cell))), flush=True)
        return
    if args.neural:
        main_neural(args)
        return
    if args.smoke:
        args.n, args.seeds = 20000, [0]
    args.n = int(args.n)
    if args.name == _common.CANONICAL["scaling"]:
        args.name = "memmap_fit"
    rows, agreement = [], []
    with tempfile.TemporaryDirectory(dir=os.environ.get("SKTC_MEMMAP_DIR")) as tmp:
        folder = Path(tmp)
        write_blobs(folder, args.n, args.d, args.k, args.std)
        for seed in args.seeds:
            job = {"folder": tmp, "seed": seed, "k": args.k}
            ours = run_cell({**job, "method": "SinkhornKMeans-minibatch"})
            rows.append(ours)
            if not args.no_peer:
                rows.append(run_cell({**job, "method": "MiniBatchKMeans", "passes": int(ours["passes"])}))
            if not args.no_full:
                rows.append(run_cell({**job, "method": "SinkhornKMeans-full"}))
                from sklearn.metrics import adjusted_rand_score

                agreement.append(float(adjusted_rand_score(
                    np.load(folder / f"labels_SinkhornKMeans-minibatch_{seed}.npy"),
                    np.load(folder / f"labels_SinkhornKMeans-full_{seed}.npy"))))
    _common.write("scaling", args.name, {"rows": rows, "agreement": agreement, "n": args.n, "d": args.d,
                                         "k": args.k, "std": args.std}, markdown(rows, args, agreement))


if __name__ == "__main__":
    main()
