"""One Ray Train run per worker count P, shared by the integration tests that need P gloo workers.

A Ray Train run costs ~10 CPU-s of helper actors (controller, placement group cleaner,
synchronization actor) and ~5.5 CPU-s per worker process (importing torch and ray.train),
whatever it trains, and the jobs here train for seconds: on CI's 2 cores the start-ups were
most of these tests' Ray side. So the tests
that train on P workers (tests/integration/test_equivalence_ddp.py, test_uneven_ranks.py,
test_loop_helpers_ray.py, test_precision.py) do not each start a run: at import, each test
module registers its *jobs* here (a name, a module-level worker function and its config), and
the first test that asks for the outputs of a job of P workers runs every registered job of P
in turn in ONE ``LeanTorchTrainer`` fit of P workers (one CPU each, gloo). The outputs stay on
disk for the session (a job's directory: ``config["out"]``); each test then reads its own and
asserts on them as if it had started the run itself.

Each P that any job uses is a run of its own (the start-up above, ~21 CPU-s at P = 2, ~32 at
P = 4): register a new job at a P that already runs (2 and 4 today) unless its claim needs
another. (An odd P, for one, is a gloo group's without Ray: tests/integration/test_uneven_ranks.py.)

* A job that raises fails only its own test, with its workers' tracebacks; the other jobs of the
  run go on. (A job that raises on some ranks only, between collectives, can leave the others
  waiting or out of step for the jobs after it: the test timeout then ends the session's run.)
* Between jobs each worker puts back what a job may change in its process: torch's default
  dtype and thread count, the torch, ``random`` and numpy RNGs.
* Only the jobs of modules with selected tests run (``-k precision`` does not train the
  equivalence cases); a run that fails outright fails every test of its P, and is not repeated.
* The worker functions travel by value (``ray.cloudpickle.register_pickle_by_value``): the
  workers need not import the test modules, nor what they import (Tune, for one).

The cache lives in the session's ``config.stash``, not in a session fixture: a fixture imported
into several test modules is one fixture per module, each set up once.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import ray.cloudpickle

# this module's worker function travels by value too: the workers need not import pytest
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

#: a job's worker function: it gets its config, with ``out``, its own directory, added
WorkerFn = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Job:
    name: str  # unique among the jobs of its P: the name of its directory
    fn: WorkerFn  # module-level, in the test module that registers it
    config: dict[str, Any]


#: the registry, by P, in registration order (the order the run trains them in)
JOBS: dict[int, dict[str, Job]] = {}


def register(physical: int, name: str, fn: WorkerFn, config: dict[str, Any]) -> None:
    """Add a job to the run of ``physical`` workers; call it when the test module is imported,
    before any test asks for outputs."""
    jobs = JOBS.setdefault(physical, {})
    if name in jobs:
        raise ValueError(f"a job named {name!r} already runs on {physical} workers")
    ray.cloudpickle.register_pickle_by_value(sys.modules[fn.__module__])
    jobs[name] = Job(name, fn, config)


def outputs(request: pytest.FixtureRequest, physical: int, name: str) -> Path:
    """The directory of job ``name``'s outputs, after the session's run of ``physical`` workers
    (started here if no test has asked for it yet: the caller must be joined to a Ray, e.g.
    through the ``ray_cluster`` fixture). Fails the test if the job raised on any worker."""
    groups = request.config.stash.get(_GROUPS, None)
    if groups is None:
        factory: pytest.TempPathFactory = request.getfixturevalue("tmp_path_factory")
        items = request.session.items
        modules = {item.module.__name__ for item in items if isinstance(item, pytest.Function)}
        groups = request.config.stash[_GROUPS] = _Groups(factory.mktemp("ddp_groups"), modules)
    return groups.outputs(physical, name)


class _Groups:
    """The session's runs, by P: each one's failure (None: it finished), made on first need."""

    def __init__(self, root: Path, modules: set[str]) -> None:
        self.root, self.modules = root, modules
        self.runs: dict[int, tuple[list[str], str | None]] = {}

    def outputs(self, physical: int, name: str) -> Path:
        if physical not in self.runs:
            self.runs[physical] = self._fit(physical)
        names, failure = self.runs[physical]
        if name not in names:
            raise KeyError(f"no job {name!r} was registered for {physical} workers (or its module "
                           f"has no selected test): {sorted(JOBS.get(physical, {}))}")
        if failure is not None:
            pytest.fail(f"the Ray Train run of {physical} workers ({', '.join(names)}) failed:\n"
                        f"{failure}", pytrace=False)
        out = self.root / f"p{physical}" / name
        statuses = []
        for rank in range(physical):
            status = out / f"status-rank{rank}.json"
            if not status.exists():
                pytest.fail(f"job {name}: rank {rank} of {physical} did not finish it", pytrace=False)
            statuses.append(json.loads(status.read_text()))
        errors: dict[str, list[int]] = {}
        for rank, status in enumerate(statuses):
            if status["error"] is not None:
                errors.setdefault(status["error"], []).append(rank)
        if errors:
            pytest.fail(f"job {name} raised on its workers:\n" + "\n".join(
                f"rank(s) {ranks}:\n{error}" for error, ranks in errors.items()), pytrace=False)
        print(f"\n{name}: {statuses[0]['seconds']:.1f} s of the Ray Train run of {physical} workers "
              f"shared with {', '.join(n for n in names if n != name) or 'no other job'}")
        return out

    def _fit(self, physical: int) -> tuple[list[str], str | None]:
        import traceback

        from ray.train.torch import TorchConfig
        from ray.train.v2.api.config import RunConfig, ScalingConfig

        from scalesweep.trainables.ray_train.lean_trainer import LeanTorchTrainer

        jobs = [job for job in JOBS.get(physical, {}).values() if job.fn.__module__ in self.modules]
        root = self.root / f"p{physical}"
        planned = []
        for job in jobs:
            (root / job.name).mkdir(parents=True)
            planned.append({"fn": job.fn, "config": {**job.config, "out": str(root / job.name)}})
        started = time.perf_counter()
        try:
            LeanTorchTrainer(
                _run_jobs,
                train_loop_config={"jobs": planned},
                scaling_config=ScalingConfig(num_workers=physical, resources_per_worker={"CPU": 1}),
                torch_config=TorchConfig(backend="gloo"),
                run_config=RunConfig(name=f"ddp-group-p{physical}", storage_path=str(root / "ray")),
            ).fit()
        except Exception:
            return [job.name for job in jobs], traceback.format_exc()
        print(f"\nRay Train P={physical}: {len(jobs)} job(s) in one run: "
              f"{time.perf_counter() - started:.1f} s")
        return [job.name for job in jobs], None


_GROUPS = pytest.StashKey[_Groups]()


def _run_jobs(config: dict[str, Any]) -> None:
    """Ray Train's worker function: every job in turn; each rank writes, per job,
    ``status-rank<r>.json``: its seconds and its traceback (None if it did not raise)."""
    import random
    import traceback

    import numpy as np
    import ray.train
    import torch

    rank = ray.train.get_context().get_world_rank()
    for job in config["jobs"]:
        saved = (torch.get_default_dtype(), torch.get_num_threads(), torch.get_rng_state(),
                 random.getstate(), np.random.get_state())  # fmt: skip
        started, error = time.perf_counter(), None
        try:
            job["fn"](job["config"])
        except Exception:
            error = traceback.format_exc()
        finally:
            # the next job starts from the process as Ray Train made it
            torch.set_default_dtype(saved[0])
            torch.set_num_threads(saved[1])
            torch.set_rng_state(saved[2])
            random.setstate(saved[3])
            np.random.set_state(saved[4])
        status = {"seconds": time.perf_counter() - started, "error": error}
        Path(job["config"]["out"], f"status-rank{rank}.json").write_text(json.dumps(status))
