"""Path-free references of captured kernels, and the local index that resolves them (stdlib only).

A captured kernel's reference is ``captured:<name>@<source hash>``, ``+wide`` appended for the
widened space: ``<name>`` is the name the capture stores it under
(:func:`search_spaces.capture_file.kernel_name`: ``module.qualname``, a script's stem for
``__main__``) and ``<source hash>`` the first 16 hex digits of the SHA-256 of its source from the
``def`` line (the capture's ``source_hash``). The same kernel source gives the same reference on
every machine and in every capture directory; best configs, bundles and jobs are keyed by it.

A reference resolves on the machine that holds a capture of the kernel, through the capture index:
a JSON file (``$TUNEFLEET_CAPTURE_INDEX``, else ``captures.json`` in the user data folder) mapping
``<name>@<hash>`` to the capture directories that recorded it, newest last. ``tunefleet capture``,
``capture --refs DIR`` and ``tune --from-capture DIR`` add their directory. Nothing here imports
a module: resolving reads capture files only (see :func:`workers.capture_spec.captured_spec`).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from search_spaces.capture_file import (
    KERNEL_NAME_PATTERN,
    CapturedKernel,
    CaptureError,
    read_capture,
)

PREFIX = "captured:"
WIDE = "+wide"
INDEX_ENV = "TUNEFLEET_CAPTURE_INDEX"
INDEX_FORMAT = "tunefleet-capture-index/1"
_REF = re.compile(rf"captured:({KERNEL_NAME_PATTERN.pattern})@([0-9a-f]{{16}})(\+wide)?")
_MAX_REF = 256


@dataclass(frozen=True)
class CapturedRef:
    """A parsed ``captured:<name>@<hash>[+wide]`` reference."""

    name: str
    source_hash: str
    widen: bool

    @property
    def key(self) -> str:
        """The index key: the kernel, whichever space is tuned."""
        return f"{self.name}@{self.source_hash}"

    def __str__(self) -> str:
        return f"{PREFIX}{self.key}{WIDE if self.widen else ''}"


def is_captured_ref(text: str) -> bool:
    """Whether ``text`` claims to be a captured kernel's reference (checked by :func:`parse_ref`)."""
    return text.startswith(PREFIX)


def ref_of(kernel: CapturedKernel, widen: bool) -> str:
    """The reference of a captured kernel (its own config list, or with ``widen`` the widened
    space)."""
    return str(CapturedRef(kernel.name, kernel.source_hash, widen))


def parse_ref(text: str) -> CapturedRef:
    """The parts of a captured reference; CaptureError (one line) for anything else, such as a
    path or a name with ``..``."""
    match = _REF.fullmatch(text) if len(text) <= _MAX_REF else None
    if match is None or ".." in match.group(1):
        raise CaptureError(
            f"{text[:80]!r} is not a captured kernel reference (captured:NAME@HASH[+wide], "
            "NAME of [A-Za-z0-9._-], HASH 16 hex digits); `tunefleet capture --refs DIR` "
            "prints them"
        )
    return CapturedRef(match.group(1), match.group(2), bool(match.group(3)))


def index_path() -> Path:
    """``$TUNEFLEET_CAPTURE_INDEX``, else ``captures.json`` in the user data folder."""
    if os.environ.get(INDEX_ENV):
        return Path(os.environ[INDEX_ENV])
    import platformdirs

    return Path(platformdirs.user_data_dir("tunefleet")) / "captures.json"


def _read_index(path: Path) -> dict[str, list[str]]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise CaptureError(f"capture index {path} is unreadable ({exc}); delete it") from None
    kernels = data.get("kernels") if isinstance(data, dict) else None
    if not isinstance(kernels, dict) or data.get("format") != INDEX_FORMAT:
        raise CaptureError(f"capture index {path} is not a {INDEX_FORMAT} file; delete it")
    return {str(k): [str(d) for d in v] for k, v in kernels.items() if isinstance(v, list)}


def _write_index(path: Path, kernels: dict[str, list[str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"format": INDEX_FORMAT, "kernels": kernels}, indent=1, sort_keys=True)
    fd, tmp = tempfile.mkstemp(prefix=".captures-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def register_capture(directory: str | Path) -> list[CapturedKernel]:
    """Read the capture in ``directory`` (CaptureError if there is none) and record it in the
    index as the newest directory of each of its kernels; directories gone since are dropped.
    Returns the kernels read."""
    kernels = read_capture(directory)
    where = str(Path(directory).resolve())
    path = index_path()
    index = _read_index(path)
    for kernel in kernels:
        key = CapturedRef(kernel.name, kernel.source_hash, False).key
        index[key] = [d for d in index.get(key, []) if d != where and Path(d).is_dir()] + [where]
    try:
        _write_index(path, index)
    except OSError as exc:
        raise CaptureError(f"cannot write the capture index {path}: {exc}") from None
    return kernels


def indexed_directories(ref: CapturedRef) -> list[Path]:
    """The capture directories the index holds for ``ref``'s kernel, newest first."""
    return [Path(d) for d in reversed(_read_index(index_path()).get(ref.key, []))]


def captures_of(ref: CapturedRef, directories: Iterable[Path]) -> list[tuple[Path, CapturedKernel]]:
    """``(directory, kernel)`` for each of ``directories`` that still holds ``ref``'s kernel with
    its source hash (a directory gone or unreadable is skipped)."""
    found: list[tuple[Path, CapturedKernel]] = []
    for directory in directories:
        try:
            kernels = read_capture(directory)
        except CaptureError:
            continue
        found.extend(
            (directory, k)
            for k in kernels
            if k.name == ref.name and k.source_hash == ref.source_hash
        )
    return found
