"""Statistics of a study: crossings of a target on each trial's curve, seeds as replicates
(censored medians, paired ratios and the signed-rank intervals), arms and their decisions.
Pure like the rest of ``scalesweep.science``; predictions live in ``science.prediction``.
"""
