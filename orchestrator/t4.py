"""Kernel Tuner's T4 results JSON ("open autotuning results schema", version 1.0.0) for
``record --format t4`` (a landscape: every config timed on one problem) and ``pull --format t4``
(the best config per problem).

Per result: ``configuration`` (the config), ``times.runtimes`` (ms), ``invalidity`` (our outcome
mapped as :data:`workers.landscape.T4_INVALIDITY` says, kept exactly in ``tunefleet_outcome``),
``correctness`` (1 when the output passed the check, else 0) and a ``time`` measurement in ms.
The top-level ``tunefleet`` object says which kernel, problem and device the results are for, so
:func:`workers.landscape.read_landscape` reads the file back (T4 allows extra fields).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from workers.landscape import T4_CONTEXT, T4_INVALIDITY, Landscape
from workers.measurement import Outcome

T4_VERSION = "1.0.0"


def t4_result(
    config: Mapping[str, Any], outcome: Outcome, time_ms: float | None, **extra: Any
) -> dict[str, Any]:
    """One T4 result."""
    ok = outcome is Outcome.OK and time_ms is not None
    return {
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "configuration": dict(config),
        "objectives": ["time"],
        "times": {"runtimes": [time_ms] if ok else []},
        "invalidity": T4_INVALIDITY[outcome],
        "correctness": 1 if outcome is Outcome.OK else 0,
        "measurements": [{"name": "time", "value": time_ms, "unit": "ms"}] if ok else [],
        "tunefleet_outcome": outcome.value,
        **extra,
    }


def t4_document(results: Sequence[dict[str, Any]], context: Mapping[str, Any]) -> dict[str, Any]:
    return {"schema_version": T4_VERSION, "results": list(results), T4_CONTEXT: dict(context)}


def landscape_t4(landscape: Landscape) -> dict[str, Any]:
    """A landscape as a T4 document."""
    return t4_document(
        [t4_result(r.config, r.outcome, r.time_ms) for r in landscape.results],
        {
            "kernel": landscape.kernel,
            "kernel_version": landscape.kernel_version,
            "problem": dict(landscape.problem),
            "device": dict(landscape.device),
        },
    )


def bundle_t4(bundle: Mapping[str, Any]) -> dict[str, Any]:
    """A native bundle document (``pull``) as T4: one result per problem, its best config."""
    return t4_document(
        [
            t4_result(e["config"], Outcome.OK, e.get("time_ms"), problem=e["problem"])
            for e in bundle["entries"]
        ],
        {
            "kernel": bundle["kernel"],
            "kernel_version": bundle.get("kernel_version", ""),
            "device_class": bundle.get("device_class"),
            "environment": bundle.get("environment", {}),
            "objective": bundle.get("objective"),
        },
    )


def write_json(path: str | Path, doc: Mapping[str, Any]) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(doc, indent=1) + "\n")
    return p


def bundles_to_t4(paths: Sequence[Path], out_dir: str | Path) -> list[Path]:
    """For each native bundle file ``X.json`` write ``out_dir/X.t4.json``; the new paths."""
    return [
        write_json(Path(out_dir) / f"{p.stem}.t4.json", bundle_t4(json.loads(p.read_text())))
        for p in paths
    ]
