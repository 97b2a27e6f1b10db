"""Speed and memory of every estimator beside KMeans, measured in one run.

    python benchmarks/speed.py [--quick] [--threads 2] [--name NAME]

* fit time on a 2,000 x 10 blobs source and predict throughput on 10^5 rows,
  each as a ratio to ``KMeans(n_init=10)`` measured in the same run;
* extra peak memory of ``predict`` on 10^6 x 64 float32 (the goal is < 1 GiB),
  each in a fresh subprocess reading the kernel's peak-RSS counter;
* our Sinkhorn against POT, run from ``sinkhorn_speed.py`` (``--no-sinkhorn`` skips it).

Writes benchmarks/results/speed/speed.{json,md} (another ``--name``, or ``--quick``, goes to
``speed/variants/``). Whether ``fit`` gets the labels is read from each estimator's tags.
"""

import argparse
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from _common import add_name_argument, fit_source, write
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

import sktransfer_cluster as stc

_PEAK_SCRIPT = r"""
import pickle, sys, numpy as np
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
model = pickle.load(open(sys.argv[1], "rb"))
X = np.random.default_rng(0).normal(size=(1_000_000, 64)).astype(np.float32)
model.predict(X[:10])  # warm up lazy imports and torch's allocator
open("/proc/self/clear_refs", "w").write("5")  # reset the peak-RSS counter
before = status("VmRSS:")
model.predict(X)
print(status("VmHWM:") - before)
"""


def estimators(quick):
    scale = 0.2 if quick else 1.0
    e = max(1, int(20 * scale))
    return {
        "SinkhornKMeans": stc.SinkhornKMeans(10, random_state=0, device="cpu"),
        "SinkhornKMeans-AE": stc.SinkhornKMeans(
            10, embedding="autoencoder", pretrain_epochs=e, max_epochs=e, random_state=0, device="cpu"
        ),
        "TDCMCluster": stc.TDCMCluster(10, max_epochs=e, random_state=0, device="cpu"),
        "CCNCluster": stc.CCNCluster(
            10, similarity_epochs=e // 2 or 1, clustering_epochs=e, random_state=0, device="cpu"
        ),
    }


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def peak_extra_bytes(model, d):
    src_X = np.random.default_rng(1).normal(size=(500, d)).astype(np.float32)
    y = np.arange(500) % 10
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.pkl"
        fitted = fit_source(model, src_X, y)
        path.write_bytes(pickle.dumps(fitted))
        res = subprocess.run([sys.executable, "-c", _PEAK_SCRIPT, str(path)], capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"the peak-memory subprocess failed (status {res.returncode}):\n{res.stderr}")
    return int(res.stdout.strip())


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-sinkhorn", action="store_true", help="skip the Sinkhorn-vs-POT part")
    add_name_argument(parser, "speed")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if not args.no_sinkhorn:
        here = Path(__file__).resolve().parent
        cmd = [sys.executable, "sinkhorn_speed.py", "--threads", str(args.threads)]
        cmd += ["--quick"] if args.quick else []
        subprocess.run(cmd, cwd=here, check=True)
    X, y = make_blobs(n_samples=2000, centers=10, n_features=10, random_state=0)
    X_pred = np.concatenate([X] * 50)  # 10^5 rows
    t_km_fit, km = timed(lambda: KMeans(10, n_init=10, random_state=0).fit(X))
    t_km_pred, _ = timed(lambda: km.predict(X_pred))
    rows = []
    for name, est in estimators(args.quick).items():
        t_fit, _ = timed(lambda: fit_source(est, X, y))
        t_pred, _ = timed(lambda: est.predict(X_pred))
        peak = peak_extra_bytes(est.set_params(), 64)
        rows.append(
            {
                "method": name,
                "fit_s": t_fit,
                "fit_ratio_vs_kmeans": t_fit / t_km_fit,
                "predict_rows_per_s": X_pred.shape[0] / t_pred,
                "predict_ratio_vs_kmeans": t_pred / t_km_pred,
                "predict_1e6x64_peak_extra_mib": peak / 2**20,
            }
        )
        print(rows[-1], flush=True)
    md = [
        f"KMeans(n_init=10): fit {t_km_fit:.3f} s on 2,000 x 10; predict {X_pred.shape[0] / t_km_pred:,.0f} rows/s.",
        "",
        "| method | fit s | fit / KMeans | predict rows/s | predict time / KMeans | predict 10^6 x 64 float32: extra peak MiB |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        md.append(
            f"| {r['method']} | {r['fit_s']:.2f} | {r['fit_ratio_vs_kmeans']:.0f}x | {r['predict_rows_per_s']:,.0f} | "
            f"{r['predict_ratio_vs_kmeans']:.1f}x | {r['predict_1e6x64_peak_extra_mib']:.0f} |"
        )
    write(
        "speed",
        args.name,
        {"kmeans_fit_s": t_km_fit, "kmeans_predict_s": t_km_pred, "results": rows},
        "\n".join(md),
        quick=args.quick,
    )


if __name__ == "__main__":
    main()
