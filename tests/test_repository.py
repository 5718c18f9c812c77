"""The repository stands on its own: nothing in it refers to a file outside it.

The contract the code implements is stated in ``docs/``; a comment or a page
that sends the reader to a document kept elsewhere (a design brief, a shared
folder, a source document) points at something a clone does not have. Every
file git knows of (tracked, or new and not ignored) is searched.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]

#: Spelled in pieces so that this file does not match itself.
OUTSIDE = (
    "DESIGN" + ".md",
    "../" + "shared",
    "/work" + "/",
    "seeds" + "/",
)


def repository_files() -> list[Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    return [ROOT / name for name in listed.decode("utf-8").split("\0") if name]


def text_of(path: Path) -> str | None:
    """The file's text, or None for a binary file (or one deleted meanwhile)."""
    try:
        data = path.read_bytes()
    except (FileNotFoundError, IsADirectoryError):
        return None
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")


def test_no_file_refers_to_a_file_outside_the_repository():
    found = []
    for path in repository_files():
        text = text_of(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            for needle in OUTSIDE:
                if needle in line:
                    found.append(f"{path.relative_to(ROOT)}:{number}: {needle}")
    assert not found, "references to files outside the repository:\n" + "\n".join(found)


def test_the_harness_is_not_part_of_the_installed_package():
    """The service harness runs from a checkout (it finds ``etc/`` there), so it
    lives beside the package, not in it, and the wheel leaves it out."""
    assert (ROOT / "harness" / "__main__.py").is_file()
    assert not (ROOT / "queuey" / "harness").exists()
    setup = (ROOT / "setup.py").read_text(encoding="utf-8")
    assert '"harness"' in setup and '"harness.*"' in setup
