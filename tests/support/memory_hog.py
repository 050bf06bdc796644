"""A workload whose model for one seed holds more memory than its trial may
(tests/integration/test_memory_e2e.py): for ``hog_seed`` (the loop seeds torch with the
trial's seed right before building the model) ``build_model`` returns mlp_regression's model
holding ``ballast_mib`` MiB written (so resident), kept outside its parameters and state so no
checkpoint carries it; the trial's ``resources.memory_per_worker`` then ends it at its first
update. Bounded: the ballast goes with the model when the trial ends."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from scalesweep.trainables.workloads.base import Workload
from scalesweep.trainables.workloads.mlp_regression import make as make_mlp

#: no more than this, whatever the options ask
MAX_BALLAST_MIB = 4096


class _Hog:
    def __init__(self, inner: Workload, hog_seed: int, ballast_mib: int) -> None:
        self._inner = inner
        self._hog_seed = hog_seed
        self._ballast_mib = min(ballast_mib, MAX_BALLAST_MIB)
        self.metrics = inner.metrics
        self.defaults = inner.defaults

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # unpickling looks these up before they are set
            raise AttributeError(name)
        return getattr(self._inner, name)

    def build_model(self) -> torch.nn.Module:
        model = self._inner.build_model()
        if torch.initial_seed() == self._hog_seed:
            # a plain attribute: neither a parameter nor a buffer, so in no state_dict
            object.__setattr__(model, "ballast", torch.ones(self._ballast_mib * 2**20 // 4))
        return model


def make(options: Mapping[str, Any]) -> Workload:
    opts = dict(options)
    hog_seed = int(opts.pop("hog_seed", 0))
    ballast_mib = int(opts.pop("ballast_mib", 2048))
    return _Hog(make_mlp(opts), hog_seed, ballast_mib)
