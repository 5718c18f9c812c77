"""Every key of every settings table is documented, every documented key exists,
and every default a table shows as a literal is the declared one.

The keys are the tables of :mod:`queuey.settingstable`: the server's, each
storage backend's and the worker's are documented in docs/configuration.rst,
the Spark data source's options in docs/spark.rst. A documented key is a
literal (````name````) in the first column of a table row in one of the
sections named below, where the settings tables live.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from queuey.client.worker.config import WORKER
from queuey.settings import SERVER
from queuey.settingstable import Table
from queuey.spark.options import CONNECTION, READ, WRITE
from queuey.storage.cassandra.settings import CASSANDRA
from queuey.storage.sqlite.config import SQLITE

pytestmark = pytest.mark.unit

DOCS = Path(__file__).resolve().parents[1] / "docs"

#: Each page: its tables and the sections whose tables document them.
PAGES: dict[str, tuple[tuple[Table, ...], tuple[str, ...]]] = {
    "configuration.rst": (
        (SERVER, CASSANDRA, SQLITE, WORKER),
        (
            "Service settings",
            "Embedded store (SQLite)",
            "Cassandra",
            "Limits per application",
            "Workers",
        ),
    ),
    "spark.rst": ((CONNECTION, READ, WRITE), ("Options",)),
}

_UNDERLINE = re.compile(r"^([=\-~^\"'])\1{2,}$")
_LITERAL = re.compile(r"``([^`]+)``")
_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_.]*$")


def _sections(text: str) -> dict[str, list[str]]:
    """Each section's lines, by title (a title is a line over an underline)."""
    lines = text.splitlines()
    found: dict[str, list[str]] = {}
    current: list[str] = []
    for i, line in enumerate(lines):
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if line.strip() and _UNDERLINE.match(following) and len(following) >= len(line.strip()):
            current = found.setdefault(line.strip(), [])
            continue
        current.append(line)
    return found


_BORDER = re.compile(r"^=+(\s+=+)+$")


def _rows(lines: list[str]) -> list[str]:
    """The lines inside tables: a simple table's rows (between its header rule
    and its bottom rule; three rules a table) and a list-table's items."""
    rows, rules = [], 0
    for line in lines:
        if _BORDER.match(line.strip()):
            rules += 1
        elif rules % 3 == 2 or re.match(r"^\s*\* - ", line):
            rows.append(line)
    return rows


def _first_column(line: str) -> str | None:
    """The first cell of a table row: a simple table's (up to two spaces) or a list-table's."""
    listed = re.match(r"^\s*\* - (.*)$", line)
    if listed:
        return listed.group(1)
    if line.startswith("``"):
        return re.split(r"\s{2,}", line, maxsplit=1)[0]
    return None


def documented(page: str) -> set[str]:
    """The keys the page's settings sections document."""
    _tables, titles = PAGES[page]
    sections = _sections((DOCS / page).read_text())
    keys: set[str] = set()
    for title in titles:
        assert title in sections, f"{page} has no section {title!r}"
        for line in _rows(sections[title]):
            cell = _first_column(line)
            if cell is not None:
                keys.update(k for k in _LITERAL.findall(cell) if _KEY.match(k))
    return keys


def shown_defaults(page: str) -> dict[str, str]:
    """The defaults the page's tables show as literals, by key (tables with a
    ``default`` column; a default in words, such as "(required)", is not read)."""
    _tables, titles = PAGES[page]
    sections = _sections((DOCS / page).read_text())
    shown: dict[str, str] = {}
    for title in titles:
        rules, header = 0, ""
        for line in sections[title]:
            if _BORDER.match(line.strip()):
                rules += 1
            elif rules % 3 == 1:
                header = line
            elif rules % 3 == 2 and header.split()[1:2] == ["default"]:
                cells = re.split(r"\s{2,}", line.strip())
                key, default = (_LITERAL.fullmatch(c) for c in (cells + [""])[:2])
                if key and default:
                    shown[key.group(1)] = default.group(1)
    return shown


def declared(page: str) -> set[str]:
    tables, _titles = PAGES[page]
    return {name for table in tables for name in table.names()}


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_key_is_documented(page):
    assert sorted(declared(page) - documented(page)) == []


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_documented_key_exists(page):
    assert sorted(documented(page) - declared(page)) == []


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_default_shown_is_the_declared_one(page):
    tables, _titles = PAGES[page]
    keys = {key.name: key for table in tables for key in table.keys}
    shown = shown_defaults(page)
    assert {k: keys[k].default for k in shown} == shown


def test_the_checker_reads_defaults():
    assert shown_defaults("configuration.rst")["queuey.read_delay"] == "0"


def test_the_checker_reads_both_kinds_of_table():
    table = ["``prose``", "===  ===", "key  meaning", "===  ===", "``a``  x", "===  ===", "``b``"]
    assert _rows(table) == ["``a``  x"]
    assert _first_column("``a.b``, ``c``     meaning ``d``") == "``a.b``, ``c``"
    assert _first_column("   * - ``queuey.cassandra.port``") == "``queuey.cassandra.port``"
    assert _first_column("     - CQL port") is None
    assert _first_column("every other ``/queue`` call") is None
