"""Kernel Tuner's T4 results JSON ("open autotuning results schema", version 1.0.0) for
``record --format t4`` (a landscape: every config timed on one problem) and ``pull --format t4``
(the best config per problem).

Per result: ``configuration`` (the config), ``times.runtimes`` (ms), ``invalidity`` (our outcome
mapped as :data:`workers.landscape.T4_INVALIDITY` says, kept exactly in ``tunefleet_outcome``),
``correctness`` (1 when the output passed the check, else 0) and a ``time`` measurement in ms.
A bundle's vendor measurements are results of their own: configuration ``{"vendor": <path>}``,
``tunefleet_backend`` ``vendor`` (a Triton config's result says ``triton``), and
``tunefleet_chosen`` says which of the two the bundle dispatches to.
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


def _entry_results(entry: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An entry's results: its best Triton config, timed by the paired re-timing (else its
    stored time when Triton won), and, where the study measured it, the vendor path as a result
    of its own whose configuration names only the path (``{"vendor": name}``). Each says its
    backend and whether the bundle chose it."""
    backend = entry.get("backend", "triton")
    triton_ms = entry.get("triton_ms")
    if triton_ms is None and backend == "triton":
        triton_ms = entry.get("time_ms")
    extra = {"problem": entry["problem"], "tunefleet_noise": entry.get("noise")}
    results = [
        t4_result(
            entry["config"],
            Outcome.OK,
            triton_ms,
            tunefleet_backend="triton",
            tunefleet_chosen=backend == "triton",
            **extra,
        )
    ]
    if entry.get("vendor") and entry.get("vendor_ms") is not None:
        results.append(
            t4_result(
                {"vendor": entry["vendor"]},
                Outcome.OK,
                entry["vendor_ms"],
                tunefleet_backend="vendor",
                tunefleet_chosen=backend == "vendor",
                **extra,
            )
        )
    return results


def bundle_t4(bundle: Mapping[str, Any]) -> dict[str, Any]:
    """A native bundle document (``pull``) as T4: per problem its best Triton config and, where
    measured, its vendor path (see :func:`_entry_results`)."""
    return t4_document(
        [result for e in bundle["entries"] for result in _entry_results(e)],
        {
            "kernel": bundle["kernel"],
            "kernel_version": bundle.get("kernel_version", ""),
            "device_class": bundle.get("device_class"),
            "environment": bundle.get("environment", {}),
            "objective": bundle.get("objective"),
            "digest": bundle.get("digest"),
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
