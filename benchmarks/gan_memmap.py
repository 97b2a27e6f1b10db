"""PreciseFeatureGAN fitted (and transferred) on a memory-mapped array (issue 31, item 1).

    python benchmarks/gan_memmap.py [--n 1000000] [--d 784] [--k 10] [--std 0.3] [--seeds 0]
        [--n-iter 2000] [--representation-epochs 1] [--representation {auto,none}] [--source-rows 20000]
        [--landmarks M]
        [--cells fit transfer peer] [--name NAME] [--smoke]

Writes ``--n`` x ``--d`` float32 non-negative blob rows to a ``.npy`` file in a temporary
folder (the data of ``memmap_fit.py --neural``: ``--k`` sparse centres, normal noise of
standard deviation ``--std`` clipped at 0, so rows hold zeros and the graph is cosine, as
for images), then measures in a fresh process per cell, one thread, each cell's CPU seconds
(``process_time``) and the growth of its peak resident set over the call (``VmHWM`` reset
before it; file pages mapped by reading the memmap count):

* ``GAN-fit``: ``PreciseFeatureGAN(K)`` at its defaults but ``n_iter=--n-iter`` and
  ``representation_epochs=--representation-epochs`` fitted on the memmap
  (``np.load(mmap_mode="r")``); past ``representation.LANDMARK_ROWS`` rows its encoder
  trains on the landmarks' graph, every row's code is computed chunk by chunk and the GAN
  trains on the ``n x 10`` codes. Then ``predict`` of the memmap, measured the same way.
* ``GAN-transfer``: the same estimator fitted (before the measurement, in memory) on the
  first ``--source-rows`` rows, then ``transfer`` on the whole memmap (the encoder refined
  on the target's landmarks, the GAN fine-tuned on its codes, ``transfer_iter`` at its
  default ``n_iter // 4``).
* ``--representation none``: the same cells with ``representation=None``: the GAN on the
  standardised rows themselves, each generator step reading its critic's real rows by index.
* ``MiniBatchKMeans-defaults``: ``MiniBatchKMeans(K, batch_size=8192)`` at its other
  defaults on the same memmap, the peer, in the same run.

ARI against the blobs' labels. Goal (issue 31): peak RSS growth <= 1 GiB at 10^6 x 784.
The peak does not depend on ``--representation-epochs`` or ``--n-iter`` (every encoder
epoch runs the same steps on the same landmarks, every GAN step the same minibatch sizes);
only the CPU time does.
"""

import argparse
import json
import os
import tempfile
from pathlib import Path

import _common
import numpy as np
import memmap_fit
from memmap_fit import open_job, write_nonnegative_blobs

HERE = Path(__file__).resolve().parent
_MARK = "SKTC-GAN-MEMMAP "


def cell(job):
    """One measurement in this (fresh) process."""
    import torch
    from sklearn.cluster import MiniBatchKMeans
    from sklearn.metrics import adjusted_rand_score

    from sktransfer_cluster import PreciseFeatureGAN

    method, seed, k = job["method"], job["seed"], job["k"]
    X, y = open_job(job)
    out = {"method": method, "seed": seed}
    if method == "MiniBatchKMeans-defaults":
        est = MiniBatchKMeans(k, batch_size=8192, random_state=seed)
        torch.ones(8, 8) @ torch.ones(8, 8)
        est, cpu, wall, peak = _common.measured(lambda: est.fit(X))
        labels = est.labels_
    else:
        representation = None if job.get("representation", "auto") == "none" else "auto"
        gan = PreciseFeatureGAN(k, n_iter=job["n_iter"], representation_epochs=job["representation_epochs"],
                                representation=representation, random_state=seed, device="cpu")
        if method == "GAN-transfer":
            # The source: the first rows, in memory, fitted before the measurement.
            gan.fit(np.array(X[: job["source_rows"]]))
            torch.ones(8, 8) @ torch.ones(8, 8)
            labels, cpu, wall, peak = _common.measured(lambda: gan.transfer(X))
        else:
            torch.ones(8, 8) @ torch.ones(8, 8)
            gan, cpu, wall, peak = _common.measured(lambda: gan.fit(X))
            labels = gan.labels_
            predicted, p_cpu, p_wall, p_peak = _common.measured(lambda: gan.predict(X))
            out.update(predict_cpu_s=p_cpu, predict_peak_extra_mib=p_peak / 2**20,
                       predict_equals_labels=bool(np.array_equal(predicted, labels)))
    out.update(cpu_s=cpu, wall_s=wall, peak_extra_mib=peak / 2**20, ari=float(adjusted_rand_score(y, labels)),
               n_labels=int(np.unique(labels).shape[0]))
    return out


