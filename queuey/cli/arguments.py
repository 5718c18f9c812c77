"""Argument types the commands share: numbers checked before use."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def positive(text: str) -> int:
    """An integer of at least 1 (a count, a partition number)."""
    if not text.isdigit() or len(text) > 18 or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a whole number of at least 1: {text!r}")
    return int(text)


def at_most(high: int) -> Callable[[str], int]:
    """An integer from 1 to ``high``."""

    def parse(text: str) -> int:
        value = positive(text)
        if value > high:
            raise argparse.ArgumentTypeError(f"give 1 to {high}")
        return value

    return parse
