"""Statistics of a study: crossings of a target on each trial's curve, seeds as replicates
(censored medians, order-statistic intervals, paired ratios), arms and their verdicts, and the
critical-batch fit. Pure like the rest of ``scalesweep.science``.
"""
