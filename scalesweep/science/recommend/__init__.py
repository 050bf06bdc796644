"""`scalesweep recommend` below the orchestrator: the lr factor and warmup at a world size M
predicted from a finished study at N alone, with an interval and the model each number came
from (docs/beyond.md, "recommend"). Pure like the rest of ``scalesweep.science``: no torch, no
Ray, no MLflow.

* :mod:`.lr_models`: the best lr against the batch, McCandlish et al. (2018) for SGD and the
  surge of Li et al. (2024) for Adam-style optimizers, and the lr factor each gives at M;
* :mod:`.lr_evidence`: where the study's own arms put the best lr at N (a bowl in log lr,
  Fieller's interval for its bottom);
* :mod:`.warmup`: the warmup at M, held in samples (Goyal et al. 2017) or as the arms show;
* :mod:`.space`: the lower end of solve's lr factor range, from the measured noise scale;
* :mod:`.recipe`: the three together, and the epochs ratio the recipe is predicted to reach.
"""
