"""Output files of commands: checked before any work, written whole or not at all.

A command that works for minutes (``record``) or writes several files (``plot``) checks its
output folder first (:func:`check_folder`), so a bad ``--out`` fails in one line before anything
is timed, and writes each file through a temporary file next to it (:func:`write_atomically`),
so an interrupted or failed write leaves no half file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from orchestrator.errors import OrchestratorError


class OutputError(OrchestratorError):
    """An output path cannot be written (bad folder, no permission, read-only file system)."""


def check_folder(folder: Path, option: str = "--out") -> None:
    """Create ``folder`` if needed and prove a file can be created in it; OutputError if not."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".tunefleet-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutputError(
            f"cannot write into {folder} ({exc.strerror or exc}); choose another {option}"
        ) from None


def check_file(path: Path, option: str = "--out") -> None:
    """:func:`check_folder` for ``path``'s folder; OutputError also if ``path`` is a folder."""
    if path.is_dir():
        raise OutputError(f"{option} {path} is a folder; give a file name")
    check_folder(path.parent, option)


def write_atomically(path: Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(temp)`` for a temporary file next to ``path`` (same suffixes), then rename
    it to ``path``; on failure the temporary file is removed and OutputError raised."""
    temp = path.with_name(f".tmp-{os.getpid()}-{path.name}")
    try:
        write(temp)
        os.replace(temp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path
