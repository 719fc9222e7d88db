"""Builds the optional C extensions odradek.records._speedups and odradek.spark._avrocols; everything else is in pyproject.toml.

optional=True: without a C compiler (or Python headers) the install goes on and Odradek runs
on its pure-Python decoder (odradek.records.speedups says which one is in use).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "odradek.records._speedups",
            sources=["src/odradek/records/_speedups.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"],
            optional=True,
        ),
        Extension(
            "odradek.spark._avrocols",
            sources=["src/odradek/spark/_avrocols.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"],
            optional=True,
        ),
    ]
)
