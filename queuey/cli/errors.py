"""The one error a command raises to stop with a message instead of a traceback."""

from __future__ import annotations


class CommandError(Exception):
    """A failure to report in one line on stderr; ``exit_code`` is the status."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code
