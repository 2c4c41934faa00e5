"""Bundle trees laid out per Triton version (``pull --by-stack``), the layout vLLM and SGLang use.

A stack tree holds one folder per Triton release a deployment may run: ``triton_3_6_0/`` when every
bundle of that minor was measured under 3.6.0, ``triton_3_6/`` when the patch is unknown or
differs between them. A reader given such a tree takes the folder of the installed Triton's minor
(the exact patch first); without one, the newest older minor's folder, with a warning; a tree
with only newer ones is refused (SGLang's rule). Folder names are built from the digits of a
parsed version and read back only when they match :data:`FOLDER` (digits and ``_``): no text
from a database row or a file ever becomes part of a path. Stdlib only; the installed version is
read from ``triton`` when a tree needs it (:func:`installed_triton`).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable
from pathlib import Path

from search_spaces.bundle import BundleError

#: The allow-list of stack folder names: ``triton_<major>_<minor>[_<patch>]``.
FOLDER = re.compile(r"triton_(\d{1,4})_(\d{1,4})(?:_(\d{1,4}))?")
#: A Triton version: ``3.6``, ``3.6.0``, ``3.6.0+git1234``, ``3.6.0rc1``; nothing else.
_VERSION = re.compile(r"(\d{1,4})\.(\d{1,4})(?:\.(\d{1,4}))?(?:[.+-]?[A-Za-z0-9][A-Za-z0-9.+]*)?")

Release = tuple[int, int, int | None]


class StackError(BundleError):
    """A version that is not a Triton release number, or a tree with no folder for this one."""


def parse(version: object) -> Release:
    """``3.6.0+git1`` -> (3, 6, 0), ``3.6`` -> (3, 6, None); StackError for anything else."""
    found = _VERSION.fullmatch(version) if isinstance(version, str) else None
    if found is None:
        raise StackError(f"Triton version {str(version)[:40]!r} is not a release number like 3.6.0")
    major, minor, patch = found.groups()
    return int(major), int(minor), None if patch is None else int(patch)


def folder_name(release: Release) -> str:
    """``triton_3_6_0``, or ``triton_3_6`` without a patch."""
    name = "_".join(str(p) for p in ("triton", *release) if p is not None)
    if not FOLDER.fullmatch(name):
        raise StackError(f"no stack folder for Triton {release}")
    return name


def folder_for(minor: str, versions: Iterable[object]) -> str:
    """The folder of the bundles of triton ``minor`` (``3.6``) measured under ``versions`` (their
    environments' full Triton versions, unknown or unparsable ones included): with the patch
    when exactly one of that minor is named. StackError when ``minor`` is not ``<major>.<minor>``."""
    major, mnr, patch = parse(minor)
    if patch is not None:
        raise StackError(f"triton minor {minor[:40]!r} is not <major>.<minor>")
    patches: set[int | None] = set()
    for version in versions:
        try:
            release = parse(version)
        except StackError:  # unknown (a replayed class) or unparsable: the patch is unknown
            release = (major, mnr, None)
        patches.add(release[2] if release[:2] == (major, mnr) else None)
    only = patches.pop() if len(patches) == 1 else None
    return folder_name((major, mnr, only))


def choose_folder(names: Iterable[str], installed: str) -> tuple[str, str]:
    """The stack folder among ``names`` (others ignored) for Triton ``installed``, and a one-line
    warning when it is an older minor's (else ""); StackError when every folder is newer."""
    mine = parse(installed)
    found = {
        n: parse(n.removeprefix("triton_").replace("_", ".")) for n in names if FOLDER.fullmatch(n)
    }
    same = [n for n, r in found.items() if r[:2] == mine[:2]]
    if same:  # the exact patch, else the minor's own folder, else its newest patch
        patch = mine[2]
        return max(
            same, key=lambda n: (found[n][2] == patch, found[n][2] is None, found[n][2] or 0)
        ), ""
    older = [n for n, r in found.items() if r[:2] < mine[:2]]
    if not older:
        newer = ", ".join(sorted(found))
        raise StackError(
            f"the bundle tree has folders for newer Triton only ({newer}), not for the installed "
            f"{installed}; pull bundles measured under it"
        )
    chosen = max(older, key=lambda n: (found[n][:2], -1 if found[n][2] is None else found[n][2]))
    return chosen, (
        f"no triton_{mine[0]}_{mine[1]} folder for the installed Triton {installed}: using the "
        f"older {chosen}"
    )


def installed_triton() -> str:
    """The installed Triton's version (imports triton); StackError without triton."""
    try:
        import triton
    except ImportError:
        raise StackError(
            "a stack-laid bundle tree needs triton installed to pick its folder"
        ) from None
    return str(triton.__version__)


def resolve(path: Path) -> Path:
    """The folder to read bundles from: ``path`` itself unless it holds stack folders, else the
    one :func:`choose_folder` picks for the installed Triton (warning when it is older)."""
    if not path.is_dir():
        return path
    names = [p.name for p in path.iterdir() if p.is_dir() and FOLDER.fullmatch(p.name)]
    if not names:
        return path
    try:
        chosen, warning = choose_folder(names, installed_triton())
    except StackError as exc:
        raise StackError(f"{path}: {exc}") from None
    if warning:
        warnings.warn(f"tunefleet bundles in {path}: {warning}", RuntimeWarning, stacklevel=3)
    return path / chosen
