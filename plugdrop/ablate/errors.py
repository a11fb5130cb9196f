"""The one error type of the ablation runner."""


class ConfigError(ValueError):
    """A user mistake in an ablation: config, data, model or output folder. The message is one
    line naming the place and the fix."""
