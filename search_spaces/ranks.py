"""Deployments that run several ranks: proof that every rank serves the same bundles, and the rank
a process records its misses under (stdlib only at import; torch is used only where a caller has
already initialized ``torch.distributed``).

::

    bundle = load_bundle("bundles/matmul.json")
    check_same_bundles([bundle])      # after init_process_group, before the first launch

:func:`check_same_bundles` costs one collective when the ranks agree: each rank reduces its
digests to one 32-byte SHA-256 (of the sorted digests, so the order bundles are given in does not
matter) and gathers it with one ``all_gather``. When they differ, a second collective
(``all_gather_object`` of each rank's digests) names the bundle that differs, and every rank
raises :class:`RankMismatch` with the same one-line message.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from collections.abc import Iterable
from typing import Any

from search_spaces.bundle import Bundle, BundleError

_DIGEST = re.compile(r"[0-9a-f]{64}")
#: The environment variables a launcher sets to a process's rank, in the order they are read.
RANK_VARS = ("RANK", "LOCAL_RANK")


class RankMismatch(BundleError):
    """Ranks of one deployment hold different bundles; the message names two ranks and their
    digests."""


def _distributed() -> Any | None:
    """``torch.distributed`` when it is initialized in this process, else None (torch is not
    imported here: a process that initialized it has imported it already)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def current_rank() -> int:
    """This process's global rank: ``torch.distributed``'s when initialized, else the first of
    ``RANK`` and ``LOCAL_RANK`` that holds a non-negative integer, else 0."""
    dist = _distributed()
    if dist is not None:
        return int(dist.get_rank())
    for name in RANK_VARS:
        value = os.environ.get(name, "").strip()
        if value.isdecimal():
            return int(value)
    return 0


def _labelled(bundles_or_digests: Iterable[Bundle | str]) -> dict[str, str]:
    """Digest -> what it is (``kernel on device class`` for a bundle, ``digest`` for a string)."""
    out: dict[str, str] = {}
    for i, item in enumerate(bundles_or_digests):
        if isinstance(item, Bundle):
            digest, label = item.digest, f"{item.kernel} on {item.device_class}"
            if not digest:
                raise BundleError(
                    f"bundle {i} ({label}) has no digest (built in memory): give bundles read "
                    "with load_bundle, or their digests"
                )
        else:
            digest, label = item, "digest"
        if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
            raise BundleError(
                f"item {i} is {item!r:.80}; expected a Bundle or a SHA-256 hex digest"
            )
        out[digest] = label
    return out


def _short(digest: str) -> str:
    return f"{digest[:16]}..."


def check_same_bundles(bundles_or_digests: Iterable[Bundle | str], group: Any = None) -> None:
    """Raise :class:`RankMismatch` unless every rank of ``group`` (the default group when None)
    holds the same set of bundle digests; a no-op when ``torch.distributed`` is not initialized.

    Every rank of the group must call it (it is a collective). Bundles built in memory have no
    digest and raise :class:`BundleError`, as does an item that is neither a Bundle nor a digest.
    """
    labels = _labelled(bundles_or_digests)
    dist = _distributed()
    if dist is None:
        return
    import torch

    combined = hashlib.sha256("\n".join(sorted(labels)).encode()).digest()
    device = "cpu"
    if dist.get_backend(group) == "nccl":  # NCCL moves CUDA tensors only
        device = f"cuda:{torch.cuda.current_device()}"
    mine = torch.tensor(list(combined), dtype=torch.uint8, device=device)
    gathered = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(gathered, mine, group=group)
    first = gathered[0]
    other = next((i for i, t in enumerate(gathered) if not torch.equal(t, first)), None)
    if other is None:
        return
    every: list[Any] = [None] * len(gathered)
    dist.all_gather_object(every, labels, group=group)
    a, b = every[0], every[other]
    rank_a, rank_b = (
        (0, other)
        if group is None
        else (dist.get_global_rank(group, 0), dist.get_global_rank(group, other))
    )
    differing = sum(not torch.equal(t, first) for t in gathered)
    only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
    held_a = f"{_short(only_a[0])} ({a[only_a[0]]})" if only_a else "no other bundle"
    held_b = f"{_short(only_b[0])} ({b[only_b[0]]})" if only_b else "no other bundle"
    raise RankMismatch(
        f"ranks hold different bundles: rank {rank_a} holds {held_a} where rank {rank_b} holds "
        f"{held_b} ({differing} of {len(gathered)} ranks differ from rank {rank_a}; "
        f"{len(a)} vs {len(b)} bundles); pull once and give every rank the same files"
    )
