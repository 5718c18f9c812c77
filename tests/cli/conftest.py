"""Fixtures of the command-line tests: a live Queuey and the ``queuey`` command
run in-process against it, with the connection in the environment."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from queuey.cli import main
from queuey.client.http import QueueyClient


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def server(live_server):
    return live_server


@pytest.fixture
def client(server):
    with QueueyClient(server.url, server.application, server.key) as c:
        yield c


@pytest.fixture
def queuey(server, monkeypatch, capsys):
    """``queuey(*argv)`` runs the command against ``server`` and returns a Result."""

    def run(*argv: str, key: str | None = None) -> Result:
        capsys.readouterr()
        monkeypatch.setenv("QUEUEY_URL", server.url)
        monkeypatch.setenv("QUEUEY_APPLICATION", server.application)
        monkeypatch.setenv("QUEUEY_KEY", server.key if key is None else key)
        code = main(list(argv))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run
