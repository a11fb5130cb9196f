"""The error a user can cause in an ablation."""


class ConfigError(ValueError):
    """A user mistake in an ablation: config, data, model or output folder. The message is one
    line naming the place and the fix."""
