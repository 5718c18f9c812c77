"""Consumer benchmark: queuey-worker processes draining a 16-partition queue.

    python bench/consumers.py [--messages 200000] [--batch-size 500] [--session-timeout 6]

Starts ZooKeeper through the harness and a Queuey server (the production server
of ``bench/api.py``: granian, 2 workers, SQLite) in its own process, fills a
16-partition queue, then measures:

* end-to-end consumption in messages/s with 1, 2 and 4 ``queuey-worker``
  processes (job ``examples.crash_worker:noop``), each run a new consumer group
  starting from the beginning; timed from the moment every member has joined
  until every partition's checkpoint reached its last message;
* ownership settling after a member joins, after one leaves (SIGTERM) and after
  one is killed with ``kill -9`` (its partitions owned again: session expiry
  plus rebalance);
* peak RSS of one worker draining a queue 4 times shallower and the full queue:
  memory follows the batch size, not the queue depth.

Prints one JSON object on stdout; progress goes to stderr. Not a pytest test.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psutil
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.api import Server  # noqa: E402
from queuey.client import Checkpoint, OutgoingMessage, QueueyClient  # noqa: E402

APP, KEY = "bench", "bench-key"
PARTITIONS = 16
WORKER_INI = """
[queuey]
urls = {url}
application = {app}
key = {key}

[zookeeper]
hosts = {hosts}
root = {root}
session_timeout = {session_timeout}

[worker]
group = {group}
queues = {queue}
job = examples.crash_worker:noop
batch_size = {batch_size}
idle_backoff = 0.05
idle_max_backoff = 0.5
rebalance_timeout = 10
discovery_interval = 2
pythonpath = {root_dir}
"""


def progress(text: str) -> None:
    print(f"[consumers] {text}", file=sys.stderr, flush=True)


class Workers:
    """A consumer group of ``queuey-worker`` processes, with RSS sampling."""

    def __init__(self, bench: Bench, group: str, queue: str) -> None:
        self.bench, self.group, self.queue = bench, group, queue
        self.procs: dict[str, subprocess.Popen] = {}
        self.peak_rss: dict[str, int] = {}
        self.ini = bench.workdir / f"{group}.ini"
        self.ini.write_text(
            WORKER_INI.format(
                url=bench.server.url,
                app=APP,
                key=KEY,
                hosts=bench.zk_hosts,
                root=bench.root,
                session_timeout=bench.args.session_timeout,
                group=group,
                queue=queue,
                batch_size=bench.args.batch_size,
                root_dir=ROOT,
            )
        )
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def start(self, name: str) -> None:
        log = (self.bench.workdir / f"{name}.log").open("wb")
        self.procs[name] = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "queuey-worker"),
                "-c",
                str(self.ini),
                "--member-id",
                name,
                "--log-level",
                "WARNING",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        log.close()

    def _sample(self) -> None:
        while not self._stop.is_set():
            for name, proc in list(self.procs.items()):
                try:
                    rss = psutil.Process(proc.pid).memory_info().rss
                except psutil.Error:
                    continue
                self.peak_rss[name] = max(self.peak_rss.get(name, 0), rss)
            time.sleep(0.05)

    def base(self) -> str:
        return f"{self.bench.root}/{self.group}"

    def members(self) -> list[str]:
        zk = self.bench.zk
        path = f"{self.base()}/members"
        return zk.get_children(path) if zk.exists(path) else []

    def owners(self) -> dict[int, str]:
        zk, path = self.bench.zk, f"{self.base()}/owners/{self.queue}"
        found = {}
        for child in zk.get_children(path) if zk.exists(path) else []:
            try:
                data, _ = zk.get(f"{path}/{child}")
            except NoNodeError:  # released while we looked
                continue
            found[int(child)] = json.loads(data)["member"]
        return found

    def checkpoints(self) -> dict[int, str]:
        zk, path = self.bench.zk, f"{self.base()}/checkpoints/{self.queue}"
        found = {}
        for child in zk.get_children(path) if zk.exists(path) else []:
            cp = Checkpoint.from_bytes(zk.get(f"{path}/{child}")[0])
            if cp:
                found[int(child)] = cp.message_id
        return found

    def signal(self, name: str, sig: signal.Signals) -> None:
        self.procs[name].send_signal(sig)
        self.procs[name].wait(timeout=60)
        del self.procs[name]

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.signal(name, signal.SIGTERM)
        self._stop.set()
        self._sampler.join()


def wait(predicate, timeout: float, what: str, interval: float = 0.05) -> float:
    """Poll until true; returns the monotonic time it became true."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
    return time.monotonic()


