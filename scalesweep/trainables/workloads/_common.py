"""Helpers shared by the built-in workloads: option checking, index checking, dev chunking,
batching of in-memory (inputs, targets) tensor pairs."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from scalesweep.trainables.workloads.base import WorkloadOptionError

if TYPE_CHECKING:  # torch is imported where a batch is made: planning makes workloads too
    import torch

#: a whole split or a batch of it: (inputs, targets), rows aligned
TensorPair = tuple["torch.Tensor", "torch.Tensor"]


def merge_options(options: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``defaults`` updated by ``options``, with unknown names and wrong types rejected.

    The type of each default is the option's type: an int option takes only ints (a float
    sample count is a typo, not a request to round), a float option takes ints too, a bool
    option takes only bools (``1`` for ``True`` hides mistakes in YAML).
    """
    for name in options:
        if name not in defaults:
            raise WorkloadOptionError(
                name, options[name], f"unknown option; allowed: {', '.join(sorted(defaults))}"
            )
    merged = dict(defaults)
    for name, value in options.items():
        default = defaults[name]
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise WorkloadOptionError(name, value, "must be true or false")
        elif isinstance(default, int):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise WorkloadOptionError(name, value, "must be an integer")
            value = int(value)
        elif isinstance(default, float):
            if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
                raise WorkloadOptionError(name, value, "must be a number")
            value = float(value)
            if not np.isfinite(value):
                raise WorkloadOptionError(name, value, "must be finite")
        merged[name] = value
    return merged


def require(ok: bool, option: str, value: Any, rule: str) -> None:
    if not ok:
        raise WorkloadOptionError(option, value, rule)


def rng(data_seed: int, stream: int) -> np.random.Generator:
    """An independent generator per data stream (teacher, train, dev, ...).

    Separate streams keep the dev set identical when only ``train_size`` changes.
    """
    return np.random.default_rng([data_seed, stream])


def index_array(indices: Sequence[int], size: int) -> np.ndarray:
    """``indices`` as an int64 array, refusing anything outside ``[0, size)``.

    Negative indices would silently wrap around in torch; for a sampler that is always a bug.
    Checked on the host, in numpy: the check reads no tensor, so it costs a GPU trial no sync.
    """
    idx = np.asarray(list(indices), dtype=np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= size):
        raise IndexError(f"sample indices must lie in [0, {size}), got {list(indices)[:8]}...")
    return idx


def index_tensor(indices: Sequence[int], size: int, device: torch.device | None = None) -> torch.Tensor:
    """``indices`` (checked as :func:`index_array` does) as a long tensor on ``device``, the
    host by default; the copy there is queued, not waited for."""
    import torch

    idx = torch.from_numpy(index_array(indices, size))
    return idx if device is None else idx.to(device, non_blocking=True)


def dev_chunks(size: int, batch_size: int, device: torch.device | None = None) -> Iterator[torch.Tensor]:
    """Index tensors covering ``range(size)`` in order, ``batch_size`` at a time, made on
    ``device`` (the host by default)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, but got {batch_size=}")
    import torch

    for start in range(0, size, batch_size):
        yield torch.arange(start, min(start + batch_size, size), device=device)


def place_pair(data: TensorPair, device: torch.device, cast_targets: bool) -> TensorPair:
    """A split on ``device``, inputs (and real-valued targets) already in the loop's default
    dtype, so that each batch is one gather there and its cast a no-op (the values are those
    :func:`pair_rows` gives: casting before or after the gather is the same)."""
    import torch

    dtype = torch.get_default_dtype()
    inputs, targets = data
    return inputs.to(device, dtype), targets.to(device, dtype) if cast_targets else targets.to(device)


def pair_rows(data: TensorPair, idx: torch.Tensor, cast_targets: bool) -> TensorPair:
    """Rows ``idx`` of ``data`` (``idx`` on its device), inputs cast to the loop's default dtype.

    Splits are stored in float64 so one copy serves any default dtype; targets are cast only
    when they are real-valued (regression), since class labels must stay integers.
    """
    import torch

    dtype = torch.get_default_dtype()
    inputs, targets = data[0][idx].to(dtype), data[1][idx]
    return inputs, targets.to(dtype) if cast_targets else targets


def pair_train_batch(data: TensorPair, indices: Sequence[int], cast_targets: bool) -> TensorPair:
    """The training batch of ``indices`` (checked against the split's size), made where the
    split is."""
    return pair_rows(data, index_tensor(indices, len(data[1]), data[1].device), cast_targets)


def pair_dev_batches(data: TensorPair, batch_size: int, cast_targets: bool) -> Iterator[TensorPair]:
    """The whole dev split in order, ``batch_size`` rows at a time, made where the split is."""
    for idx in dev_chunks(len(data[1]), batch_size, data[1].device):
        yield pair_rows(data, idx, cast_targets)
