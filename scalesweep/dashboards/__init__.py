"""MLflow -> pandas -> convergence tables and figures. Reads MLflow and the pure math only."""
