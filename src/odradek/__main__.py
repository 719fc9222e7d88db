"""``python -m odradek``."""

from odradek.cli.__main__ import run

run()
