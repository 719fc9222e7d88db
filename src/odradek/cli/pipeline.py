"""``odradek pipeline``: list, generate events for and run the example pipelines.

The pipelines are Spark applications kept in the repository's ``examples/pipelines/``, not in
the installed package; this command finds that directory — ``--examples DIR``, else
``$ODRADEK_EXAMPLES``, else ``examples/pipelines`` in the current directory or one above it,
else next to this package's source tree — and imports it::

    odradek pipeline list
    odradek pipeline generate activity --count 2000
    odradek pipeline run activity --generate 2000 --available-now
    odradek pipeline run logs --timeout 600          # or until Ctrl-C

``run`` needs pyspark (the ``spark`` extra) and Java 17.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from odradek.errors import KafkaError, OdradekError

__all__ = ["PACKAGE", "add_parser", "find_examples", "load_examples", "run"]

#: The name the examples package is imported under.
PACKAGE = "odradek_example_pipelines"
ENV = "ODRADEK_EXAMPLES"
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


class ExamplesNotFound(OdradekError):
    """The example pipelines' directory (``examples/pipelines``) is not where ``ODRADEK_EXAMPLES``
    says, nor in or above the current directory."""


def find_examples(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The ``examples/pipelines`` directory (see the module's docstring for where it looks)."""
    tried: list[Path] = []
    given = explicit if explicit is not None else os.environ.get(ENV)
    if given:
        base = Path(given).expanduser().resolve()
        candidates = [base, base / "pipelines", base / "examples" / "pipelines"]
    else:
        candidates = []
        for start in (Path.cwd().resolve(), Path(__file__).resolve().parent):
            candidates += [d / "examples" / "pipelines" for d in (start, *start.parents)]
    for candidate in candidates:
        if (candidate / "__init__.py").is_file() and (candidate / "runner.py").is_file():
            return candidate
        tried.append(candidate)
    where = f"in {given}" if given else f"in the current directory or above it, nor above {Path(__file__).parent}"
    raise ExamplesNotFound(
        f"no examples/pipelines directory found {where}; run from the Odradek repository or pass "
        f"--examples DIR (or set {ENV})"
    )


