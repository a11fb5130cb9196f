"""The ablation runner behind ``plugdrop ablate``: config, data, model, training, run folders and reports."""
