"""The error of an invalid run configuration, apart from :mod:`fl_strategies.settings.config`.

:mod:`fl_strategies.settings.config` checks every key and imports the modules whose keys it checks (e.g.
:mod:`fl_strategies.settings.participation`); those modules raise this error too, so it lives where both import it at
the top. ``fl_strategies.settings.config.ConfigError`` is the same class.
"""

__all__ = ["ConfigError"]


class ConfigError(ValueError):
    """A run configuration is invalid; the message names the key and what is allowed."""
