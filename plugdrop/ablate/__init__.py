"""The ablation runner behind ``plugdrop ablate``: config, data, model, training, runs, report."""
