"""The loop settings a trial is planned from, typed: the ``training`` layers (built-in, the
workload's, a recipe's, the sweep's, an axis value) merged and judged at load, then read as
attributes, so that mypy follows ``per_worker_batch`` or ``eval_every_epochs`` from the sweep
file to the trial's ``TrialConfig`` and no plan step reads a key a layer may have left out."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from scalesweep.trainables.config import Dtype


@dataclass(frozen=True, kw_only=True)
class Training:
    """One trial's loop settings, as the sweep file's ``training`` block names them."""

    per_worker_batch: int
    accum_grad: int = 1
    #: how long: epochs, or updates (``max_updates`` caps ``epochs`` when both are given)
    epochs: float | None = None
    max_updates: int | None = None
    #: the eval cadence: updates, or epochs when ``eval_every`` is not given
    eval_every: int | None = None
    eval_every_epochs: float = 0.5
    grad_clip: float | None = None
    #: updates between checkpoints (0: only at the end); None: a wall-time cadence
    checkpoint_every: int | None = None
    checkpoint_every_s: float = 60.0
    dtype: Dtype = "float32"
    fuse: Literal["auto", "off"] = "auto"
    fuse_max_samples: int | None = None
    divergence_threshold: float | None = None
    batch_ramp: str | None = None

    @classmethod
    def of(cls, merged: Mapping[str, Any]) -> Training:
        """The record of ``merged``, the layers' values after load judged them (load's
        ``_check_settings``: a batch and an accumulation that are integers, a length given)."""
        def num(key: str) -> float | None:
            value = merged.get(key)
            return None if value is None else float(value)

        def count(key: str) -> int | None:
            value = merged.get(key)
            return None if value is None else int(value)

        return cls(per_worker_batch=int(merged["per_worker_batch"]),
                   accum_grad=int(merged.get("accum_grad", 1)),
                   epochs=num("epochs"), max_updates=count("max_updates") or None,
                   # a zero cadence is none given: the epochs' cadence applies
                   eval_every=count("eval_every") or None,
                   eval_every_epochs=float(merged.get("eval_every_epochs") or 0.5),
                   grad_clip=num("grad_clip"), checkpoint_every=count("checkpoint_every"),
                   checkpoint_every_s=float(merged.get("checkpoint_every_s") or 60.0),
                   dtype=cast(Dtype, merged.get("dtype", "float32")),
                   fuse=cast(Literal["auto", "off"], merged.get("fuse", "auto")),
                   fuse_max_samples=count("fuse_max_samples"),
                   divergence_threshold=num("divergence_threshold"),
                   batch_ramp=merged.get("batch_ramp"))

    def eval_every_at(self, updates_per_epoch: int) -> int:
        """Updates between evals: as given, or the epochs' worth at ``updates_per_epoch``."""
        if self.eval_every:
            return self.eval_every
        return max(1, round(updates_per_epoch * self.eval_every_epochs))

    def total_updates(self, updates_per_epoch: int, ramp_epochs: int = 0, ramp_updates: int = 0) -> int:
        """All updates: a ramp's stages, then the rest of the epochs at ``updates_per_epoch``;
        ``max_updates`` caps."""
        if self.epochs is None:
            assert self.max_updates is not None  # load requires epochs or max_updates
            return self.max_updates
        total = ramp_updates + math.ceil((self.epochs - ramp_epochs) * updates_per_epoch)
        return min(total, self.max_updates) if self.max_updates else total
