"""Every code block of the guide (docs/*.md) that claims to run, runs.

Each ``python`` and ``sh`` block, and each block without a language, is preceded by one marker:

* ``<!-- runs -->`` — run here, in page order, against a broker of its own started for the page
  (the quickstart's ``greetings`` topic written first, as the pages assume the quickstart's broker);
  only the addresses are substituted: 127.0.0.1:9092 / localhost:9092 by the broker's listener,
  127.0.0.1:8081 by its schema registry, and ``odradek`` commands get ``-b`` with the listener.
  ``odradek-data`` and ``.venv`` in the working directory are the broker's data dir and this
  interpreter's environment.  A block passes when it exits 0.
* ``<!-- runs in tests/FILE.py ... -->`` — a test of its own runs it (a fresh venv, Spark): FILE
  exists and reads this page.
* ``<!-- not run: reason -->`` — a fragment, a loop that runs until stopped, fixed ports.

A block without a marker fails :func:`test_every_code_block_says_whether_it_runs`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from odradek.testing import BrokerProcess

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
#: generated pages (the configuration reference) hold no code
GENERATED = {"configuration.md"}
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
MARKER = re.compile(r"<!-- (runs|runs in (\S+)[^>]*|not run: [^>]+) -->\s*\Z")
#: subcommands that act on local files only (no --bootstrap-server)
LOCAL_COMMANDS = {"dump-log", "completion", "certs"}


@dataclass
class Block:
    page: str
    line: int
    lang: str
    code: str
    marker: str | None

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    out = []
    for m in FENCE.finditer(text):
        lang = m.group(1)
        if lang not in ("python", "sh", ""):
            continue  # properties, yaml, text: not programs
        before = text[: m.start()].rstrip("\n").splitlines()
        last = before[-1] if before else ""
        marker = MARKER.search(last)
        out.append(Block(page.name, text[: m.start()].count("\n") + 1, lang or "sh", m.group(2),
                         marker.group(1) if marker else None))
    return out


def pages() -> list[Path]:
    return sorted(p for p in DOCS.glob("*.md") if p.name not in GENERATED)


def all_blocks() -> list[Block]:
    return [b for p in pages() for b in blocks(p)]


def test_every_code_block_says_whether_it_runs() -> None:
    unmarked = [str(b) for b in all_blocks() if b.marker is None]
    assert not unmarked, f"code blocks with no <!-- runs --> / <!-- not run: why --> marker: {unmarked}"


def test_blocks_run_elsewhere_name_a_test_that_reads_their_page() -> None:
    elsewhere = [b for b in all_blocks() if b.marker and b.marker.startswith("runs in ")]
    assert elsewhere
    for b in elsewhere:
        path = REPO / b.marker.split()[2]
        assert path.is_file(), f"{b}: {path} does not exist"
        assert f'"{b.page}"' in path.read_text() or f"docs/{b.page}" in path.read_text(), (
            f"{b}: {path.name} does not read docs/{b.page}"
        )


def test_the_marker_check_sees_an_unmarked_block(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("text\n\n<!-- runs -->\n```python\nprint(1)\n```\n\n```sh\necho 2\n```\n")
    assert [b.marker for b in blocks(page)] == ["runs", None]


def runnable_pages() -> list[str]:
    return [p.name for p in pages() if any(b.marker == "runs" for b in blocks(p))]


_ODRADEK = re.compile(r"(^|[|;&(]\s*|\s)((?:\.venv/bin/)?odradek)\s+(?!-b\b)([\w-]+)", re.M)


def substitute(code: str, broker: BrokerProcess) -> str:
    registry = (broker.registry_url or "http://127.0.0.1:8081").removeprefix("http://")
    code = code.replace("127.0.0.1:8081", registry).replace("localhost:8081", registry)
    code = code.replace("127.0.0.1:9092", broker.bootstrap).replace("localhost:9092", broker.bootstrap)

    def add_bootstrap(m: re.Match[str]) -> str:
        if m.group(3) in LOCAL_COMMANDS:
            return m.group(0)
        return f"{m.group(1)}{m.group(2)} -b {broker.bootstrap} {m.group(3)}"

    return _ODRADEK.sub(add_bootstrap, code)


def test_substitution_points_every_odradek_command_at_the_broker() -> None:
    class B:
        bootstrap = "127.0.0.1:5555"
        registry_url = "http://127.0.0.1:6666"

    code = ("printf 'a' | .venv/bin/odradek produce t\nodradek features describe\n"
            ".venv/bin/odradek dump-log odradek-data/t-0\nkcat -b 127.0.0.1:9092 -L\n")
    assert substitute(code, B()) == (  # type: ignore[arg-type]
        "printf 'a' | .venv/bin/odradek -b 127.0.0.1:5555 produce t\nodradek -b 127.0.0.1:5555 features describe\n"
        ".venv/bin/odradek dump-log odradek-data/t-0\nkcat -b 127.0.0.1:5555 -L\n"
    )


@pytest.fixture(scope="module")
def page_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("docs-broker"), overrides={"group.initial.rebalance.delay.ms": 0})
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def _workdir(tmp_path: Path, broker: BrokerProcess) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "odradek-data").symlink_to(broker.data_dir)
    (work / ".venv").symlink_to(Path(sys.prefix))
    return work


def _run(block: Block, code: str, work: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    if block.lang == "python":
        cmd = [sys.executable, "-c", code]
    else:
        cmd = ["bash", "-euo", "pipefail", "-c", code]
    return subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("page", runnable_pages())
def test_the_runnable_blocks_of_a_page_run_as_written(page: str, page_broker: BrokerProcess, tmp_path: Path) -> None:
    work = _workdir(tmp_path, page_broker)
    # the quickstart's topic, which the pages take as there
    quick = _run(Block("-", 0, "sh", "", "runs"),
                 substitute("printf 'k1:hello\\nk2:world\\n' | odradek produce greetings --key-separator :",
                            page_broker), work)
    assert quick.returncode == 0, quick.stderr
    ran = 0
    for block in blocks(DOCS / page):
        if block.marker != "runs":
            continue
        result = _run(block, substitute(block.code, page_broker), work)
        assert result.returncode == 0, (
            f"docs/{block} exited {result.returncode}:\n{result.stderr[-4000:]}\nstdout: {result.stdout[-1500:]}"
        )
        ran += 1
    assert ran
