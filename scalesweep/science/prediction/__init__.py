"""`scalesweep predict` and `advise` below the orchestrator: the critical-batch fit, epochs to
target and the best lr at a batch nobody ran, and the ledger that scores a prediction against
what was measured later. Pure like the rest of ``scalesweep.science``.
"""
