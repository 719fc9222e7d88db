"""``odradek users``: SCRAM users, like ``kafka-configs --entity-type users``.

::

    odradek users add alice --mechanism SCRAM-SHA-512 --password-file alice.pw
    odradek users list
    odradek users describe alice
    odradek users delete alice --mechanism SCRAM-SHA-512

Through a broker (``--bootstrap-server``, with ``--command-config`` for a secured listener:
AlterUserScramCredentials, the password salted and hashed on this side), or, to bootstrap a
cluster before any broker runs, straight in ZooKeeper (``--zookeeper HOST:PORT[/CHROOT]``, as
kafka-configs --zookeeper; running brokers take the change from the notification).  The password
comes from ``--password-file`` (its first line), from standard input with ``--password-stdin``,
or is asked for: never from the command line, where other users could see it.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import sys
from typing import Any

from odradek.cli._common import add_output_option, write_json
from odradek.cli.topics import add_connection_options, run_admin
from odradek.client import Admin

__all__ = ["add_parser", "run"]

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def add_parser(sub: Any) -> None:
    """Add the ``odradek users`` subcommand (create, list and delete SCRAM users) and its options to the top-
    level subparsers ``sub``."""
    p = sub.add_parser(
        "users",
        help="create, list and delete SCRAM users",
        description="Create, list and delete SCRAM users (like kafka-configs --entity-type users).",
    )
    add_connection_options(p, top=True)
    p.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]", help="write to ZooKeeper directly (no broker needed)")
    usub = p.add_subparsers(dest="users_command", required=True, metavar="COMMAND")
    add = usub.add_parser("add", help="create a user or set a new password", description="Create a SCRAM user or set a new password.")
    add.add_argument("name", metavar="NAME")
    add.add_argument("--mechanism", action="append", choices=MECHANISMS, help="(repeatable; default SCRAM-SHA-512)")
    add.add_argument("--iterations", type=int, default=4096, help="PBKDF2 rounds (4096-16384, default 4096)")
    src = add.add_mutually_exclusive_group()
    src.add_argument("--password-file", metavar="FILE", help="read the password from the first line of FILE")
    src.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    lst = usub.add_parser("list", help="the users with SCRAM credentials", description="List the SCRAM users.")
    desc = usub.add_parser("describe", help="a user's mechanisms and iterations", description="Describe SCRAM users.")
    desc.add_argument("names", nargs="+", metavar="NAME")
    rm = usub.add_parser("delete", help="remove a user's credentials", description="Remove SCRAM credentials.")
    rm.add_argument("name", metavar="NAME")
    rm.add_argument("--mechanism", action="append", choices=MECHANISMS, help="(repeatable; default: every mechanism)")
    for c in (add, lst, desc, rm):
        add_connection_options(c, top=False)
    for c in (lst, desc):
        add_output_option(c)


def _password(args: argparse.Namespace) -> str:
    if args.password_file:
        with open(args.password_file, encoding="utf-8") as f:
            password = f.readline().rstrip("\r\n")
    elif args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass(f"password for {args.name}: ")
    if not password:
        raise ValueError("the password is empty")
    return password


def _check_iterations(n: int) -> None:
    if not 4096 <= n <= 16384:
        raise ValueError(f"--iterations {n}: Kafka accepts 4096 to 16384")


def _print_users(users: dict[str, dict[str, int]], out: Any, output: str = "table") -> None:
    if output == "json":
        write_json(
            [
                {
                    "user": user,
                    "credentials": [
                        {"mechanism": m, "iterations": i} for m, i in sorted(users[user].items())
                    ],
                }
                for user in sorted(users)
            ],
            out,
        )
        return
    for user in sorted(users):
        creds = ", ".join(f"{m} iterations={i}" for m, i in sorted(users[user].items()))
        out.write(f"{user}: {creds}\n")


def cmd_broker(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    """``odradek users add|list|describe|delete`` through the admin API (AlterUserScramCredentials,
    DescribeUserScramCredentials), for ``run_admin``: writes to ``out`` and returns the exit status; a
    Kafka error or ValueError raised becomes the one-line error and exit status 1."""
    command = args.users_command
    if command == "add":
        _check_iterations(args.iterations)
        password = _password(args)
        mechs = args.mechanism or ["SCRAM-SHA-512"]
        admin.alter_user_scram_credentials([(args.name, m, password, args.iterations) for m in mechs], timeout=args.timeout)
        out.write(f"Set {', '.join(mechs)} credentials of user {args.name}.\n")
    elif command == "list":
        _print_users(admin.describe_user_scram_credentials(timeout=args.timeout), out, args.output)
    elif command == "describe":
        _print_users(admin.describe_user_scram_credentials(args.names, timeout=args.timeout), out, args.output)
    else:
        mechs = args.mechanism or list(admin.describe_user_scram_credentials([args.name], timeout=args.timeout)[args.name])
        admin.alter_user_scram_credentials(delete=[(args.name, m) for m in mechs], timeout=args.timeout)
        out.write(f"Removed {', '.join(mechs)} credentials of user {args.name}.\n")
    return 0


def _zookeeper(args: argparse.Namespace) -> int:
    from odradek.coordination.zookeeper import zk_set_user_scram, zk_user_scram
    from odradek.security import ScramCredential

    command, connect = args.users_command, args.zookeeper
    if command == "add":
        _check_iterations(args.iterations)
        password = _password(args)
        current = asyncio.run(zk_user_scram(connect, args.name)).get(args.name, {})
        mechs = args.mechanism or ["SCRAM-SHA-512"]
        for m in mechs:
            current[m] = ScramCredential.from_password(m, password, args.iterations).to_text()
        asyncio.run(zk_set_user_scram(connect, args.name, current))
        print(f"Set {', '.join(mechs)} credentials of user {args.name} in ZooKeeper.")
        return 0
    users = asyncio.run(zk_user_scram(connect, args.names[0] if command == "describe" and len(args.names) == 1 else None))
    if command in ("list", "describe"):
        wanted = users if command == "list" else {u: users[u] for u in args.names if u in users}
        missing = [] if command == "list" else [u for u in args.names if u not in users]
        _print_users({u: {m: ScramCredential.from_text(t).iterations for m, t in c.items()} for u, c in wanted.items()},
                     sys.stdout, args.output)
        if missing:
            print(f"odradek users: no SCRAM credentials for {', '.join(missing)}", file=sys.stderr)
            return 1
        return 0
    creds = dict(users.get(args.name, {}))
    if not creds:
        print(f"odradek users: no SCRAM credentials for {args.name}", file=sys.stderr)
        return 1
    for m in args.mechanism or list(creds):
        creds.pop(m, None)
    asyncio.run(zk_set_user_scram(connect, args.name, creds))
    print(f"Removed credentials of user {args.name} in ZooKeeper.")
    return 0


def run(args: argparse.Namespace) -> int:
    """Run ``odradek users`` for the parsed ``args``; through the brokers' admin API, or with ``--zookeeper``
    straight in ZooKeeper.  Returns the exit status: 0, or 1 with the error on stderr."""
    if args.zookeeper:
        try:
            return _zookeeper(args)
        except (OSError, ValueError, TimeoutError) as exc:
            print(f"odradek users: {exc}", file=sys.stderr)
            return 1
    return run_admin("users", cmd_broker, args)
