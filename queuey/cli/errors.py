"""How a command stops with one line on stderr instead of a traceback.

A command's own failures raise :class:`CommandError`; a refusal of the core's
catalogue (:data:`queuey.errors.CATALOGUE`: the commands that open the store
in-process meet them) is worded by :data:`EXIT_LINES`.
"""

from __future__ import annotations

from queuey.errors import Catalogued


class CommandError(Exception):
    """A failure to report in one line on stderr; ``exit_code`` is the status."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


#: The exit status of every catalogued refusal.
REFUSED = 1

_AS_SAID = "error: {exc}"

#: Every entry of the catalogue, by name: the line printed on stderr, formed
#: by ``line.format(exc=exc)``.
EXIT_LINES: dict[str, str] = {
    "invalid_parameters": _AS_SAID,
    "invalid_json": _AS_SAID,
    "not_json": _AS_SAID,
    "payload_too_large": _AS_SAID,
    "queue_not_found": "error: no queue named {exc}",
    "queue_exists": "error: a queue named {exc} exists already",
    "invalid_update": _AS_SAID,
    "schedule_not_found": "error: no schedule named {exc}",
    "schedule_exists": "error: a schedule named {exc} exists already",
    "schedule_conflict": "error: {exc}; try again",
    "too_many_schedules": "error: {exc} (queuey.schedules.limit)",
    "throttled": _AS_SAID,
    "too_many_queues": _AS_SAID,
    "queue_paused": _AS_SAID,
    "rate_limited": _AS_SAID,
    "queue_full": _AS_SAID,
    "quota_exceeded": _AS_SAID,
    "priority_on_fair_queue": _AS_SAID,
    "batch_over_burst": _AS_SAID,
    "too_many_subscriptions": _AS_SAID,
    "table_full": _AS_SAID,
    "storage_unavailable": "error: the store did not answer ({exc}); try again",
}


def exit_line(exc: Catalogued) -> str:
    """The one line a command prints for a catalogued refusal."""
    return EXIT_LINES[exc.entry.name].format(exc=exc)
