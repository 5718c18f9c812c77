"""How a command stops with one line on stderr instead of a traceback.

A command's own failures raise :class:`CommandError`; a refusal of the core's
catalogue (:data:`queuey.errors.CATALOGUE`: the commands that open the store
in-process meet them) is worded by :data:`EXIT_LINES`.
"""

from __future__ import annotations

from queuey.errors import CATALOGUE, Catalogued


class CommandError(Exception):
    """A failure to report in one line on stderr; ``exit_code`` is the status."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


#: The exit status of every catalogued refusal.
REFUSED = 1

#: Every entry of the catalogue, by name: the line printed on stderr, formed
#: by ``line.format(exc=exc)``: the API's text, and for what mends itself a
#: hint to run the command again (with the store's own words when it is down).
EXIT_LINES: dict[str, str] = {name: f"error: {e.text}" for name, e in CATALOGUE.items()} | {
    "schedule_conflict": "error: {exc}; try again",
    "storage_unavailable": "error: the store did not answer ({exc}); try again",
}


def exit_line(exc: Catalogued) -> str:
    """The one line a command prints for a catalogued refusal."""
    return EXIT_LINES[exc.entry.name].format(exc=exc)
