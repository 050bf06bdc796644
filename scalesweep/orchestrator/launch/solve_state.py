"""What `scalesweep solve` keeps on disk as it goes, so `scalesweep resume` can continue a
solve whose driver died (docs/solve.md, "Resume and Ctrl-C").

Two files in the search's state directory ``<storage>/<study>-solve-<parent[:8]>``:

* ``solve.json``: how the solve was started (the sweep, its overrides, the world size, the
  budget and space, the search seed, the tracking URI, the search's MLflow parent run and its
  experiment), written once before the first trial starts;
* ``solve.journal.jsonl``: one line per baseline seed or candidate that *finished*, with its
  row identity and its evals, appended and flushed as it ends. A driver killed mid-write
  leaves at most a torn last line, which reading passes over: the trial is run again.

Nothing here imports Ray: the warm start of the search (:func:`warm_start`) is assembled from
the journal alone, and tested without a cluster.
"""

from __future__ import annotations

import glob
import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scalesweep.mlflow_names import STATUS_TAG
from scalesweep.orchestrator.spec.errors import InputError, Problem
from scalesweep.orchestrator.tracking import atomic_file

SOLVE_STATE = "solve.json"
SOLVE_JOURNAL = "solve.journal.jsonl"
#: a candidate's name is c<number>-<its row's name> (SolvePlan.candidate_row)
_CANDIDATE = re.compile(r"^c(\d+)-")


@dataclass(frozen=True)
class Finished:
    """One journal line: a baseline seed (``lr_factor`` None) or a candidate that finished."""

    name: str
    seed: int
    lr_factor: float | None
    warmup: int | None
    status: str
    evals: list[dict[str, Any]]

    @property
    def is_candidate(self) -> bool:
        return self.lr_factor is not None

    @property
    def point(self) -> tuple[float, int] | None:
        """A candidate's (lr factor, warmup); None for a baseline seed."""
        if self.lr_factor is None or self.warmup is None:
            return None
        return self.lr_factor, self.warmup

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "seed": self.seed, "lr_factor": self.lr_factor,
                "warmup": self.warmup, STATUS_TAG: self.status, "evals": self.evals}


def trial_epochs(evals: Iterable[Mapping[str, Any]]) -> float:
    """The epochs a trial trained, as the budget counts them: its last eval's epoch."""
    return max((float(e.get("epoch", 0.0)) for e in evals), default=0.0)


def killed_epochs(epochs_by_run: Mapping[str, float], journal: Iterable[Finished]) -> float:
    """The trial-epochs of the candidates a dead driver had running: each child run's last
    logged epoch (``epochs_by_run``, by run name), for the candidates the journal does not
    hold. They were spent, though those candidates run again."""
    done = {f.name for f in journal}
    return sum(epochs for name, epochs in epochs_by_run.items()
               if candidate_number(name) is not None and name not in done)


def candidate_number(name: str) -> int | None:
    m = _CANDIDATE.match(name)
    return int(m.group(1)) if m else None


def write_state(state_dir: Path, state: dict[str, Any]) -> None:
    """``solve.json``, written whole (fsynced) then renamed: a reader never sees half of it,
    and a full disk leaves no temporary file behind."""
    atomic_file.write_text(state_dir / SOLVE_STATE, json.dumps(state, indent=1))


