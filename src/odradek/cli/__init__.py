"""The ``odradek`` command line: argument parsing and output only.

The command is the interface: ``odradek COMMAND ...`` (the console script) or ``python -m
odradek``, both entering :func:`odradek.cli.__main__.run`; :func:`odradek.cli.__main__.main`
runs one command line in-process and returns its exit status.  Each subcommand is a module here
(``topics``, ``consume``, ``serve``, ...) with ``add_parser`` and ``run``.  The package itself
exports no Python API."""

__all__: list[str] = []
