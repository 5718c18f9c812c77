"""Where the commands write: rich consoles for tables and progress bars.

Tables go to stdout; progress bars go to stderr, and only when stderr is a
terminal, so redirected output and logs stay clean.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

#: Widest table written when stdout is not a terminal (a pipe or a file).
PIPE_WIDTH = 200


def print_table(
    titles: Sequence[str],
    rows: Iterable[Sequence[str]],
    right: Collection[str] = (),
    header: bool = True,
) -> None:
    """``rows`` under ``titles`` on stdout, without borders; the columns whose
    title is in ``right`` are justified to the right."""
    table = Table(box=None, pad_edge=False, show_header=header)
    for title in titles:
        table.add_column(title, justify="right" if title in right else "left")
    for row in rows:
        table.add_row(*row)
    console = Console(file=sys.stdout, highlight=False)
    if not console.is_terminal:
        console = Console(file=sys.stdout, highlight=False, width=PIPE_WIDTH)
    console.print(table)


@contextmanager
def progress_bar(
    description: str, total: int | None, quiet: bool
) -> Iterator[tuple[Progress, TaskID]]:
    """A progress bar on stderr; a disabled one when ``quiet`` or stderr is no terminal."""
    console = Console(file=sys.stderr)
    progress = Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=quiet or not console.is_terminal,
    )
    with progress:
        task = progress.add_task(description, total=total, rate="")
        yield progress, task
