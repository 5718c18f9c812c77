"""The operators' figures file a server's refresher publishes and its
workers read (queuey.core.snapshot): a reader takes a new file once, and a
file it cannot read (torn, or written by other code) is skipped, never
raised into the scrape or page that reads the figures."""

from __future__ import annotations

import pickle
from typing import NamedTuple

import pytest

from queuey.core.snapshot import read_snapshot, write_snapshot

pytestmark = pytest.mark.unit


class _Gone(NamedTuple):
    a: int
    b: int


def test_a_new_snapshot_is_read_once(tmp_path):
    path = tmp_path / "overview.pickle"
    assert read_snapshot(path, None) is None  # none published yet
    write_snapshot(path, {"entries": {("app", "q"): 1}})
    stamp, snapshot = read_snapshot(path, None)
    assert snapshot == {"entries": {("app", "q"): 1}}
    assert read_snapshot(path, stamp) is None  # unchanged: nothing to read again
    write_snapshot(path, {"entries": {}})
    assert read_snapshot(path, stamp)[1] == {"entries": {}}


def test_an_unreadable_snapshot_is_skipped(tmp_path, monkeypatch, caplog):
    path = tmp_path / "overview.pickle"
    path.write_bytes(pickle.dumps({"entries": {}})[:-5])  # torn
    assert read_snapshot(path, None) is None
    # Written by code whose class took other fields: it no longer unpickles.
    path.write_bytes(pickle.dumps({"entries": {"k": _Gone(1, 2)}}))
    monkeypatch.setattr(_Gone, "__new__", lambda cls, a, b, c: None)
    assert read_snapshot(path, None) is None
    print(f"\n{caplog.text}")
    assert caplog.text.count("operators' figures not read") == 2
