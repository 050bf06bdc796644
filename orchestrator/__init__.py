"""Driver side of scalesweep: sweep spec, plan, Tune wiring, trial driver, MLflow, CLI."""
