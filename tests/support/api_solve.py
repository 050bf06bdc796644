"""A solve through the Python API, from a sweep given as a mapping (no file on disk):
``python -m tests.support.api_solve ADDRESS`` in the directory whose ``mlflow.db`` it logs to.
tests/integration/test_solve_e2e.py stops it with Ctrl-C and resumes it with the CLI, which
reads the sweep from the copy the solve kept. Progress goes to stderr through the library's
logger, as a notebook with ``logging.basicConfig`` sees it; Ctrl-C is exit 1, as the CLI's."""

from __future__ import annotations

import logging
import sys

import yaml

import scalesweep
from tests.unit.test_solve import QUADRATIC


def main(address: str) -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")
    study = scalesweep.load(yaml.safe_load(QUADRATIC))
    try:
        scalesweep.solve(study, world_size=4, budget=64, candidates=1, address=address,
                         tracking_uri="sqlite:///mlflow.db", report=False)
    except KeyboardInterrupt:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
