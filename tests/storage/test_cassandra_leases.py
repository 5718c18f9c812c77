"""Lease tokens (:func:`queuey.storage.cassandra.leases.new_token`): drawn
from the operating system's random source in bulk, never repeated, not even
by a process forked after its parent drew some."""

from __future__ import annotations

import os

from queuey.storage.cassandra.leases import new_token


def test_tokens_do_not_repeat():
    tokens = [new_token() for _ in range(5000)]  # several refills of the pool
    assert len(set(tokens)) == len(tokens)
    assert all(len(t) == 16 and int(t, 16) >= 0 for t in tokens)


def test_a_forked_child_does_not_hand_out_its_parents_tokens():
    new_token()  # the parent's pool now holds bytes it has not used
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next tokens, to the parent
        try:
            os.write(write, ",".join(new_token() for _ in range(4)).encode())
        finally:
            os._exit(0)
    os.close(write)
    try:
        child = set(os.read(read, 1024).decode().split(","))
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    parent = {new_token() for _ in range(4)}
    assert len(child) == 4
    assert not child & parent
