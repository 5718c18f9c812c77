"""A producer process posting through a :class:`~queuey.client.Spool` (run by
tests/faults/test_spool_kill.py, which kills it with ``kill -9``).

    python -m tests.faults.spool_producer URL APPLICATION KEY SPOOL QUEUE COUNT ACKED
        [--threads 4] [--drain-only] [--send-rate N]

Posts ``{"key": "k<n>", "n": n}`` for n in 0..COUNT-1 from ``--threads``
threads, appending ``n`` to the file ACKED as soon as the spool accepted it
(the producer's acknowledgement), then waits until the spool is empty.
``--drain-only``: post nothing, only send what the spool holds.
``--send-rate N``: the sender sends at most N messages a second (it sleeps
after each batch is stored, before the spool marks it sent), so a test can
count on the spool still holding messages, some of them in flight, when it
kills the producer however fast the node and the disk are.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time

from queuey.client import QueueyClient, Spool


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("url", "application", "key", "spool", "queue"):
        parser.add_argument(name)
    parser.add_argument("count", type=int)
    parser.add_argument("acked")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--drain-only", action="store_true")
    parser.add_argument("--send-rate", type=float, default=0.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    client = QueueyClient(args.url, args.application, args.key, timeout=10, retries=2)
    if args.send_rate:
        post_batch = client.post_batch

        def paced(queue, messages, *rest, **options):
            answer = post_batch(queue, messages, *rest, **options)
            time.sleep(len(messages) / args.send_rate)
            return answer

        client.post_batch = paced
    spool = Spool(client, args.spool, backoff=0.1, max_backoff=2.0)
    if not args.drain_only:
        lock = threading.Lock()
        with open(args.acked, "a", buffering=1, encoding="ascii") as acked:

            def post(start: int) -> None:
                for n in range(start, args.count, args.threads):
                    spool.post(args.queue, {"key": f"k{n}", "n": n}, partition_key=f"p{n % 16}")
                    with lock:
                        acked.write(f"{n}\n")

            threads = [threading.Thread(target=post, args=(i,)) for i in range(args.threads)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    empty = spool.close(timeout=None)
    print(f"drained: {empty}; {spool.stats()}", flush=True)
    return 0 if empty else 1


if __name__ == "__main__":
    sys.exit(main())
