"""Shared results: the best stored configs of a kernel and the bundles ``pull`` writes of them.

These need the installed kernel spec (its version picks the rows; rates need its problem math).
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from db.states import Objective
from orchestrator.app.views import BestView, BundleFile, aware
from orchestrator.errors import InvalidRequest, NotFound
from search_spaces.device_identity import DeviceIdentityError, canonical_key
from search_spaces.errors import SpecError
from search_spaces.problem import problem_key
from search_spaces.registry import get_spec
from search_spaces.spec import KernelSpec
from workers.device_table import find

if TYPE_CHECKING:
    from db import Database, Session


def registered_kernel(name: str) -> KernelSpec:
    """The installed kernel spec ``name`` names; NotFound if none is registered."""
    try:
        return get_spec(name)
    except SpecError as exc:
        raise NotFound(str(exc)) from None


def best_configs(
    database: Database,
    *,
    kernel: str,
    device_class: str | None = None,
    objective: Objective | str = Objective.KERNEL,
    problem: str | Mapping[str, Any] | None = None,
) -> list[BestView]:
    """Best stored configs of the installed version of ``kernel`` for ``objective``, optionally
    of one device class and one problem (``M=64,...`` or a mapping), in key order."""
    from db import repository
    from orchestrator.app.rates import rates
    from orchestrator.run.revalidate import revalidation_mark

    spec = registered_kernel(kernel)
    try:
        chosen = Objective(objective)
    except ValueError:
        raise InvalidRequest(f"unknown objective {objective!r}; choose kernel or graph") from None
    key = None
    if problem is not None:
        parsed = (
            spec.parse_problem(problem)
            if isinstance(problem, str)
            else spec.validate_problem(problem)
        )
        key = problem_key(parsed)
    class_key = _class_key(device_class) if device_class else None
    version = spec.version_hash()
    with database.session(readonly=True) as s:
        records = repository.get_best(s, spec.name, key, class_key, version, objective=chosen)
        cancelled = cancelled_jobs(s, {r.job_id for r in records if r.job_id is not None})
    out = []
    for r in records:
        problem_dict = json.loads(r.problem_key)
        known = find(r.device_class_key)
        rated = rates(spec, problem_dict, r.time_ms, known.name if known else r.device_class_key)
        out.append(
            BestView(
                kernel=r.kernel_name,
                kernel_version=r.kernel_version,
                problem=dict(problem_dict),
                device_class=r.device_class_key,
                triton=r.triton_minor,
                objective=r.objective,
                config=dict(r.config),
                time_ms=r.time_ms,
                tflops=rated.tflops,
                gbs=rated.gbs,
                roofline_pct=rated.roofline_pct,
                team=r.team,
                job_id=r.job_id,
                updated_at=aware(r.updated_at),
                revalidation=revalidation_mark(r),
                cancelled_job=r.job_id in cancelled,
                backend=r.backend.value,
                vendor=r.vendor,
                vendor_ms=r.vendor_ms,
                default_ms=r.default_ms,
                noise=r.noise,
            )
        )
    return out


def _class_key(device_class: str) -> str:
    """The key results of ``device_class`` (a key, name or alias) are stored under;
    InvalidRequest for text that cannot name a class."""
    try:
        return canonical_key(device_class)
    except DeviceIdentityError as exc:
        raise InvalidRequest(str(exc)) from None


def cancelled_jobs(s: Session, job_ids: Collection[int]) -> set[int]:
    """Which of ``job_ids`` are cancelled jobs (a best config's provenance mark)."""
    from db import repository

    return repository.cancelled_jobs(s, job_ids)


MEDIA_TYPES = {".json": "application/json", ".py": "text/x-python"}


def bundle_files(
    database: Database,
    kernel: str,
    *,
    device_classes: Sequence[str] = (),
    objective: Objective | str = Objective.KERNEL,
    fmt: str = "native",
) -> list[BundleFile]:
    """The files ``pull`` writes for ``kernel`` (see orchestrator.export.bundle), in order."""
    from orchestrator.export.bundle import BundleFormat, render

    try:
        chosen = BundleFormat(fmt)
    except ValueError:
        raise InvalidRequest(f"unknown format {fmt!r}; use native, triton or vllm") from None
    try:
        objective = Objective(objective)
    except ValueError:
        raise InvalidRequest(f"unknown objective {objective!r}; choose kernel or graph") from None
    registered_kernel(kernel)
    classes = [_class_key(c) for c in device_classes]
    return [
        BundleFile(name, text.encode(), MEDIA_TYPES.get(name[name.rfind(".") :], "text/plain"))
        for name, text in render(database, kernel, classes, chosen, objective)
    ]


def build_bundle(
    database: Database,
    kernel: str,
    *,
    device_class: str | None = None,
    objective: Objective | str = Objective.KERNEL,
    fmt: str = "native",
) -> BundleFile:
    """What ``pull`` writes as one download: the file itself when there is one, else a zip
    archive of them (named ``<kernel>-<format>.zip``)."""
    files = bundle_files(
        database,
        kernel,
        device_classes=[device_class] if device_class else [],
        objective=objective,
        fmt=fmt,
    )
    if len(files) == 1:
        return files[0]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for f in files:
            archive.writestr(f.filename, f.content)
    return BundleFile(
        f"{registered_kernel(kernel).name}-{fmt}.zip", buffer.getvalue(), "application/zip"
    )


__all__ = [
    "MEDIA_TYPES",
    "best_configs",
    "build_bundle",
    "bundle_files",
    "cancelled_jobs",
    "registered_kernel",
]
