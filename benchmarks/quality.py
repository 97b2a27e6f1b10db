"""One entry point for every quality benchmark: each paper's protocol and the
digits cross-task, each beside its peers.

    python benchmarks/quality.py [--quick | --smoke] [--only sinkhorn_kmeans tdcm ...]

Canonical run: ``python benchmarks/quality.py`` (each script's canonical file, then the summary).

Runs the per-method scripts beside this file in turn (each writes its own JSON
and markdown into its method folder, ``benchmarks/results/<method>/``: the
canonical file on a full run, ``variants/<name>_quick.*`` with ``--quick``), then
gathers their markdown into ``benchmarks/results/quality.md``
(``quality_quick.md`` with ``--quick``). ``--smoke`` runs only ``sinkhorn_kmeans_quality.py
--smoke`` (unless ``--only`` says otherwise: every script's own smoke run is in ``.ci/run``'s
loop already) and writes everything under one temporary folder.
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _common  # noqa: E402
from _common import result_stem  # noqa: E402

# method folder under results/ -> script (each writes results/<method>/<canonical name>.*)
SCRIPTS = {
    "sinkhorn_kmeans": "sinkhorn_kmeans_quality.py",
    "tdcm": "tdcm_quality.py",
    "ccn": "ccn_quality.py",
    "c2m": "c2m_quality.py",
    "precise_gan": "precise_gan_quality.py",
}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="pass --quick to every script")
    parser.add_argument("--only", nargs="+", choices=sorted(SCRIPTS), default=None)
    _common.add_smoke_argument(parser)
    args = _common.setup(parser.parse_args())
    env = dict(os.environ)
    if args.smoke:  # the children write into this run's temporary folder, where it reads them
        env["SKTC_BENCH_SMOKE_RESULTS"] = str(_common.RESULTS)
        args.only = args.only or ["sinkhorn_kmeans"]
    sections = []
    for method in args.only or SCRIPTS:
        script = SCRIPTS[method]
        if not (HERE / script).exists():
            print(f"skipping {method}: {script} is not in this checkout", file=sys.stderr)
            continue
        cmd = [sys.executable, script] + (["--smoke"] if args.smoke else ["--quick"] if args.quick else [])
        print(f"== {' '.join(cmd[1:])}", flush=True)
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=HERE, check=True, env=env)
        stem = result_stem(method, quick=args.quick)
        md = stem.parent.joinpath(stem.name + ".md").read_text()
        rel = stem.relative_to(_common.RESULTS) if stem.is_relative_to(_common.RESULTS) else stem
        sections.append(f"## {method} ({time.perf_counter() - t0:.0f} s; `{rel}.md`)\n\n{md}")
    out = _common.RESULTS / ("quality_quick.md" if args.quick else "quality.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("# Quality benchmarks\n\n" + "\n\n".join(sections))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
