"""The precision a trial trains in: ``float32``/``float64`` plain, ``bfloat16``/``float16`` mixed.

Mixed precision here is autocast only: the parameters, their ``.grad`` and the optimizer state
stay float32 ("master weights"), and ``torch.autocast`` runs the forward pass and the loss (and
the dev evaluation) in the low dtype where torch deems it safe. Why not cast the model: a
low-precision parameter would absorb an lr * gradient step smaller than its ulp as nothing
(bfloat16 has 8 significant bits), and the gradients accumulated over virtual ranks and
micro-batches would round at every addition; with float32 master weights both stay exactly
as in a float32 trial, and only the forward/backward arithmetic changes.

``float16`` has 11 significant bits but a 5-bit exponent, so small gradients underflow to zero
in its backward; a :class:`torch.amp.GradScaler` multiplies the loss by a large power of two
before the backward and divides the gradients by it before they are used (``unscale``). A
power of two scales every float exactly, so the unscaled gradient is exactly the scaled one
divided by the scale: nothing but the underflow changes. When the scaled gradient overflows
(inf/nan), the scaler skips the optimizer step and halves the scale; :attr:`Precision.skipped`
counts those skips (reported as ``skipped_updates``). ``bfloat16`` has float32's exponent
range: no scaler.

The loop counts a skipped update as an update (its global batch consumed, its lr-schedule
slot used), exactly as torch's own recipe ``scaler.step(opt); scaler.update();
scheduler.step()`` advances the schedule on every iteration, skipped or not. The parameters
and the optimizer's state (Adam's step count too) are left as they were.

The same object serves simulate and DDP: DDP all-reduces the scaled gradients (a sum scales
linearly), and unscaling afterwards sees the same all-reduced gradient on every rank, so every
rank finds the same inf/nan and skips the same updates.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from scalesweep.trainables.config import Dtype

#: the dtype parameters, data and optimizer state live in; mixed precision keeps float32 masters
PARAM_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.float32,
    "float16": torch.float32,
}
#: the dtype autocast computes in, for the mixed precisions only
_AUTOCAST: dict[str, torch.dtype] = {"bfloat16": torch.bfloat16, "float16": torch.float16}


class Precision:
    """Autocast, loss scaling and the skip count of one trial (module doc)."""

    def __init__(self, dtype: Dtype, device: torch.device) -> None:
        self.dtype = dtype
        self.device = device
        self.mixed = dtype in _AUTOCAST
        # GradScaler takes the device type ("cpu" or "cuda"); CPU scaling works in torch >= 2.3
        self.scaler = torch.amp.GradScaler(device.type) if dtype == "float16" else None
        self.skipped = 0  # optimizer steps the scaler skipped (inf/nan gradients), cumulative
        # The scale as last read: it changes only in step (scaler.update), and each read of
        # it (get_scale) is a host sync; None = read it at next use.
        self._scale: float | None = None

    @property
    def param_dtype(self) -> torch.dtype:
        return PARAM_DTYPES[self.dtype]

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """Around forward and loss (and evaluation); a no-op for float32/float64, so those
        trials run exactly the operations they always did."""
        if not self.mixed:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=_AUTOCAST[self.dtype])

    def master(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` (e.g. autocast's per-sample losses) in the master dtype before they are
        summed: a sum of hundreds of bfloat16 losses would lose the low bits of each. Identity
        for float32/float64."""
        return values.float() if self.mixed and values.dtype != torch.float64 else values

    def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()``, of the scaled loss under float16. Outside autocast, as torch
        recommends: the backward runs each op in the dtype its forward ran in."""
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    @property
    def grad_factor(self) -> float:
        """What the gradients accumulated so far in this update must be multiplied by to be
        true gradients: 1 / scale under float16 (a power of two: exact), else 1. The noise-scale
        probe reads per-virtual-rank gradients before :meth:`unscale` can run (a rank's
        gradient is complete only mid-accumulation), so it applies this factor itself."""
        if self.scaler is None:
            return 1.0
        return 1.0 / self._current_scale()

    def _current_scale(self) -> float:
        if self.scaler is None:
            return 1.0
        if self._scale is None:
            self._scale = self.scaler.get_scale()
        return self._scale

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide the (all-reduced) gradients by the scale in place, once per update, after
        the last backward and before anything reads them (norm, clipping, the step)."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """The optimizer step; False when the scaler skipped it (inf/nan gradients)."""
        if self.scaler is None:
            optimizer.step()
            return True
        before = self._current_scale()
        self.scaler.step(optimizer)  # skips optimizer.step() when unscale found inf/nan
        self.scaler.update()  # halves the scale after a skip, else may grow it
        # The scale falls only after a skip (backoff_factor < 1; growth only raises it), and
        # get_scale() is public API, unlike the scaler's per-device found-inf record. One
        # read per update: the next update's ``before`` is this one's ``after``.
        self._scale = self.scaler.get_scale()
        stepped = self._scale >= before
        if not stepped:
            self.skipped += 1
        return stepped

    def metrics(self) -> dict[str, int]:
        """What a report carries: ``skipped_updates`` with a scaler, nothing otherwise (the
        float32/float64 reports keep their keys)."""
        return {"skipped_updates": self.skipped} if self.scaler is not None else {}

    def state_dict(self) -> dict[str, Any]:
        """The scaler's scale and growth tracker, and the skip count; empty without a scaler."""
        if self.scaler is None:
            return {}
        return {"scaler": self.scaler.state_dict(), "skipped": self.skipped}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.scaler is None:
            return
        if not state:
            raise ValueError("checkpoint holds no GradScaler state, but the trial trains in float16")
        self.scaler.load_state_dict(state["scaler"])
        self._scale = None
        self.skipped = int(state["skipped"])
