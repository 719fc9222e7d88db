"""Generates the configuration reference (``docs/configuration.md``) from the config tables.

``python -m tools.configdocs`` writes it; ``--check`` fails when the committed file is stale
(the test command runs the check, as it does for the protocol codec)."""
