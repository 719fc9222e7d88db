"""What every ``odradek`` command shares: global options in any position, usage errors from the
command that was given, ``--output json|table``, the one "broker unreachable" check and message,
and the check for an optional extra a command needs.

Exit codes (documented in docs/getting-started.md, The CLI in scripts): 0 success, 1 the command failed (an error
from the cluster, a broker that cannot be reached, a missing extra), 2 a usage error (argparse),
130 interrupted (Ctrl-C / SIGINT).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Iterator
from typing import Any

__all__ = [
    "CONNECT_TIMEOUT",
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "GLOBAL_OPTIONS",
    "add_output_option",
    "command_chain",
    "connect_timeout",
    "extra_for",
    "fail",
    "install_hint",
    "missing_extra",
    "parse",
    "print_table",
    "spread_global_options",
    "unreachable_message",
    "write_json",
]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

#: seconds to wait for the first connection to a broker (Kafka clients'
#: socket.connection.setup.timeout.ms); ``--connect-timeout`` changes it, ``--timeout`` caps it
CONNECT_TIMEOUT = 10.0

#: options that, for a command that takes them, may also go before the command (``odradek
#: --bootstrap-server B groups list``) or between a command and its subcommand
GLOBAL_OPTIONS = (
    "--bootstrap-server",
    "--command-config",
    "--timeout",
    "--connect-timeout",
    "--output",
    "--zookeeper",
)

_TOP_HELP = {
    "--bootstrap-server": "host:port[,host:port] of brokers (default 127.0.0.1:9092)",
    "--command-config": "client settings (security.protocol, ssl.*, sasl.*...) in a properties file",
    "--timeout": "seconds to wait (each command has its own default)",
    "--connect-timeout": f"seconds to wait for a first connection to a broker (default {CONNECT_TIMEOUT:g})",
    "--output": "table (default) or json, for the commands that list or describe",
    "--zookeeper": "ZooKeeper's HOST:PORT[/CHROOT], for the commands that take it",
}

#: an optional module -> the extra of ``pyproject.toml`` that installs it
_EXTRAS = {
    "kazoo": "cluster",
    "pyspark": "spark",
    "pyarrow": "spark",
    "uvloop": "fast",
    "cryptography": "security",
    "gssapi": "kerberos",
    "pyiceberg": "tables",
}

_DEFAULTS = "_odradek_global_defaults"  # parser attribute: dest -> the default the command declared
_OWN = "_odradek_global_own"  # parser attribute: the global dests the command itself declared


# -- the parser tree ------------------------------------------------------------------------------
def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[Any] | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def _children(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    sp = _subparsers(parser)
    if sp is None:
        return []
    unique: dict[int, argparse.ArgumentParser] = {}
    for child in sp.choices.values():
        unique.setdefault(id(child), child)
    return list(unique.values())


def _chains(parser: argparse.ArgumentParser) -> Iterator[list[argparse.ArgumentParser]]:
    """Every path from ``parser`` down to a parser without subcommands."""
    children = _children(parser)
    if not children:
        yield [parser]
        return
    for child in children:
        for chain in _chains(child):
            yield [parser, *chain]


def _global_action(parser: argparse.ArgumentParser, option: str) -> argparse.Action | None:
    return parser._option_string_actions.get(option)


def _is_global(option: str, action: argparse.Action) -> bool:
    """Whether a command's option is the global one (``pipeline run --output DIR`` is not)."""
    return option != "--output" or "json" in (action.choices or ())


def spread_global_options(top: argparse.ArgumentParser) -> None:
    """Make each of :data:`GLOBAL_OPTIONS` that a command takes acceptable at every level of it.

    Every level gets the option with a suppressed default, so that a value given at any level
    survives (argparse lets a subcommand's defaults overwrite what its parent parsed); the
    defaults the commands declared are kept aside and filled in by :func:`parse`."""
    chains = list(_chains(top))
    parsers: dict[int, argparse.ArgumentParser] = {id(p): p for chain in chains for p in chain}
    for p in parsers.values():  # record what each command declared, before anything is added
        own, defaults = set(), {}
        for option in GLOBAL_OPTIONS:
            action = _global_action(p, option)
            if action is None or p is top:
                continue
            own.add(action.dest)
            if not _is_global(option, action):
                continue
            if action.default is not argparse.SUPPRESS:
                defaults[action.dest] = action.default
                action.default = argparse.SUPPRESS
        setattr(p, _OWN, own)
        setattr(p, _DEFAULTS, defaults)
    group = top.add_argument_group("global options (also accepted after the command, for the commands that take them)")
    for chain in chains:
        for option in GLOBAL_OPTIONS:
            models = [a for p in chain[1:] if (a := _global_action(p, option)) is not None]
            if not models or not all(_is_global(option, a) for a in models):
                continue
            model = models[0]
            spellings = list(dict.fromkeys(o for a in models for o in a.option_strings))  # -b too
            for p in chain:
                if _global_action(p, option) is not None:
                    continue
                free = [o for o in spellings if o not in p._option_string_actions]
                if option not in free:
                    continue
                target: Any = group if p is top else p
                target.add_argument(
                    *free,
                    dest=model.dest,
                    action=type(model),
                    nargs=model.nargs,
                    type=model.type,
                    choices=model.choices,
                    metavar=model.metavar,
                    help=_TOP_HELP.get(option, model.help) if p is top else model.help,
                    default=argparse.SUPPRESS,
                )


