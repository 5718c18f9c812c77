"""``queuey.server.close_app``: what ``pserve``'s parent process calls on the
app it built and never serves."""

from __future__ import annotations

import threading

import queuey
from queuey.server import close_app


def _threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.is_alive()}


def test_close_app_stops_the_refresher_the_ticker_and_the_storage(applications_file, tmp_path):
    app = queuey.main(
        {},
        **{
            "queuey.applications": str(applications_file),
            "queuey.storage.backend": "queuey.storage.sqlite",
            "queuey.sqlite.path": str(tmp_path / "parent.sqlite3"),
            "queuey.read_delay": "0",
            "queuey.stats.interval": "60",
            "queuey.schedules.interval": "60",
        },
    )
    storage = app.registry.queuey.storage
    closed = []
    real_close = storage.close
    storage.close = lambda: (closed.append(True), real_close())
    assert {"queuey-overview", "queuey-schedules"} <= _threads()

    close_app(app)

    assert not {"queuey-overview", "queuey-schedules"} & _threads()
    assert closed == [True]