def load_examples(explicit: str | os.PathLike[str] | None = None) -> ModuleType:
    """Import the examples package (once) as :data:`PACKAGE`."""
    path = find_examples(explicit)
    loaded = sys.modules.get(PACKAGE)
    if loaded is not None and Path(loaded.__file__ or "").parent == path:
        return loaded
    for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
        del sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        PACKAGE, path / "__init__.py", submodule_search_locations=[str(path)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[PACKAGE]
        raise
    return module


def _runner(args: argparse.Namespace) -> Any:
    package = load_examples(args.examples)
    return importlib.import_module(f"{package.__name__}.runner")


def add_parser(sub: Any) -> None:
    """Add the ``odradek pipeline`` subcommand (run the example Spark pipelines) and its options to the top-
    level subparsers ``sub``."""
    p = sub.add_parser(
        "pipeline",
        help="run the example pipelines (website activity, logs, metrics, articles) on Spark",
        description="List, generate events for and run the example Spark pipelines of examples/pipelines.",
    )
    psub = p.add_subparsers(dest="pipeline_command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        c: argparse.ArgumentParser = psub.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".")
        c.add_argument("--examples", metavar="DIR", default=None, help=f"the examples/pipelines directory (or ${ENV})")
        return c

    command("list", "list the pipelines")

    def events(c: argparse.ArgumentParser) -> None:
        c.add_argument("--seed", type=int, default=1, help="the generator's random seed (default 1)")
        c.add_argument(
            "--start",
            default="auto",
            metavar="TIME",
            help="event time of the first event: ISO 8601 (UTC unless it says so), 'now', or 'auto' "
            "(default: just after the newest event in the input topic, or now)",
        )

    def connection(c: argparse.ArgumentParser) -> None:
        c.add_argument("name", metavar="NAME", help="activity, logs, metrics or articles")
        c.add_argument(
            "-b",
            "--bootstrap-server",
            default=DEFAULT_BOOTSTRAP,
            help=f"host:port[,host:port] (default {DEFAULT_BOOTSTRAP})",
        )
        c.add_argument("--prefix", default="", help="put this before every topic name (default none)")

    g = command("generate", "create a pipeline's topics and send generated events to its input topic")
    connection(g)
    g.add_argument("-n", "--count", type=int, default=1000, help="how many events (default 1000)")
    events(g)

    r = command("run", "run a pipeline: create its topics, optionally generate events, start its Spark queries")
    connection(r)
    r.add_argument(
        "--output",
        default="pipeline-output",
        metavar="DIR",
        help="Parquet results and checkpoints (default ./pipeline-output; delete it to start over)",
    )
    r.add_argument("--generate", type=int, default=0, metavar="N", help="first send N generated events")
    events(r)
    r.add_argument(
        "--available-now",
        action="store_true",
        help="process what the input topic holds, then stop (Trigger.AvailableNow)",
    )
    r.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="S",
        help="stop after S seconds (default: run until Ctrl-C, or until caught up with --available-now)",
    )
    r.add_argument(
        "--trigger-interval", default="5 seconds", help="time between micro-batches (default '5 seconds')"
    )
    r.add_argument(
        "--starting-offsets",
        default="earliest",
        choices=["earliest", "latest"],
        help="where a new query starts reading (default earliest; a restarted one resumes)",
    )
    r.add_argument("--max-offsets-per-trigger", type=int, default=None, metavar="N", help="records per micro-batch")
    r.add_argument("--master", default="local[*]", help="Spark master of a new session (default local[*])")
    r.add_argument(
        "--restarts",
        type=int,
        default=None,
        metavar="N",
        help="when a query fails, start the queries again from their checkpoints, up to N times (default 2)",
    )


def run(args: argparse.Namespace) -> int:
    """Run ``odradek pipeline`` for the parsed ``args``; returns the exit status: 0, 1 with the
    error on stderr, 2 for a usage error."""
    try:
        runner = _runner(args)
        command = args.pipeline_command
        if command == "list":
            for name, summary in runner.describe():
                print(f"{name:<10} {summary}")
            return 0
        if args.name not in runner.PIPELINES:
            raise ValueError(f"unknown pipeline {args.name!r}: choose one of {', '.join(runner.PIPELINES)}")
        if command == "run" and args.timeout is not None and args.timeout <= 0:
            raise ValueError("--timeout must be positive")
        if command == "generate":
            runner.generate(
                args.name,
                bootstrap=args.bootstrap_server,
                count=args.count,
                seed=args.seed,
                start=args.start,
                prefix=args.prefix,
            )
            return 0
        code: int = runner.run(
            args.name,
            bootstrap=args.bootstrap_server,
            output=args.output,
            prefix=args.prefix,
            generate_count=args.generate,
            seed=args.seed,
            start=args.start,
            available_now=args.available_now,
            timeout=args.timeout,
            trigger_interval=args.trigger_interval,
            starting_offsets=args.starting_offsets,
            max_offsets_per_trigger=args.max_offsets_per_trigger,
            master=args.master,
            # the runner's default when not given; it rejects a negative count (a usage error here)
            **({} if args.restarts is None else {"restarts": args.restarts}),
        )
        return code
    except (ExamplesNotFound, ValueError) as exc:
        print(f"odradek pipeline: {exc}", file=sys.stderr)
        return 2
    except KafkaError as exc:
        print(f"odradek pipeline: {exc}", file=sys.stderr)
        return 1
    except ImportError as exc:
        print(f"odradek pipeline: {exc} (install the spark extra: pip install 'odradek[spark]')", file=sys.stderr)
        return 1
