"""The ``odradek`` command line: argument parsing and output only."""
