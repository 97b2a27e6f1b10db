"""``python -m sktransfer_cluster compare`` runs the main job (see :mod:`sktransfer_cluster.cli`)."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
