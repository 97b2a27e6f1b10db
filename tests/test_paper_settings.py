"""docs/paper_settings.md is true to the code: every PAPER_PARAMS entry is in its table."""

import importlib
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "paper_settings.md"
MODULES = {
    "sinkhorn_kmeans": "SinkhornKMeans",
    "tdcm": "TDCMCluster",
    "ccn": "CCNCluster",
    "c2m": "C2MCluster",
    "precise_gan": "PreciseFeatureGAN",
}


def _section(cls_name):
    text = DOC.read_text()
    match = re.search(rf"^## {cls_name}\b.*?(?=^## |\Z)", text, flags=re.S | re.M)
    assert match, f"no section for {cls_name} in {DOC.name}"
    return match.group(0)


@pytest.mark.parametrize("module, cls_name", MODULES.items())
def test_every_paper_setting_and_default_is_in_the_docs_table(module, cls_name):
    mod = importlib.import_module(f"sktransfer_cluster.cluster.{module}")
    defaults = getattr(mod, cls_name)().get_params()
    section = _section(cls_name)
    rows = {line.split("|")[1].strip(" `") for line in section.splitlines() if line.startswith("| `")}
    assert rows == set(mod.PAPER_PARAMS), "the table lists exactly the PAPER_PARAMS keys"
    for key, value in mod.PAPER_PARAMS.items():
        assert f"| `{key}` | `{value!r}` | `{defaults[key]!r}` |" in section, key


@pytest.mark.parametrize("module, cls_name", MODULES.items())
def test_paper_params_are_valid_parameters(module, cls_name):
    mod = importlib.import_module(f"sktransfer_cluster.cluster.{module}")
    est = getattr(mod, cls_name)(**mod.PAPER_PARAMS)
    est._validate_params()
    assert {k: est.get_params()[k] for k in mod.PAPER_PARAMS} == mod.PAPER_PARAMS
