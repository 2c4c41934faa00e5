"""Installed entry points of a group, scanned once per ``sys.path``.

Scanning every installed distribution's metadata costs milliseconds, and a job start asks for
the kernel and sampler groups many times; a distribution installed on a new ``sys.path`` entry
is still seen. One installed into an existing folder while the process runs is not.
"""

from __future__ import annotations

import functools
import sys
from importlib.metadata import EntryPoint, entry_points


def group(name: str) -> dict[str, EntryPoint]:
    """Entry-point name -> entry point of group ``name``, as installed for today's ``sys.path``."""
    return dict(_scan(name, tuple(sys.path)))


@functools.lru_cache(maxsize=16)
def _scan(name: str, path: tuple[str, ...]) -> dict[str, EntryPoint]:
    del path  # part of the cache key only
    return {ep.name: ep for ep in entry_points(group=name)}
