"""Helpers shared by the benchmark scripts: machine description and result files."""

import json
import os
import platform
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


def machine():
    import torch

    return {
        "date": time.strftime("%Y-%m-%d"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "processor": platform.processor() or platform.machine(),
    }


def summary(values):
    v = np.asarray(values, dtype=float)
    return {"median": float(np.median(v)), "min": float(v.min()), "max": float(v.max())}


def write(name, payload, markdown, quick=False):
    """Write ``name``.json and ``name``.md under results/ (``name``_quick.* for a smoke run,
    so that it never overwrites the full results)."""
    name += "_quick" if quick else ""
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {"machine": machine(), **payload}
    (RESULTS / f"{name}.json").write_text(json.dumps(payload, indent=2))
    m = payload["machine"]
    header = (
        f"Measured {m['date']} on {m['cpu_count']} CPU cores ({m['processor']}), "
        f"torch {m['torch']} with {m['torch_threads']} threads.\n\n"
    )
    (RESULTS / f"{name}.md").write_text(header + markdown + "\n")
    print(header + markdown)
