"""Which bundle a deployment may use when its software differs from the one that tuned it.

Every bundle carries the ``environment`` it was measured in (``triton``, ``torch``, ``driver``,
``runtime``). :func:`choose` compares it with this process's (:func:`current_environment`) and,
by :class:`VersionPolicy`, uses the bundle anyway, refuses it, or falls back to the bundle of the
newest Triton release not newer than this one. Stdlib only; :func:`current_environment` imports
torch and triton, which a deployment that launches Triton kernels has loaded already.
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from search_spaces.bundle import Bundle

ENV_FIELDS = ("triton", "torch", "driver", "runtime")


class VersionPolicy(str, enum.Enum):
    """What to do with a bundle measured under other versions: ``use`` it (after a warning),
    ``refuse`` it (tune as ``triton.autotune`` would), or take the ``older`` bundle of the newest
    Triton release not newer than the running one (refuse when there is none)."""

    USE = "use"
    REFUSE = "refuse"
    OLDER = "older"


def current_environment() -> dict[str, str | None]:
    """This process's triton, torch, driver and runtime, spelt as bundles spell them."""
    import torch
    import triton

    runtime: str | None
    driver: str | None = None
    hip = getattr(torch.version, "hip", None)
    if os.environ.get("TRITON_INTERPRET") == "1":
        runtime = "interpreter"
    elif hip:
        runtime = f"hip {hip}"
    else:
        runtime = f"cuda {torch.version.cuda}"
        get = getattr(torch._C, "_cuda_getDriverVersion", None)
        try:
            version = int(get()) if get is not None else 0
        except (RuntimeError, OSError):
            version = 0
        driver = f"cuda-driver {version // 1000}.{(version % 1000) // 10}" if version else None
    return {
        "triton": triton.__version__,
        "torch": str(torch.__version__),
        "driver": driver,
        "runtime": runtime,
    }


def differences(stored: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """``name stored -> current`` for each field both know and that differs."""
    return [
        f"{name} {stored[name]} -> {current[name]}"
        for name in ENV_FIELDS
        if stored.get(name) and current.get(name) and str(stored[name]) != str(current[name])
    ]


def version_tuple(text: object) -> tuple[int, ...]:
    """``3.6.0+git1234`` -> (3, 6, 0); unparsable -> ()."""
    match = re.match(r"\d+(\.\d+)*", str(text or ""))
    return tuple(int(p) for p in match.group(0).split(".")) if match else ()


def choose(
    candidates: Sequence[Bundle], current: Mapping[str, Any], policy: VersionPolicy
) -> tuple[Bundle | None, list[str]]:
    """``(bundle to use or None, the differences of the one considered)``: a bundle of this very
    environment first; else as ``policy`` says (see :class:`VersionPolicy`)."""
    if not candidates:
        return None, []
    for bundle in candidates:
        if not differences(bundle.environment, current):
            return bundle, []
    by_triton = sorted(candidates, key=lambda b: version_tuple(b.environment.get("triton")))
    newest = by_triton[-1]
    if policy is VersionPolicy.USE:
        return newest, differences(newest.environment, current)
    if policy is VersionPolicy.REFUSE:
        return None, differences(newest.environment, current)
    mine = version_tuple(current.get("triton"))
    older = [b for b in by_triton if version_tuple(b.environment.get("triton")) <= mine]
    if not older:
        return None, differences(newest.environment, current)
    return older[-1], differences(older[-1].environment, current)
