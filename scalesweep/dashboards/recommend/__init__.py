"""`scalesweep recommend` read back from MLflow (docs/beyond.md, "recommend"): :mod:`.inputs`
gathers a study's inputs and makes the recipe, :mod:`.text` renders it, :mod:`.ledger` scores
recorded recommendations against the trials measured later at M."""
