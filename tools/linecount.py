"""``python -m tools.linecount [--rev REV ...] [--classes N]``: lines of code, docstrings and comments
per region of the source and test trees.

A region is a top-level package of ``src/odradek`` (the broker's and the protocol's larger parts
counted on their own: the controller, the coordinators, the handlers, the generated messages), the
package's top-level modules together, and each top-level folder of ``tests``. Every line of a
Python file is counted once, as the first of these that applies:

- *blank*: only whitespace;
- *docstring*: inside a module's, class's or function's docstring;
- *comment*: only a comment;
- *code*: everything else (a line of code that ends in a comment is code).

With ``--rev`` the counts are taken from that git revision (``git archive``) as well as from the
working tree, and printed side by side, so one run gives before and after. ``--classes N`` lists
the classes longer than N lines (the architecture test fails on any over 600).
"""

from __future__ import annotations

import argparse
import ast
import io
import subprocess
import sys
import tarfile
import tokenize
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: parts of a package counted as regions of their own (longest prefix wins)
_SUBREGIONS = (
    "broker/controller",
    "broker/coordinators",
    "broker/handlers",
    "protocol/messages",
)

KINDS = ("code", "docstring", "comment", "blank")


@dataclass
class Counts:
    lines: Counter[str] = field(default_factory=Counter)
    files: int = 0

    def add(self, other: Counts) -> None:
        self.lines.update(other.lines)
        self.files += other.files

    @property
    def total(self) -> int:
        return sum(self.lines[k] for k in KINDS)


def _docstring_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            first = body[0]
            lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def _comment_lines(source: str) -> set[int]:
    """Lines whose only token is a comment."""
    comments: set[int] = set()
    other: set[int] = set()
    ignored = (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments.add(tok.start[0])
        elif tok.type not in ignored:
            other.update(range(tok.start[0], tok.end[0] + 1))
    return comments - other


def count_source(source: str, name: str = "<source>") -> Counts:
    tree = ast.parse(source, name)
    docs = _docstring_lines(tree)
    comments = _comment_lines(source)
    counts = Counts(files=1)
    for number, line in enumerate(source.splitlines(), start=1):
        if not line.strip():
            counts.lines["blank"] += 1
        elif number in docs:
            counts.lines["docstring"] += 1
        elif number in comments:
            counts.lines["comment"] += 1
        else:
            counts.lines["code"] += 1
    return counts


def region(rel: str) -> str:
    """The region of a path relative to the repository (``src/odradek/...`` or ``tests/...``)."""
    parts = rel.split("/")
    if parts[0] == "tests":
        return "tests/" + parts[1] if len(parts) > 2 else "tests (top-level files)"
    inner = parts[2:]  # below src/odradek
    if len(inner) == 1:
        return "odradek (top-level modules)"
    joined = "/".join(inner)
    for sub in _SUBREGIONS:
        if joined.startswith(sub + "/"):
            return sub
    return inner[0]


def _python_files(root: Path) -> Iterator[tuple[str, str]]:
    for base in ("src/odradek", "tests"):
        for path in sorted((root / base).rglob("*.py")):
            yield path.relative_to(root).as_posix(), path.read_text(encoding="utf-8")


def _python_files_at(rev: str) -> Iterator[tuple[str, str]]:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src/odradek", "tests"],
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            if member.isfile() and member.name.endswith(".py"):
                extracted = tar.extractfile(member)
                assert extracted is not None
                yield member.name, extracted.read().decode("utf-8")


def count_tree(files: Iterator[tuple[str, str]]) -> tuple[dict[str, Counts], list[tuple[int, str]]]:
    """(counts per region, (length, "path:Class") of every class)."""
    regions: dict[str, Counts] = {}
    classes: list[tuple[int, str]] = []
    for rel, source in files:
        regions.setdefault(region(rel), Counts()).add(count_source(source, rel))
        for node in ast.walk(ast.parse(source, rel)):
            if isinstance(node, ast.ClassDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                classes.append((length, f"{rel}:{node.name}"))
    return regions, classes


def _table(columns: list[tuple[str, dict[str, Counts]]]) -> str:
    names = sorted({name for _, regions in columns for name in regions},
                   key=lambda n: (n.startswith("tests"), n))
    header = f"{'region':34}" + "".join(f" | {label[:37]:^37}" for label, _ in columns)
    sub = f"{'':34}" + " | ".join([""] + [f"{'code':>7} {'doc':>7} {'comment':>7} {'total':>7} {'files':>5}"]
                                  * len(columns))
    out = [header, sub, "-" * len(sub)]

    def row(name: str, per_column: Sequence[Counts | None]) -> str:
        cells = []
        for c in per_column:
            if c is None:
                cells.append(f"{'-':>7} {'-':>7} {'-':>7} {'-':>7} {'-':>5}")
            else:
                cells.append(f"{c.lines['code']:>7} {c.lines['docstring']:>7} {c.lines['comment']:>7} "
                             f"{c.total:>7} {c.files:>5}")
        return f"{name:34} | " + " | ".join(cells)

    for name in names:
        out.append(row(name, [regions.get(name) for _, regions in columns]))
    out.append("-" * len(sub))
    for label, prefix in (("src/odradek", False), ("tests", True)):
        totals = []
        for _, regions in columns:
            total = Counts()
            for name, c in regions.items():
                if name.startswith("tests") == prefix:
                    total.add(c)
            totals.append(total)
        out.append(row(f"total {label}", totals))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.linecount", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rev", action="append", default=[],
                        help="also count this git revision (repeatable), printed before the working tree")
    parser.add_argument("--classes", type=int, metavar="N", help="list the classes longer than N lines")
    args = parser.parse_args(argv)
    columns = []
    class_lists = []
    for rev in args.rev:
        regions, classes = count_tree(_python_files_at(rev))
        columns.append((rev, regions))
        class_lists.append((rev, classes))
    regions, classes = count_tree(_python_files(ROOT))
    columns.append(("working tree", regions))
    class_lists.append(("working tree", classes))
    print(_table(columns))
    if args.classes is not None:
        for label, found in class_lists:
            print(f"\nclasses over {args.classes} lines ({label}):")
            for length, name in sorted(found, reverse=True):
                if length > args.classes:
                    print(f"  {length:5}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
