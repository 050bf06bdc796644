"""Checkpoints of a trial: enough to continue with exactly the updates it would have made.

Layout of a checkpoint directory (what Ray Train / Tune persist and hand back on restart):

* ``state.pt`` -- ``torch.save`` of a dict of tensors and plain values (loads with
  ``weights_only=True``): ``model`` (state_dict of the plain module, not the DDP wrapper),
  ``optimizer`` (state_dict), ``progress`` (see :class:`Progress`), ``rng`` (torch CPU, CUDA,
  Python ``random`` and NumPy states); and ``precision`` only for a float16 trial: its
  GradScaler's scale and growth tracker and its count of skipped updates, without which a
  resumed trial would start again from the initial scale and skip updates the uninterrupted
  one made (:mod:`scalesweep.trainables.precision`).
* ``meta.json`` -- the same progress plus the trajectory-defining config fields, human-readable,
  and ``files``: the size and SHA-256 of ``state.pt``. It is written last, and each file goes
  to a temporary name, is fsynced and renamed into place, so a checkpoint whose ``meta.json``
  matches its files is whole: :func:`incomplete` says why one is not (a copy cut short by a
  killed process, a full disk), and whoever picks a checkpoint to resume from takes the newest
  whole one (:func:`newest_complete`).

The schedule's position is not stored: schedules are pure functions of the update count. The
data position (epoch, update within epoch) derives from the update count as well; it is stored
and checked on load so a checkpoint cannot silently resume under a different data plan. The
loop reseeds torch's RNG per micro-batch, so the stored RNG states matter only to workloads
that draw outside ``loss``; they are restored anyway so such a workload still resumes exactly.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:  # imported where used: the sweep driver reads checkpoints' files, not tensors
    import torch

from scalesweep.science.batch_ramp import eval_due
from scalesweep.trainables.config import TrialConfig

STATE_FILE = "state.pt"
META_FILE = "meta.json"
FORMAT = 1

#: config fields that fix the sequence of updates; a checkpoint only resumes a trial that
#: agrees on all of them. Backend and physical_workers may differ: virtual ranks make every
#: backend make the same updates, so a ddp trial may even resume in simulate.
TRAJECTORY_FIELDS = (
    "workload",
    "workload_options",
    "world_size",
    "per_worker_batch",
    "accum_grad",
    "batch_ramp",
    "optimizer",
    "scheduler",
    "grad_clip",
    "seed",
    "dtype",
)


#: trajectory fields newer than some checkpoints, with the value every older trial had (as JSON)
_ADDED_SINCE: dict[str, Any] = {"batch_ramp": []}


class Stateful(Protocol):
    """What holds extra state for a checkpoint (``scalesweep.trainables.precision.Precision``)."""

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@dataclass
class Progress:
    """Loop state besides model and optimizer."""

    update: int = 0  # optimizer updates made
    epoch: int = 0  # epoch of the next update
    update_in_epoch: int = 0  # 0-based index of the next update within its epoch
    train_loss_sum: float = 0.0  # summed per-sample training loss since the last report
    train_loss_count: int = 0  # samples in that sum
    wall_s: float = 0.0  # loop wall time spent so far (start-up excluded)
    status: str = "running"  # "running" or the trial's final status
    last_report: dict[str, Any] = field(default_factory=dict)  # the last metrics reported
    noise_scale: dict[str, Any] = field(default_factory=dict)  # NoiseScale.state(): its EMAs
    #: the target metric's evals (EvalPoint fields): a smoothed crossing reads them all
    target_evals: list[dict[str, float]] = field(default_factory=list)


def due(config: TrialConfig, update: int, seconds_since_last: float = 0.0,
        at_eval: bool | None = None) -> bool:
    """Whether the loop checkpoints after ``update``: always after the last one; every
    ``checkpoint_every`` updates; and at an eval ``checkpoint_every_s`` or more seconds after
    the last checkpoint (or the start). ``at_eval``: whether ``update`` evaluates (a batch-size
    ramp's stages have their own cadence); by default every ``eval_every``-th update does."""
    every, every_s = config.checkpoint_every, config.checkpoint_every_s
    if at_eval is None:
        at_eval = eval_due(update, config.eval_every)
    return (
        update >= config.total_updates
        or (every > 0 and update % every == 0)
        or (every_s is not None and at_eval and seconds_since_last >= every_s)
    )


def save(
    directory: str | os.PathLike[str],
    *,
    config: TrialConfig,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    progress: Progress,
    precision: dict[str, Any] | None = None,
) -> None:
    """Write a checkpoint into the existing, empty ``directory``; ``precision``:
    ``Precision.state_dict()``, stored only when non-empty (float16)."""
    import torch

    path = Path(directory)
    state = {
        "format": FORMAT,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "progress": asdict(progress),
        "rng": _rng_state(),
    }
    if precision:  # absent otherwise: float32/float64 checkpoints hold what they always did
        state["precision"] = precision
    _atomic(path / STATE_FILE, lambda f: torch.save(state, f))
    meta = {"format": FORMAT, "progress": asdict(progress), "config": _trajectory(config),
            "files": {STATE_FILE: _fingerprint(path / STATE_FILE)}}
    text = json.dumps(meta, indent=2, sort_keys=True, default=str).encode()
    _atomic(path / META_FILE, lambda f: f.write(text))  # last: its presence vouches for the rest


def _atomic(target: Path, write: Callable[[Any], object]) -> None:
    """Write ``target`` under a temporary name, fsync it, then rename it into place. An
    OSError names the file (a write's own error does not: a full disk must say where)."""
    tmp = target.with_name(f".{target.name}.tmp")
    recording = _Recording()
    try:
        with tmp.open("wb") as f:
            recording.f = f
            write(recording)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except Exception as exc:
        with contextlib.suppress(OSError):  # a part-written file only takes space
            tmp.unlink()
        # torch.save turns the file's OSError into its own RuntimeError ("unexpected pos"):
        # the recorded one says why (ENOSPC, EDQUOT)
        error = exc if isinstance(exc, OSError) else recording.error
        if error is None or error.filename is not None:
            raise
        raise OSError(error.errno, error.strerror or str(error), str(target)) from exc


class _Recording:
    """A binary file that keeps the OSError its ``write`` raised."""

    def __init__(self) -> None:
        self.f: Any = None
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return int(self.f.write(data))
        except OSError as exc:
            self.error = exc
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.f, name)


