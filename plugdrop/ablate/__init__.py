"""The ablation runner: config, data, training, run folders on disk and the report."""
