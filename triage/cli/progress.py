"""What a command shows on a terminal while it works: spinners, progress bars, the model-load
notice. Nothing is drawn when stderr is not a terminal."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click


def announce_model_load(quiet: bool, embed: bool = True) -> None:
    """On a terminal, say so when the similarity model has to load (seconds, once): the rules
    did not settle the case. Never when the rules settle it, since it then does not load.

    Only then is the classifier imported here: otherwise it loads while the workers parse
    (`pipeline.warm_later_stages`), not before they can start (~0.15 s of every run)."""
    loaded = sys.modules.get("triage.classify.neighbours")
    if loaded is not None:  # an earlier command in this process (tests, a batch) left one
        loaded.on_model_load(None)
    if quiet or not embed or not sys.stderr.isatty():
        return
    from triage.classify import neighbours

    neighbours.on_model_load(_say_model_loads)


def _say_model_loads() -> None:
    """The running spinner says it (one line that goes away); without one, a line of its own."""
    if Spinner.active is not None and Spinner.active.status is not None:
        Spinner.active.status.update(f"{Spinner.active.message}: {_MODEL_LOADS}")
    else:
        click.echo(_MODEL_LOADS, err=True)


_MODEL_LOADS = "loading the similarity model… (a few seconds, once)"


def working_on(what: str, embeddings: bool) -> str:
    # the model-load hook adds "loading the similarity model" when (and only when) it loads
    return f"diagnosing {what}"


class Spinner:
    """A transient spinner line on stderr while work of unknown length runs; terminals only.

    rich draws it from a thread of its own: never start one while parser workers may be
    forked (`pool.default_workers` reads from one process only when it has no threads).
    """

    active: Spinner | None = None  # the one on screen, for the model-load notice

    def __init__(self, enabled: bool, message: str) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.message = message
        self.status: Any = None

    def __enter__(self) -> Spinner:
        if self.enabled:
            from rich.console import Console

            self.status = Console(stderr=True).status(self.message, spinner="dots")
            self.status.start()
            Spinner.active = self
        return self

    def __exit__(self, *exc: object) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None
        if Spinner.active is self:
            Spinner.active = None


class BatchProgress:
    """Per-job progress of `triage batch` on a terminal: done/total and the last job's answer."""

    def __init__(self, total: int) -> None:
        self.enabled = sys.stderr.isatty() and total > 0
        self.total = total
        self.bar: Any = None
        self.task: Any = None

    def __enter__(self) -> BatchProgress:
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            # No refresh thread: the batch forks its worker processes after this, and a
            # process that forks while another thread holds a lock can deadlock the children.
            self.bar = Progress(
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.description}"),
                console=Console(stderr=True),
                transient=True,
                auto_refresh=False,
            )
            self.bar.start()
            self.task = self.bar.add_task("jobs", total=self.total)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def row(self, row: dict[str, Any]) -> None:
        """`run_batch`'s callback: one finished job (`{"job", "diagnosis"|"error"}`)."""
        if self.bar is None:
            return
        name = Path(str(row.get("job", ""))).name
        if "error" in row:
            said = f"error: {str(row['error'])[:60]}"
        else:
            d = row.get("diagnosis") or {}
            labels = d.get("root_causes") or d.get("symptoms") or []
            said = f"{labels[0]['id']} {labels[0]['name']}" if labels else "no cause named"
        self.bar.console.print(f"{name}: {said}", highlight=False, markup=False)
        self.bar.update(self.task, advance=1, description=name)
        self.bar.refresh()


class FleetProgress:
    """`triage fleet`'s progress on stderr: a bar on a terminal, else a line per tenth."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.bar: Any = None
        self.task: Any = None
        self.said = -1

    def __enter__(self) -> FleetProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def update(self, event: str, done: int, total: int, name: str) -> None:
        """`run_fleet`'s callback: "hash" while digests are taken, "job" per finished job."""
        if not self.enabled or total <= 0:
            return
        what = "checking" if event == "hash" else "reading new jobs"
        if not self.tty:
            tenth = done * 10 // total
            if event == "job" and (tenth != self.said or done == total):
                self.said = tenth
                click.echo(f"fleet: {done}/{total} new jobs read", err=True)
            return
        if self.bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            # No refresh thread: the pool forks its workers after this (see BatchProgress).
            self.bar = Progress(
                TextColumn("{task.fields[what]}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.description}"),
                console=Console(stderr=True),
                transient=True,
                auto_refresh=False,
            )
            self.bar.start()
            self.task = self.bar.add_task("", total=total, what=what)
        desc = Path(name).name
        self.bar.update(self.task, completed=done, total=total, description=desc, what=what)
        self.bar.refresh()


class ReadProgress:
    """A rich progress line on stderr, shown only when reading takes more than a second;
    then a spinner while the later stages run (loading the similarity model takes seconds)."""

    def __init__(self, enabled: bool, model: bool = False) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.model = model
        self.started = time.monotonic()
        self.bar: Any = None
        self.task: Any = None
        self.spinner: Spinner | None = None

    def __enter__(self) -> ReadProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()
        if self.spinner is not None:
            self.spinner.__exit__()

    def update(self, sources: int, done_bytes: int, path: str) -> None:
        """`read_inputs`' progress callback; an empty path means reading is over."""
        if not self.enabled:
            return
        if not path:
            self.enabled = False
            if self.bar is not None:
                self.bar.stop()
                self.bar = None
            # reading is over and its workers are gone: a spinner thread is safe now
            self.spinner = Spinner(True, working_on(f"{sources} inputs", self.model))
            self.spinner.__enter__()
            return
        if self.bar is None:
            if time.monotonic() - self.started < 1.0:
                return
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self.bar = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("reading")
        mib = done_bytes / 2**20
        self.bar.update(self.task, description=f"read {sources} inputs, {mib:,.0f} MiB  {path}")
