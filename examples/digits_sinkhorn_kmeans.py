"""SinkhornKMeans on the bundled digits, beside KMeans.

Fits both on all 1,797 images (10 classes) and prints ACC / NMI, then shows
transfer: learn on digits 0-4, cluster digits 5-9 from the source model.

    python examples/digits_sinkhorn_kmeans.py [--embedding] [--seed 0]
"""

import argparse
import time

from sklearn.cluster import KMeans
from sklearn.datasets import load_digits
from sklearn.metrics import normalized_mutual_info_score as nmi

from sktransfer_cluster import SinkhornKMeans, clustering_accuracy
from sktransfer_cluster.datasets import load_digits_transfer


def row(name, y, labels, seconds):
    print(f"{name:<34} ACC={clustering_accuracy(y, labels):.3f}  NMI={nmi(y, labels):.3f}  ({seconds:.1f}s)")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--embedding", action="store_true", help="also run the autoencoder variant (~1 min)")
    args = parser.parse_args()

    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    print("Digits, 10 clusters")
    models = {
        "KMeans(n_init=10)": KMeans(10, n_init=10, random_state=args.seed),
        "SinkhornKMeans": SinkhornKMeans(10, random_state=args.seed),
    }
    if args.embedding:
        models["SinkhornKMeans(autoencoder)"] = SinkhornKMeans(
            10, embedding="autoencoder", hidden_dims=(500, 250, 10), pretrain_epochs=100, max_epochs=100,
            random_state=args.seed,
        )
    for name, model in models.items():
        t0 = time.perf_counter()
        labels = model.fit_predict(X)
        row(name, y, labels, time.perf_counter() - t0)

    task = load_digits_transfer()
    print("\nTransfer: fit on digits 0-4, cluster digits 5-9")
    t0 = time.perf_counter()
    model = SinkhornKMeans(5, random_state=args.seed).fit(task.X_source)
    labels = model.transfer(task.X_target)
    row("SinkhornKMeans 0-4 -> 5-9", task.y_target, labels, time.perf_counter() - t0)
    t0 = time.perf_counter()
    labels = KMeans(5, n_init=10, random_state=args.seed).fit_predict(task.X_target)
    row("KMeans fitted on 5-9", task.y_target, labels, time.perf_counter() - t0)


if __name__ == "__main__":
    main()