class Bench:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        from harness import zookeeper

        self.args = args
        self.workdir = workdir
        progress("starting ZooKeeper and the server")
        running = zookeeper.ensure_running()
        self.zk_hosts = getattr(running, "hosts", running)
        self.root = f"/queuey-bench-{uuid.uuid4().hex[:8]}"
        self.zk = KazooClient(hosts=self.zk_hosts)
        self.zk.start(timeout=30)
        self.server = Server("sqlite", workdir, log_level="WARNING")
        self.client = QueueyClient(self.server.url, APP, KEY, timeout=60)

    def close(self) -> None:
        self.client.close()
        self.server.stop()
        self.zk.delete(self.root, recursive=True)
        self.zk.stop()
        self.zk.close()

    def fill(self, queue: str, count: int) -> dict[int, str]:
        """Post ``count`` messages round-robin; the last id of every partition."""
        self.client.create_queue(queue, partitions=PARTITIONS)
        last: dict[int, str] = {}
        body = {"crash_id": "x" * 36, "product": "Firefox", "version": "146.0"}
        for start in range(0, count, 500):
            batch = [
                OutgoingMessage(body, partition=n % PARTITIONS + 1)
                for n in range(start, min(count, start + 500))
            ]
            for posted in self.client.post_batch(queue, batch):
                last[posted.partition] = posted.message_id
        return last

    def consume(self, queue: str, last: dict[int, str], workers: int, group: str) -> dict:
        """Drain ``queue`` with a fresh group of ``workers`` processes."""
        group_workers = Workers(self, group, queue)
        started = time.monotonic()
        for i in range(workers):
            group_workers.start(f"{group}-{i}")
        joined = wait(lambda: len(group_workers.members()) == workers, 60, "members")
        done = wait(lambda: group_workers.checkpoints() == last, 600, "drained", interval=0.1)
        group_workers.stop_all()
        seconds = done - joined
        count = self.args.messages if queue == "full" else self.args.messages // 4
        return {
            "workers": workers,
            "messages": count,
            "seconds": round(seconds, 2),
            "messages_per_second": round(count / seconds),
            "wall_seconds_with_startup": round(done - started, 2),
            "peak_rss_mib_per_worker": round(max(group_workers.peak_rss.values()) / 2**20, 1),
        }

    def rebalance(self, queue: str) -> dict:
        """Settle times after a join, a clean leave and a kill -9 (4 members at the end)."""
        group = Workers(self, "rebalance", queue)
        for i in range(3):
            group.start(f"r{i}")
        wait(lambda: set(group.owners().values()) == {"r0", "r1", "r2"}, 60, "3 owners")

        def settled(names: set[str]) -> bool:
            owned = group.owners()
            if len(owned) != PARTITIONS or set(owned.values()) != names:
                return False
            counts = [list(owned.values()).count(n) for n in names]
            return max(counts) - min(counts) <= 1

        t0 = time.monotonic()
        group.start("r3")
        join = wait(lambda: settled({"r0", "r1", "r2", "r3"}), 60, "join") - t0
        # the newcomer's start-up (interpreter, imports) is part of that time; measure
        # from the moment its member node appeared too
        t0 = time.monotonic()
        group.signal("r0", signal.SIGTERM)
        leave = wait(lambda: settled({"r1", "r2", "r3"}), 60, "leave") - t0
        victim_owned = sum(1 for m in group.owners().values() if m == "r1")
        t0 = time.monotonic()
        group.signal("r1", signal.SIGKILL)
        kill = wait(lambda: settled({"r2", "r3"}), 120, "takeover") - t0
        group.stop_all()
        return {
            "join_seconds_including_worker_startup": round(join, 2),
            "sigterm_leave_seconds": round(leave, 2),
            "kill9_takeover_seconds": round(kill, 2),
            "kill9_victim_partitions": victim_owned,
            "session_timeout": self.args.session_timeout,
            "rebalance_timeout": 10,
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--session-timeout", type=float, default=6.0)
    parser.add_argument("--workers", default="1,2,4")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="queuey-bench-consumers-") as tmp:
        bench = Bench(args, Path(tmp))
        try:
            progress(f"filling a {PARTITIONS}-partition queue with {args.messages} messages")
            t0 = time.monotonic()
            last_full = bench.fill("full", args.messages)
            fill_seconds = time.monotonic() - t0
            last_quarter = bench.fill("quarter", args.messages // 4)
            runs = []
            for count in (int(w) for w in args.workers.split(",")):
                progress(f"draining with {count} worker(s)")
                runs.append(bench.consume("full", last_full, count, f"drain-{count}"))
            progress("memory at a quarter of the depth")
            shallow = bench.consume("quarter", last_quarter, 1, "shallow")
            progress("rebalancing")
            rebalance = bench.rebalance("full")
        finally:
            bench.close()
    deep = min(runs, key=lambda r: r["workers"])
    result = {
        "partitions": PARTITIONS,
        "messages": args.messages,
        "batch_size": args.batch_size,
        "fill_messages_per_second": round(args.messages / fill_seconds),
        "consumption": runs,
        "rebalance": rebalance,
        "memory": {
            "peak_rss_mib_one_worker_depth_full": deep["peak_rss_mib_per_worker"],
            "peak_rss_mib_one_worker_depth_quarter": shallow["peak_rss_mib_per_worker"],
            "depths": [args.messages, args.messages // 4],
        },
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
