"""What a Tune trial runs: the trainable Tune calls (``trial_driver``), the trial's resolved
config, the training loop (one for every backend), its world (one process or a DDP group),
sharding into virtual ranks, fused ranks, mixed precision, checkpoints, the Ray Train worker
entry, and the workloads.

The formulas it follows (schedules, rules, batch arithmetic) live in ``scalesweep.science``.
"""