def _fingerprint(path: Path) -> dict[str, Any]:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return {"size": path.stat().st_size, "sha256": digest.hexdigest()}


def incomplete(directory: str | os.PathLike[str]) -> str | None:
    """Why ``directory`` is not a whole checkpoint, or None when it is. A checkpoint written
    before ``meta.json`` listed its files is taken as whole if its files are there."""
    path = Path(directory)
    try:
        meta = json.loads((path / META_FILE).read_text())
    except FileNotFoundError:
        return f"no {META_FILE}"
    except (OSError, ValueError) as exc:
        return f"{META_FILE} unreadable ({type(exc).__name__})"
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        return f"{META_FILE} is not format {FORMAT}"
    files = meta.get("files") or {STATE_FILE: None}
    for name, want in files.items():
        if not (path / name).is_file():
            return f"{name} missing"
        if want is None:
            continue
        if (size := (path / name).stat().st_size) != want["size"]:
            return f"{name} has {size} bytes, {META_FILE} says {want['size']}"
        if _fingerprint(path / name)["sha256"] != want["sha256"]:
            return f"{name} does not match its checksum in {META_FILE}"
    return None


def newest_complete(candidates: Sequence[Path], *, label: str = "") -> Path | None:
    """The first whole checkpoint of ``candidates`` (newest first); a warning on stderr names
    each torn one passed over and the one taken instead."""
    torn: list[tuple[Path, str]] = []
    for path in candidates:
        why = incomplete(path)
        if why is None:
            if torn:
                names = "; ".join(f"{p} ({reason})" for p, reason in torn)
                print(f"warning: {label + ': ' if label else ''}torn checkpoint {names}: resuming from "
                      f"the previous one, {path}", file=sys.stderr, flush=True)
            return path
        torn.append((path, why))
    if torn:
        names = "; ".join(f"{p} ({reason})" for p, reason in torn)
        print(f"warning: {label + ': ' if label else ''}no whole checkpoint ({names}): starting "
              "from the beginning", file=sys.stderr, flush=True)
    return None


def read_progress(directory: Path) -> Progress | None:
    """A checkpoint's progress as its ``meta.json`` says, without loading its state (None if
    unreadable: a torn one)."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        progress = json.loads((directory / META_FILE).read_text())["progress"]
        if isinstance(progress, dict):
            return Progress(**progress)
    return None


def load(
    directory: str | os.PathLike[str],
    *,
    config: TrialConfig,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    data_position: Callable[[int], tuple[int, int]],
    map_location: torch.device | str = "cpu",
    precision: Stateful | None = None,
) -> Progress:
    """Restore model, optimizer, RNG and (given ``precision``) the loss scaler's state in
    place from ``directory``; returns the progress."""
    import torch

    path = Path(directory)
    meta = json.loads((path / META_FILE).read_text())
    # a field added since the checkpoint was written: what it was then is its default
    saved = {**_ADDED_SINCE, **meta["config"]}
    mismatched = {
        key: (saved.get(key), now)
        for key, now in _trajectory(config).items()
        if saved.get(key) != now
    }
    if mismatched:
        detail = ", ".join(f"{k}: checkpoint {a!r} != trial {b!r}" for k, (a, b) in mismatched.items())
        raise ValueError(f"checkpoint {path} belongs to a different trajectory ({detail})")
    state = torch.load(path / STATE_FILE, map_location=map_location, weights_only=True)
    if state.get("format") != FORMAT:
        raise ValueError(f"checkpoint {path}: format {state.get('format')!r} != {FORMAT}")
    progress = Progress(**state["progress"])
    expected = data_position(progress.update)
    if (progress.epoch, progress.update_in_epoch) != expected:
        raise ValueError(
            f"checkpoint {path}: data position (epoch {progress.epoch}, update "
            f"{progress.update_in_epoch}) != the trial's (epoch, update) after update "
            f"{progress.update} {expected}"
        )
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    _set_rng_state(state["rng"])
    if precision is not None:
        precision.load_state_dict(state.get("precision", {}))
    return progress


def _trajectory(config: TrialConfig) -> dict[str, Any]:
    # Through JSON so that tuples, lists and numbers compare as they will after a round trip.
    dumped = config.model_dump(mode="json")
    return json.loads(json.dumps({key: dumped[key] for key in TRAJECTORY_FIELDS}))


def _rng_state() -> dict[str, Any]:
    import torch

    kind, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        # Tensors and plain values only, so the file loads with weights_only=True.
        "python": list(random.getstate()[1]),
        "python_version": random.getstate()[0],
        "python_gauss": random.getstate()[2],
        "numpy": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
        "numpy_meta": [kind, int(pos), int(has_gauss), float(gauss)],
    }


def _set_rng_state(state: dict[str, Any]) -> None:
    import torch

    torch.set_rng_state(state["torch"].cpu())
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])
    random.setstate((state["python_version"], tuple(state["python"]), state["python_gauss"]))
    kind, pos, has_gauss, gauss = state["numpy_meta"]
    keys = state["numpy"].numpy().astype(np.uint32)
    np.random.set_state((kind, keys, pos, has_gauss, gauss))
