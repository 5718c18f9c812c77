"""``queuey.server.close_app``: what ``pserve``'s parent process calls on the
app it built and never serves."""

from __future__ import annotations

import threading

import queuey
from queuey.server import close_app

#: The threads an app's parent process runs besides serving.
NAMES = {"queuey-overview", "queuey-schedules"}


def test_close_app_stops_the_refresher_the_ticker_and_the_storage(applications_file, tmp_path):
    # Other tests' apps may have left threads of these names: this app's are the new ones.
    before = set(threading.enumerate())
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
    mine = [t for t in threading.enumerate() if t not in before and t.name in NAMES]
    assert {t.name for t in mine} == NAMES

    close_app(app)

    assert [t.name for t in mine if t.is_alive()] == []
    assert closed == [True]
