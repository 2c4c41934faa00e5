"""Live progress per study: a rich progress bar on a terminal, plain lines otherwise, or one JSON
object per line for scripts (``tune --json-lines``)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import IO, Any, Protocol

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class Reporter(Protocol):
    """What the driver tells about progress; every method is cheap and never raises."""

    def add(self, label: str, budget: int, done: int) -> None: ...

    def update(self, label: str, done: int, best_ms: float | None) -> None: ...

    def note(self, text: str) -> None: ...

    def close(self) -> None: ...


class SilentReporter:
    """Reports nothing (``--json`` and library use)."""

    def add(self, label: str, budget: int, done: int) -> None:
        return None

    def update(self, label: str, done: int, best_ms: float | None) -> None:
        return None

    def note(self, text: str) -> None:
        return None

    def close(self) -> None:
        return None


class PlainReporter:
    """One line per change, at most every ``every_s`` seconds per study (logs, CI, pipes)."""

    def __init__(self, stream: IO[str] | None = None, every_s: float = 2.0) -> None:
        self.stream = stream or sys.stderr
        self.every_s = every_s
        self._budget: dict[str, int] = {}
        self._last: dict[str, float] = {}

    def add(self, label: str, budget: int, done: int) -> None:
        self._budget[label] = budget
        self._last[label] = 0.0
        self.note(f"study {label}: {done}/{budget} trials")

    def update(self, label: str, done: int, best_ms: float | None) -> None:
        now = time.monotonic()
        budget = self._budget.get(label, 0)
        if done < budget and now - self._last.get(label, 0.0) < self.every_s:
            return
        self._last[label] = now
        best = f"{best_ms:.4g} ms" if best_ms is not None else "-"
        self.note(f"study {label}: {done}/{budget} trials, best {best}")

    def note(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def close(self) -> None:
        return None


class JsonLinesReporter:
    """One JSON object per line, flushed at once, for every event: ``{"event": "study", "study",
    "budget", "done"}`` when a study is added, ``{"event": "trial", "study", "done", "budget",
    "best_ms"}`` after every trial, ``{"event": "note", "text"}``, and (from the caller, once the
    job ends) ``{"event": "summary", ...}``. Each also has ``"at"`` (ISO 8601, UTC)."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stdout
        self._budget: dict[str, int] = {}

    def _emit(self, event: str, fields: Mapping[str, Any]) -> None:
        at = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        line = json.dumps({"event": event, "at": at, **fields}, default=str)
        print(line, file=self.stream, flush=True)

    def add(self, label: str, budget: int, done: int) -> None:
        self._budget[label] = budget
        self._emit("study", {"study": label, "budget": budget, "done": done})

    def update(self, label: str, done: int, best_ms: float | None) -> None:
        budget = self._budget.get(label)
        self._emit("trial", {"study": label, "done": done, "budget": budget, "best_ms": best_ms})

    def note(self, text: str) -> None:
        self._emit("note", {"text": text})

    def summary(self, summary: Mapping[str, Any]) -> None:
        """The job's final summary (the same object ``tune --json`` prints), as the last line."""
        self._emit("summary", summary)

    def close(self) -> None:
        return None


class RichReporter:
    """A rich progress bar per study: trials done of budget and the best time so far."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("best {task.fields[best]}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        )
        self._tasks: dict[str, int] = {}
        self._progress.start()

    def add(self, label: str, budget: int, done: int) -> None:
        self._tasks[label] = int(
            self._progress.add_task(label, total=budget, completed=done, best="-")
        )

    def update(self, label: str, done: int, best_ms: float | None) -> None:
        task = self._tasks.get(label)
        if task is not None:
            best = f"{best_ms:.4g} ms" if best_ms is not None else "-"
            self._progress.update(task, completed=done, best=best)  # type: ignore[arg-type]

    def note(self, text: str) -> None:
        self._progress.console.print(text)

    def close(self) -> None:
        self._progress.stop()


def reporter_for(quiet: bool, stream: IO[str] | None = None) -> Reporter:
    """Silent when ``quiet``; a rich bar when the stream is a terminal; plain lines otherwise."""
    if quiet:
        return SilentReporter()
    out = stream or sys.stderr
    if out.isatty():
        return RichReporter(Console(file=out))
    return PlainReporter(out)
