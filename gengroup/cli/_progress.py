"""Progress views of the long commands, drawn on stderr.

Theory of operation:

A command that may take a while (``produce``, ``consume --until-end``,
``topics create``/``add-partitions``, ``groups reset-offsets``) opens a
:class:`View` around its work and updates the view's tasks as it goes (a
counter, a position, a line of detail). The view is a :class:`rich.progress.Progress`
on **stderr**, so stdout (``--json`` output, printed records) is never touched.

Whether it is drawn: ``GENGROUP_PROGRESS=always`` draws it as on a terminal
even into a pipe or file (what the tests use), ``never`` hides it, and
otherwise (``auto``) it is drawn when stderr is a terminal -- and, for a
command printing records (``consume``), stdout is not the same terminal,
where the records themselves show the progress and a redrawn view would
overwrite them. A hidden view does nothing at all: no output, no thread.

Rich redraws the view from a thread of its own a few times a second; it only
reads the tasks' counters, which the command sets under rich's lock. On exit
the final state is drawn once more and left on screen.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Final, Literal

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from ._common import UsageError

__all__ = ["ENV", "View", "mode", "wanted"]

#: The variable choosing whether views are drawn: ``auto`` (default), ``always`` or ``never``.
ENV: Final = "GENGROUP_PROGRESS"

Mode = Literal["auto", "always", "never"]
_MODES: Final = {"auto": "auto", "always": "always", "1": "always", "never": "never", "0": "never"}


def mode() -> Mode:
    """The progress mode from ``GENGROUP_PROGRESS`` (``auto`` when unset).

    Raises:
        UsageError: the variable holds something else.
    """
    value = os.environ.get(ENV, "").strip().lower() or "auto"
    found = _MODES.get(value)
    if found is None:
        raise UsageError(f"{ENV} must be auto, always or never, not {value!r}")
    return found  # type: ignore[return-value]


def wanted(*, prints_records: bool = False) -> bool:
    """Whether a view is drawn.

    Args:
        prints_records: the command prints records on stdout: no view (in
            ``auto`` mode) when stdout is a terminal too.

    Raises:
        UsageError: a bad ``GENGROUP_PROGRESS``.
    """
    chosen = mode()
    if chosen != "auto":
        return chosen == "always"
    if not sys.stderr.isatty():
        return False
    return not (prints_records and sys.stdout.isatty())


class _Rate(ProgressColumn):
    """Records per second (rich's estimate over the last seconds)."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("" if speed is None else f"{speed:,.0f} records/s", style="cyan")


def _columns(kind: str) -> tuple[ProgressColumn, ...]:
    if kind == "records":
        return (
            TextColumn("[bold]{task.description}"),
            TextColumn("{task.fields[sent]:>9,} sent"),
            TextColumn("{task.completed:>9,.0f} acked"),
            _Rate(),
            TimeElapsedColumn(),
        )
    return (
        TextColumn("[bold]{task.description}"),
        BarColumn(bar_width=30),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
    )


class View:
    """A progress view on stderr, or nothing when not wanted.

    Args:
        kind: ``"records"`` (sent and acknowledged counts and a rate, per task)
            or ``"partitions"`` (a bar and a line of detail per task).
        enabled: whether it is drawn (see :func:`wanted`).
    """

    def __init__(self, kind: Literal["records", "partitions"], *, enabled: bool) -> None:
        self.enabled = enabled
        self._progress: Progress | None = None
        if enabled:
            console = Console(stderr=True, force_terminal=True if mode() == "always" else None)
            self._progress = Progress(
                *_columns(kind), console=console, refresh_per_second=4, transient=False
            )

    def __enter__(self) -> View:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._progress is not None:
            self._progress.refresh()
            self._progress.stop()

    def add(self, description: str, total: float | None = None, **fields: Any) -> TaskID:
        """A new task (a line of the view); its id, for :meth:`update`.

        Args:
            description: the line's name.
            total: the count at which it is complete (None: open-ended).
            fields: the values its columns show (``sent``; ``detail``).
        """
        if self._progress is None:
            return TaskID(-1)
        fields.setdefault("sent", 0)
        fields.setdefault("detail", "")
        return self._progress.add_task(description, total=total, **fields)

    def update(self, task: TaskID, **changes: Any) -> None:
        """Change a task: ``completed=``, ``advance=``, ``total=`` or a field's value."""
        if self._progress is not None:
            self._progress.update(task, **changes)
