"""The main job, end to end: ``sktransfer-cluster compare``."""

import json

import numpy as np
import pytest

from sktransfer_cluster import SinkhornKMeans, cli
from sktransfer_cluster.cli import METHODS, main


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare")
    return out, main(["compare", "--quick", "--out", str(out)])


def test_quick_compare_exits_zero(quick_run):
    assert quick_run[1] == 0


def test_quick_compare_prints_one_table_with_every_method_and_baseline(quick_run, capsys):
    out, _ = quick_run
    table = (out / "results.md").read_text()
    header = table.splitlines()[0]
    for column in ("task", "method", "K", "ACC", "NMI", "ARI", "fit s", "transfer s"):
        assert f" {column} |" in header
    for name in [*METHODS, "KMeans (on target)", "GaussianMixture (on target)"]:
        assert table.count(f"| {name} |") == 2  # digits and the TDCM shift task


def test_quick_compare_writes_json_and_figures(quick_run):
    out, _ = quick_run
    rows = json.loads((out / "results.json").read_text())
    assert {r["task"] for r in rows} == {"digits", "tdcm-shift-k5"}
    assert all(0.0 <= r["acc"] <= 1.0 for r in rows)
    pytest.importorskip("matplotlib")
    assert sorted(p.name for p in out.glob("*.png")) == [
        "clusters_digits.png",
        "clusters_tdcm-shift-k5.png",
        "scores_digits.png",
        "scores_tdcm-shift-k5.png",
    ]


def test_compare_reads_a_user_npz_file(tmp_path, capsys):
    rng = np.random.default_rng(0)
    Xs = np.concatenate([rng.normal(0, 0.3, (30, 2)), rng.normal(3, 0.3, (30, 2))])
    ys = np.repeat([0, 1], 30)
    path = tmp_path / "task.npz"
    np.savez(path, X_source=Xs, y_source=ys, X_target=Xs + 1.0, y_target=ys)
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
    tmp_path, monkeypatch
):
    rng = np.random.default_rng(0)
    Xs = np.concatenate([rng.normal(0, 0.3, (20, 2)), rng.normal(3, 0.3, (20, 2))])
    ys = np.repeat([0, 1], 20)
    path = tmp_path / "task.npz"
    np.savez(path, X_source=Xs, y_source=ys, X_target=Xs + 1.0, y_target=ys)
    monkeypatch.setattr(_RecordsLabels, "received", [])

    def factory(cls):
        return lambda k, seed, device, scale, n_features: cls(k, n_init=1, random_state=seed, device=device)

    monkeypatch.setattr(cli, "METHODS", {"free": factory(_RecordsLabels), "needs": factory(_NeedsLabels)})
    rows, _ = cli.compare([str(path)], ["free", "needs"], progress=False)
    assert _RecordsLabels.received == [("_RecordsLabels", False), ("_NeedsLabels", True)]
    assert [r.method for r in rows][:2] == ["free", "needs"]


def test_methods_registry_holds_only_factories():
    # Whether a method needs labels is not kept here: it is read from the estimator's tags.
    assert all(callable(factory) for factory in METHODS.values())


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--methods", "NoSuchMethod"], "unknown method(s) NoSuchMethod"),
        (["--data", "mnist-from-the-moon"], "unknown task 'mnist-from-the-moon'"),
        (["--device", "cuda:99"], "device"),
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
