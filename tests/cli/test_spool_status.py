"""``queuey spool status`` on a file it cannot trust: one line on stderr naming
the file (and the record's offset), exit status 1, never a traceback
(issue 39, defect 9). No service needed."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from queuey.cli import main
from queuey.client import spoolfile
from queuey.client.spoolfile import MAGIC, MESSAGE_HEAD, frame

pytestmark = pytest.mark.unit

HEADER = spoolfile.header_record("abc", 0, {"sent": 0, "rejected": 0, "torn": 0})
SOUND = spoolfile.message_record(0, 1.0, "q", {"body": {}, "dedup_id": "abc-0"})
#: (file bytes, the offset the error names, words the line carries)
CASES = {
    "a message record cut short": (
        MAGIC + HEADER + frame(b"M", b"\x00" * 5) + SOUND,
        len(MAGIC + HEADER),
        "shorter than its 16-byte head",
    ),
    "bad JSON": (
        MAGIC + HEADER + frame(b"M", MESSAGE_HEAD.pack(0, 1.0) + b'{"q":"q","e":'),
        len(MAGIC + HEADER),
        "not JSON",
    ),
    "bad UTF-8": (
        MAGIC + HEADER + SOUND + frame(b"M", MESSAGE_HEAD.pack(1, 1.0) + b'{"q":"\xff"}'),
        len(MAGIC + HEADER + SOUND),
        "not UTF-8",
    ),
    "a wrong type": (
        MAGIC + HEADER + frame(b"M", MESSAGE_HEAD.pack(0, 1.0) + b'{"q":["q"],"e":{}}') + SOUND,
        len(MAGIC + HEADER),
        "queue: not a queue name",
    ),
    "an unknown record type": (
        MAGIC + HEADER + frame(b"Z", b"") + SOUND,
        len(MAGIC + HEADER),
        "unknown record type",
    ),
    "a header without spool_id": (
        MAGIC + frame(b"H", b'{"first_seq": 0}') + SOUND,
        len(MAGIC),
        "spool_id",
    ),
}


def status(*argv: str) -> int:
    """The command in-process; the CLI quiets the client's logger, put back after."""
    logger = logging.getLogger("queuey.client")
    level = logger.level
    try:
        return main(["spool", "status", *argv])
    finally:
        logger.setLevel(level)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_malformed_record_is_one_line_and_exit_1(tmp_path, capsys, case):
    data, offset, words = CASES[case]
    path = tmp_path / "s"
    path.write_bytes(data)
    for argv in ([str(path)], ["--json", str(path)]):
        assert status(*argv) == 1
        out, err = capsys.readouterr()
        assert out == ""
        assert err.count("\n") == 1 and "Traceback" not in err
        assert err.startswith(f"queuey spool: bad spool file {path}, record at offset {offset}: ")
        assert words in err
    assert path.read_bytes() == data


def test_a_symlinked_file_is_refused_in_one_line(tmp_path, capsys):
    target = tmp_path / "real"
    target.write_bytes(MAGIC + HEADER + SOUND)
    (tmp_path / "link").symlink_to(target)
    assert status(str(tmp_path / "link")) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == (
        f"queuey spool: cannot read {tmp_path / 'link'}: "
        "refused: a symbolic link (the spool follows none)\n"
    )
    assert status(str(target)) == 0  # the file itself reads
    assert "spooled" in capsys.readouterr().out


def test_the_installed_command_prints_one_line_without_a_traceback(tmp_path):
    data, offset, _ = CASES["bad JSON"]
    path = tmp_path / "s"
    path.write_bytes(data)
    command = "import sys; from queuey.cli import main; sys.exit(main())"
    done = subprocess.run(
        [sys.executable, "-c", command, "spool", "status", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert f"{path}, record at offset {offset}" in done.stderr
