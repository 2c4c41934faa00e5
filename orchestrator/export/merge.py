"""``pull`` into a folder that already holds a bundle: merge per key, write atomically.

A native bundle pulled to a path that holds a bundle of the same kernel, kernel version, device
class, triton minor and objective is merged with it: per problem the entry with the newer
``updated_at`` wins (an entry without one is older than any with one; on a tie the pulled entry
wins), and entries of problems only the file has are kept, so a key a deployment served without
benchmarking stays served after the next ``pull``. The merged document takes the pulled one's
header (default, environment, export time), its entries in key order, and a fresh ``digest``
last. A file there that is not a valid bundle, or one of another kernel version (entries measured
for other code or another space), is replaced, and a note says so. Files are written to a
temporary file beside the target and renamed over it: a reader never sees half a file.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from orchestrator.errors import BundleExportError
from search_spaces.bundle import BundleError, bundle_digest, bundle_from_dict
from search_spaces.problem import problem_key
from search_spaces.stack import FOLDER

#: The header fields two bundles must share to be merged.
SAME = ("kernel", "kernel_version", "device_class", "triton_minor", "objective")
_OLDEST = datetime.min.replace(tzinfo=timezone.utc)


def _when(entry: Mapping[str, Any]) -> datetime:
    stamp = entry.get("updated_at")
    return datetime.fromisoformat(stamp) if isinstance(stamp, str) else _OLDEST


def merge_documents(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """``new`` with ``old``'s entries merged in (see the module doc) and its digest recomputed,
    and a one-line account of what the old file contributed. Both documents must be checked
    bundles with the same :data:`SAME` fields."""
    entries = {problem_key(e["problem"]): e for e in new["entries"]}
    kept = newer = 0
    for entry in old["entries"]:
        key = problem_key(entry["problem"])
        if key not in entries:
            kept += 1
        elif _when(entry) > _when(entries[key]):
            newer += 1
        else:
            continue
        entries[key] = entry
    doc = {k: v for k, v in new.items() if k != "digest"}
    doc["entries"] = [entries[k] for k in sorted(entries)]
    doc["digest"] = bundle_digest(doc)
    return doc, f"kept {kept} key(s) only it had and {newer} newer measurement(s) of it"


def _existing(path: Path) -> tuple[dict[str, Any] | None, str]:
    """The checked bundle document at ``path`` (None if there is none or it is not one), and why
    not."""
    if not path.is_file():
        return None, ""
    try:
        data = json.loads(path.read_text())
        bundle_from_dict(data, str(path))
    except (OSError, ValueError, BundleError) as exc:
        return None, f"it was not a valid bundle ({str(exc)[:120]})"
    return data, ""


def merge_into_folder(
    files: Sequence[tuple[str, str]], out_dir: Path
) -> tuple[list[tuple[str, str]], list[str]]:
    """Native bundle ``files`` (name, text), each merged with the bundle ``out_dir`` holds by its
    name; a note per file merged or replaced."""
    out: list[tuple[str, str]] = []
    notes: list[str] = []
    for name, text in files:
        path = out_dir / name
        new = json.loads(text)
        old, why = _existing(path)
        if old is not None:
            differ = [f for f in SAME if old.get(f) != new.get(f)]
            if differ:
                what = differ[0]
                why = f"it held {what} {old.get(what)!r}, not {new.get(what)!r}"
                old = None
        if old is None:
            if why:
                notes.append(f"replaced {path}: {why}")
            out.append((name, text))
            continue
        doc, account = merge_documents(old, new)
        notes.append(f"merged into {path}: {account}")
        out.append((name, json.dumps(doc, indent=1) + "\n"))
    return out, notes


def write_atomically(files: Sequence[tuple[str, str]], out_dir: Path) -> list[Path]:
    """Write (name, text) files into ``out_dir`` (created if needed), each through a temporary
    file renamed over its target; a name may start with a stack folder (``triton_3_6_0/``,
    created if needed), nothing else. Return the paths; BundleExportError (one line) for another
    name or if it cannot write."""
    for name, _ in files:
        folder, sep, base = name.rpartition("/")
        if base in ("", ".", "..") or (sep and not FOLDER.fullmatch(folder)):
            raise BundleExportError(f"refusing to write {name!r:.80}: not a bundle file name")
    paths = []
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, text in files:
            path = out_dir / name
            path.parent.mkdir(exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
            try:
                with tmp.open("x") as f:  # the umask's mode, as a plain write would give
                    f.write(text)
                os.replace(tmp, path)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            paths.append(path)
    except OSError as exc:
        raise BundleExportError(f"cannot write to {out_dir}: {exc.strerror or exc}") from None
    return paths