def command_chain(top: argparse.ArgumentParser, args: argparse.Namespace) -> list[argparse.ArgumentParser]:
    """The parsers of the command that was given: ``[odradek, topics, list]``."""
    chain = [top]
    parser = top
    while (sp := _subparsers(parser)) is not None:
        name = getattr(args, sp.dest, None) if sp.dest != argparse.SUPPRESS else None
        if name is None or name not in sp.choices:
            break
        parser = sp.choices[name]
        chain.append(parser)
    return chain


def parse(top: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse like ``parse_args``, but an unknown option is reported with the usage of the command
    it was given to (``odradek groups list --bogus``: the usage of ``odradek groups list``), and a
    global option given to a command that does not take it is such an unknown option."""
    args, extras = top.parse_known_args(argv)
    chain = command_chain(top, args)
    leaf = chain[-1]
    if extras:
        leaf.error(f"unrecognized arguments: {' '.join(extras)}")
    own: set[str] = set()
    for p in chain[1:]:
        own |= getattr(p, _OWN, set())
    for option in GLOBAL_OPTIONS:
        action = _global_action(top, option)
        if action is None:
            continue
        if action.dest in vars(args) and action.dest not in own:
            leaf.error(f"unrecognized arguments: {option} (odradek {' '.join(leaf.prog.split()[1:])} does not take it)")
    defaults: dict[str, Any] = {}
    for p in chain[1:]:  # the deepest command's default wins
        defaults.update(getattr(p, _DEFAULTS, {}))
    for dest, default in defaults.items():
        if dest not in vars(args):
            setattr(args, dest, default)
    return args


# -- output ---------------------------------------------------------------------------------------
def add_output_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--output table|json`` (default table) to ``parser``."""
    parser.add_argument(
        "--output",
        choices=("table", "json"),
        default="table",
        help="table (default): for people; json: for scripts (the keys are documented in docs/getting-started.md)",
    )


def write_json(value: Any, out: Any) -> None:
    """Write ``value`` to ``out`` as indented JSON and a newline (``--output json``)."""
    out.write(json.dumps(value, indent=2) + "\n")


def print_table(rows: list[list[str]], out: Any) -> None:
    """Columns padded to their widest cell, two spaces apart; the first row is the heading."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")


# -- an unreachable broker ------------------------------------------------------------------------
def connect_timeout(args: argparse.Namespace) -> float:
    """The one connect timeout: ``--connect-timeout`` (default 10 s), at most ``--timeout``."""
    value = getattr(args, "connect_timeout", None)
    seconds = CONNECT_TIMEOUT if value is None else float(value)
    timeout = getattr(args, "timeout", None)
    if timeout is not None and timeout > 0:
        seconds = min(seconds, float(timeout))
    return max(seconds, 0.001)


def unreachable_message(bootstrap: str, seconds: float, cause: str) -> str:
    """The message every command prints when no broker answers within the connect timeout."""
    _, found, after = cause.partition("no broker reachable: ")
    reason = (after if found else cause).strip() or "no answer"
    return f"cannot reach a broker at {bootstrap} within {seconds:g} s ({reason})"


# -- optional extras ------------------------------------------------------------------------------
def extra_for(module: str) -> str | None:
    """The extra that installs ``module`` (``kazoo`` -> ``cluster``), if it is an optional one."""
    return _EXTRAS.get(module.split(".")[0])


def missing_extra(*modules: str) -> str | None:
    """None when every module can be imported, else what to install, as one sentence."""
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return install_hint(module)
    return None


def install_hint(module: str) -> str:
    """What to tell a user whose command needs ``module``: the extra to install (``pip install
    'odradek[cluster]'``), or that the module is missing."""
    module = module.split(".")[0]
    extra = extra_for(module)
    if extra is None:
        return f"this command needs the Python module {module!r}, which is not installed"
    return f"this command needs {module}, from the '{extra}' extra: pip install 'odradek[{extra}]'"


def fail(tool: str, message: str) -> int:
    """Print ``odradek TOOL: MESSAGE`` on stderr; returns the failure exit status (1)."""
    print(f"odradek {tool}: {message}", file=sys.stderr)
    return EXIT_FAILURE