def read_state(state_dir: Path) -> dict[str, Any]:
    data = json.loads((state_dir / SOLVE_STATE).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise InputError("resume", [Problem(SOLVE_STATE, str(state_dir), "must hold a JSON object")])
    return data


def append(state_dir: Path, row: Finished) -> None:
    """One finished trial, on a line of its own, on disk before this returns (fsync): a driver
    killed the next instant still has it."""
    line = json.dumps(row.as_json(), default=float) + "\n"
    with open(state_dir / SOLVE_JOURNAL, "a", encoding="utf-8") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def read_journal(state_dir: Path) -> list[Finished]:
    """The finished trials, first line wins per name; a line that does not parse (the torn last
    line of a killed driver) is passed over."""
    path = state_dir / SOLVE_JOURNAL
    if not path.is_file():
        return []
    out: dict[str, Finished] = {}
    for text in path.read_text(encoding="utf-8").splitlines():
        try:
            d = json.loads(text)
            row = Finished(str(d["name"]), int(d["seed"]),
                           None if d["lr_factor"] is None else float(d["lr_factor"]),
                           None if d["warmup"] is None else int(d["warmup"]),
                           str(d[STATUS_TAG]), list(d["evals"]))
        except (ValueError, KeyError, TypeError):
            continue
        out.setdefault(row.name, row)
    return list(out.values())


def find_solve_dir(name_or_dir: str, root: Path) -> Path | None:
    """The solve state directory ``name_or_dir`` names: the directory itself; the newest
    ``<root>/<name_or_dir>-<8 hex>`` holding ``solve.json`` (``name_or_dir`` the solve's
    experiment, ``<study>-solve``); or the one whose search parent run id it is. None when it
    names no solve (a sweep's name never matches: its directories hold no ``solve.json``)."""
    p = Path(name_or_dir)
    if (p / SOLVE_STATE).is_file():
        return p.resolve()
    if len(p.parts) != 1:  # a path, not a name: a sweep's directory, or nothing
        return None
    named = re.compile(re.escape(name_or_dir) + r"-[0-9a-f]{8}")
    found = [d for d in root.glob(f"{glob.escape(name_or_dir)}-*")
             if named.fullmatch(d.name) and (d / SOLVE_STATE).is_file()]
    if not found and re.fullmatch(r"[0-9a-f]{8,}", name_or_dir):  # the search's parent run id
        found = [d for d in root.glob(f"*-{name_or_dir[:8]}") if (d / SOLVE_STATE).is_file()
                 and str(read_state(d).get("parent_run_id", "")).startswith(name_or_dir)]
    found.sort(key=lambda d: (d / SOLVE_STATE).stat().st_mtime)
    return found[-1] if found else None


@dataclass
class WarmStart:
    """How a resumed search continues: the candidates that finished, told to the TPE sampler
    as evaluated (``points``/``rewards``), not run again; the named-rule start points not yet
    tried; the candidates and trial-epochs left; the scores the stopper starts from."""

    points: list[dict[str, float | int]] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    #: per point: whether it reached the target (its reward a score, else a bound), and its
    #: number of evals (where Optuna keeps a bound: the step of its last intermediate value)
    reached_flags: list[bool] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    starts: list[dict[str, float | int]] = field(default_factory=list)
    samples_left: int = 0
    finished: int = 0
    used: float = 0.0
    #: the finished candidates' scores that reached the target (OutOfReach's ``reached``)
    reached: list[float] = field(default_factory=list)
    #: the number the next candidate drawn gets: past every name used before, finished or not
    next_number: int = 0


def warm_start(finished: Iterable[tuple[Finished, float, bool]], starts: list[dict[str, float | int]],
               samples: int, used_names: Iterable[str] = ()) -> WarmStart:
    """``finished``: each finished candidate with its score and whether it reached the target.
    A candidate without a finite score (failed before its first eval) counts against the
    budget but is not told to the sampler: Optuna takes a completed trial's value as a number."""
    warm = WarmStart()
    tried: set[tuple[float, int]] = set()
    numbers = [n for n in (candidate_number(s) for s in used_names) if n is not None]
    for row, value, reached in finished:
        point = row.point
        if point is None:  # a baseline seed: not the search's
            continue
        warm.finished += 1
        warm.used += trial_epochs(row.evals)
        number = candidate_number(row.name)
        if number is not None:
            numbers.append(number)
        tried.add(point)
        if math.isfinite(value):
            warm.points.append({"lr_factor": point[0], "warmup": point[1]})
            warm.rewards.append(value)
            warm.reached_flags.append(reached)
            warm.steps.append(len(row.evals))
            if reached:
                warm.reached.append(value)
    warm.reached.sort()
    warm.starts = [s for s in starts if (float(s["lr_factor"]), int(s["warmup"])) not in tried]
    warm.samples_left = max(0, samples - warm.finished)
    warm.next_number = max(numbers, default=-1) + 1
    return warm