def run_cell(job):
    return memmap_fit.run_cell(job, "gan_memmap.py", _MARK)


def markdown(rows, args):
    from sktransfer_cluster.representation import LANDMARK_ROWS

    landmarks = args.landmarks or LANDMARK_ROWS
    md = [(f"{args.n:,} x {args.d} float32 non-negative blob rows (K = {args.k}, noise std {args.std}), a `.npy` "
           f"memmap of {args.n * args.d * 4 / 2**20:,.0f} MiB; one fresh process per cell, 1 thread; "
           f"PreciseFeatureGAN(K) at its defaults but n_iter={args.n_iter}, "
           + ("representation=None (the GAN on the rows, real minibatches read by index); " if args.representation == "none"
              else f"representation_epochs={args.representation_epochs}; ")
           + f"landmarks min(n, {landmarks:,}); transfer after a "
           f"fit (in memory) on the first {args.source_rows:,} rows."), "",
          "| method | seed | CPU s | peak RSS growth MiB | ARI | labels | predict CPU s | predict peak MiB |",
          "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        pred = (f"{r['predict_cpu_s']:.1f} | {r['predict_peak_extra_mib']:.0f}" if "predict_cpu_s" in r else "- | -")
        md.append(f"| {r['method']} | {r['seed']} | {r['cpu_s']:.1f} | {r['peak_extra_mib']:.0f} | {r['ari']:.4f} | "
                  f"{r['n_labels']} | {pred} |")
    return "\n".join(md)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=float, default=1e6)
    parser.add_argument("--d", type=int, default=784)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--std", type=float, default=0.3)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--n-iter", type=int, default=2000, help="PreciseFeatureGAN's n_iter")
    parser.add_argument("--representation-epochs", type=int, default=1, help="PreciseFeatureGAN's representation_epochs")
    parser.add_argument("--representation", choices=["auto", "none"], default="auto",
                        help="PreciseFeatureGAN's representation ('none': the GAN on the rows, read by index)")
    parser.add_argument("--source-rows", type=int, default=20000, help="rows of the in-memory source before transfer")
    parser.add_argument("--landmarks", type=int, default=None,
                        help="representation.LANDMARK_ROWS for the cells (default: the package's)")
    parser.add_argument("--cells", nargs="+", choices=["fit", "transfer", "peer"], default=["fit", "transfer", "peer"])
    parser.add_argument("--cell", default=None, help=argparse.SUPPRESS)
    _common.add_name_argument(parser, "precise_gan")
    args = _common.setup(parser.parse_args())
    if args.cell:
        print(_MARK + json.dumps(cell(json.loads(args.cell))), flush=True)
        return
    if args.smoke:
        args.n, args.d, args.k, args.seeds, args.landmarks = 3000, 64, 4, [0], 1000
        args.n_iter, args.representation_epochs, args.source_rows = 5, 1, 500
    args.n = int(args.n)
    if args.name == _common.CANONICAL["precise_gan"]:
        args.name = "gan_memmap"
    rows = []
    with tempfile.TemporaryDirectory(dir=os.environ.get("SKTC_MEMMAP_DIR")) as tmp:
        write_nonnegative_blobs(Path(tmp), args.n, args.d, args.k, args.std)
        for seed in args.seeds:
            job = {"folder": tmp, "seed": seed, "k": args.k, "n_iter": args.n_iter, "landmarks": args.landmarks,
                   "representation_epochs": args.representation_epochs, "source_rows": args.source_rows,
                   "representation": args.representation}
            for name, method in (("fit", "GAN-fit"), ("transfer", "GAN-transfer"), ("peer", "MiniBatchKMeans-defaults")):
                if name in args.cells:
                    rows.append(run_cell({**job, "method": method}))
    _common.write("precise_gan", args.name, {"rows": rows, **{k: v for k, v in vars(args).items() if k != "cell"},
                                             "code": _common.code_state()}, markdown(rows, args))


if __name__ == "__main__":
    main()
