"""One entry point for every quality benchmark: each paper's protocol and the
digits cross-task, each beside its peers.

    python benchmarks/quality.py [--quick] [--only sinkhorn_kmeans tdcm ...]

Runs the per-method scripts beside this file in turn (each writes its own JSON
and markdown into ``benchmarks/results/``), then gathers their markdown into
``benchmarks/results/quality.md``.
"""

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# name -> (script, result file stem written by it)
SCRIPTS = {
    "sinkhorn_kmeans": ("sinkhorn_kmeans_quality.py", "sinkhorn_kmeans_digits"),
    "tdcm": ("tdcm_quality.py", "tdcm_quality"),
    "ccn": ("ccn_quality.py", "ccn_quality"),
    "c2m": ("c2m_quality.py", "c2m_quality"),
    "precise_gan": ("precise_gan_quality.py", "precise_gan_quality"),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="pass --quick to every script")
    parser.add_argument("--only", nargs="+", choices=sorted(SCRIPTS), default=None)
    args = parser.parse_args()
    sections = []
    for name in args.only or SCRIPTS:
        script, stem = SCRIPTS[name]
        if not (HERE / script).exists():
            print(f"skipping {name}: {script} is not in this checkout", file=sys.stderr)
            continue
        cmd = [sys.executable, script] + (["--quick"] if args.quick else [])
        print(f"== {' '.join(cmd[1:])}", flush=True)
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=HERE, check=True)
        suffix = "_quick" if args.quick else ""  # every script writes *_quick on a smoke run
        md = (HERE / "results" / f"{stem}{suffix}.md").read_text()
        sections.append(f"## {name} ({time.perf_counter() - t0:.0f} s)\n\n{md}")
    out = HERE / "results" / ("quality_quick.md" if args.quick else "quality.md")
    out.write_text("# Quality benchmarks\n\n" + "\n\n".join(sections))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
