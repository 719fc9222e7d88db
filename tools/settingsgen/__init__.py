"""The typed broker settings (``src/odradek/settings/_generated.py``), generated from the broker
config table (``odradek.config.BROKER_CONFIGS``) and the grouping in :mod:`tools.settingsgen.spec`."""
