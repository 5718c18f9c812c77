"""What flow control's counting costs one post, in process: admission
(:meth:`queuey.core.flow.FlowControl.admit_post`) and its settling, on
file-backed tables as the server's processes share them on SQLite.

    python bench/admission.py [--posts 20000] [--runs 3]

``none``: the application has no limits (nothing is counted); ``quota``: it
has a stored quota (every post is counted, under the table's lock). To
compare two commits, run it alternately in a checkout of each
(``PYTHONPATH=<checkout> python bench/admission.py``). Prints one JSON object:
microseconds per post, each run and the median.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

from queuey.core.flow import AppLimits, FlowControl
from queuey.core.lengths import Lengths
from queuey.model import NewMessage, QueueMeta


class _Clock:
    def now_micros(self) -> int:
        return int(time.time() * 1e6)


def per_post(limits: AppLimits, posts: int) -> float:
    """Microseconds per admitted and settled single-message post."""
    with tempfile.TemporaryDirectory() as directory:
        flow = FlowControl(_Clock(), lengths=Lengths(directory), app_limits=lambda app: limits)
        meta = QueueMeta("bench", "q", incarnation="one")
        messages = [NewMessage('{"p": "x"}', 1, 3600)]

        def post() -> None:
            admission = flow.admit_post(meta, messages)
            getattr(admission, "stored", lambda: None)()  # commits before 98ba74d settle nothing

        for _ in range(500):
            post()
        began = time.perf_counter()
        for _ in range(posts):
            post()
        return (time.perf_counter() - began) / posts * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--posts", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    cases = {"none": AppLimits(), "quota": AppLimits(messages=10**9, bytes=10**12)}
    figures = {}
    for name, limits in cases.items():
        runs = [round(per_post(limits, args.posts), 2) for _ in range(args.runs)]
        figures[name] = {"us_per_post": runs, "median": statistics.median(runs)}
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
