"""Jobs: their store, the runner and its steps, evals, checkpoints kept, experiment identity."""
