"""``tunefleet pull``: best configs from the database to files a deployment loads without tuning.

One file per (device class, triton major.minor) of the installed kernel version:

* ``native``: ``<kernel>-<class>-triton<minor>.json`` in the ``tunefleet-bundle/1`` format that
  :func:`search_spaces.bundle.load_bundle` reads: per entry the winning ``backend`` (``triton`` or
  ``vendor``) and ``vendor`` path, the best Triton ``config``, ``time_ms`` (the chosen backend's),
  ``triton_ms``/``vendor_ms``/``noise`` of the paired re-timing, ``job``, ``team``,
  ``updated_at`` (when the best row last changed, ISO 8601 UTC: what ``pull``'s merge calls
  newer) and ``"cancelled": true`` when its job was cancelled (its fastest trial so far, not
  re-timed); the spec's default config, provenance, and last a ``digest`` over all of it;
* ``triton``: ``<kernel>-<class>-triton<minor>.py`` with ``KEY`` (the problem fields), ``CONFIGS``
  (a list of ``triton.Config``, ready for ``@triton.autotune(configs=CONFIGS, key=KEY)``), ``BEST``
  (problem values in KEY order -> index into CONFIGS) for an exact pick without timing, and
  ``VENDOR`` (problem values -> vendor path) for the problems where the vendor path won;
* ``vllm``: for ``fused_moe`` ``E=<E>,N=<N/2>,device_name=<name>.json`` per (E, N, dtype), for
  ``fp8_matmul`` ``N=<N>,K=<K>,device_name=<name>,dtype=fp8_w8a8,block_shape=[128,128].json`` per
  (N, K), see :mod:`orchestrator.export.vllm` (a vendor-won M keeps its fastest Triton config: vLLM
  cannot run another path; an M whose best config vLLM's kernel cannot express takes the fastest
  of its trials that it can, carried in the native entry as ``vllm``, else is left out); replay
  and interpreter (cpu) classes are refused (they are not GPU measurements).
"""

from __future__ import annotations

import enum
import json
import keyword
import math
import re
from collections.abc import Callable, Collection, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from db import BestBackend, Database, JobStatus, NotFound, Objective, repository
from db.repository import BestRecord, DeviceClassRecord, EnvironmentRecord
from orchestrator.errors import BundleExportError
from orchestrator.export.vllm import (
    VLLM_ENTRY,
    VLLM_FILES,
    Entry,
    inexpressible,
    vllm_entries,
    vllm_fallback,
    write_files,
)
from orchestrator.run.revalidate import revalidation_mark
from search_spaces.bundle import BUNDLE_FORMAT, bundle_digest
from search_spaces.device_identity import DeviceClass, DeviceIdentityError, same_class
from search_spaces.registry import get_spec
from search_spaces.space import DeviceLimits, Vendor
from search_spaces.spec import KernelSpec, split_launch_options
from search_spaces.stack import StackError, folder_for

if TYPE_CHECKING:
    from db import Session


class BundleFormat(str, enum.Enum):
    """What ``pull`` writes: our JSON bundle, a Python file of ``triton.Config`` entries, or
    (``fused_moe``, ``fp8_matmul``) vLLM's per-device config files."""

    NATIVE = "native"
    TRITON = "triton"
    VLLM = "vllm"


def slug(text: str) -> str:
    """A file-name-safe form of a class key: ``replay:NVIDIA H200`` -> ``replay-NVIDIA_H200``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text.replace(":", "-")).strip("_")


def _one_of(class_key: str, wanted: Sequence[str]) -> bool:
    """Whether the stored ``class_key`` is the class of one of ``wanted`` (:func:`same_class`); a
    stored key that is no class key (written by hand into a shared database) is none of them."""
    try:
        return any(same_class(class_key, w) for w in wanted)
    except DeviceIdentityError:
        return False


def _device_name(class_key: str) -> str:
    """The device name of a stored class key (vLLM's files are named after it);
    BundleExportError for a key that is no class key, or a class of replayed or interpreter
    results (vLLM's files hold GPU measurements)."""
    try:
        cls = DeviceClass.parse(class_key)
    except DeviceIdentityError as exc:
        raise BundleExportError(f"cannot name vLLM files after it: {exc}") from None
    if cls.replay:
        raise BundleExportError(
            f"{class_key} holds replayed results, not measurements; "
            "pull vLLM files from a real device class (--device-class)"
        )
    if cls.vendor is Vendor.CPU:
        raise BundleExportError(
            f"{class_key} holds Triton interpreter timings, not GPU measurements; "
            "pull vLLM files from a GPU device class (--device-class)"
        )
    return cls.name


def vllm_writer(kernel: str) -> Callable[[list[Entry], str], list[tuple[str, str]]]:
    """The writer of ``kernel``'s vLLM files; BundleExportError for a kernel with none."""
    if kernel not in VLLM_FILES:
        raise BundleExportError(
            f"--format vllm writes vLLM's {' and '.join(VLLM_FILES)} files; {kernel} has "
            "none: use native"
        )
    return VLLM_FILES[kernel]


def vllm_bundle_files(docs: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """vLLM's files (name, text) for native bundle documents ``docs``, each named after its
    class's device (:func:`_device_name`'s refusals; BundleExportError for a kernel with none)."""
    return [
        file
        for doc in docs
        for file in vllm_writer(doc["kernel"])(
            vllm_entries(doc["entries"]), _device_name(doc["device_class"])
        )
    ]


def default_config(kernel: KernelSpec, cls: DeviceClassRecord | None) -> dict[str, Any]:
    """The spec's default on the class's stored limits; else on its vendor (NVIDIA if no class,
    or a class of no known vendor: one the schema's revision 0008 created for a best row)."""
    if cls is not None and cls.limits:
        try:
            limits = DeviceLimits(**{**cls.limits, "vendor": Vendor(cls.limits["vendor"])})
            return kernel.default_for(limits)
        except (TypeError, ValueError, KeyError):
            pass
    known = {v.value for v in Vendor}
    vendor = Vendor(cls.vendor) if cls is not None and cls.vendor in known else Vendor.NVIDIA
    return kernel.default_config(vendor)


def _environment(env: EnvironmentRecord | None) -> dict[str, Any]:
    if env is None:
        return {}
    return {
        "driver": env.driver,
        "runtime": env.runtime,
        "triton": env.triton_version,
        "torch": env.torch_version,
    }


def _entry(
    r: BestRecord, cancelled: bool, default: dict[str, Any], vllm: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One bundle entry: the winning backend, the best Triton config (``default`` where the row
    holds none: a vendor win of a cancelled job whose configs never ran ``ok``), the chosen
    backend's time, both times and the noise floor of the paired re-timing, who produced it and
    when; one that revalidation found regressed or failing says so, one of a cancelled job too,
    and ``vllm`` the config vLLM's files take instead, where given (orchestrator.export.vllm).
    BundleExportError for a vendor win that names no vendor path (a row no loader would accept)."""
    backend = BestBackend(r.backend)
    if backend is BestBackend.VENDOR and not r.vendor:
        raise BundleExportError(
            f"best config {r.id} ({r.kernel_name} {r.problem_key}) says the vendor path won but "
            "names none; re-tune that problem"
        )
    entry: dict[str, Any] = {
        "problem": json.loads(r.problem_key),
        "backend": backend.value,
        "vendor": r.vendor,
        "config": r.config or default,
        "time_ms": r.time_ms,
        "triton_ms": r.triton_ms,
        "vendor_ms": r.vendor_ms,
        "noise": r.noise,
        "job": r.job_id,
        "team": r.team,
        "updated_at": _utc(r.updated_at).isoformat(),
    }
    if cancelled:
        entry["cancelled"] = True
    if r.stale:
        entry["revalidation"] = revalidation_mark(r)
    if vllm is not None:
        entry[VLLM_ENTRY] = vllm
    return entry


def _utc(at: datetime) -> datetime:
    """A stored time (naive means UTC) as an aware UTC time."""
    return at.replace(tzinfo=timezone.utc) if at.tzinfo is None else at.astimezone(timezone.utc)


def cancelled_jobs(s: Session, rows: Sequence[BestRecord]) -> set[int]:
    """The jobs of ``rows`` that were cancelled (a job gone since is not)."""
    out = set()
    for job_id in {r.job_id for r in rows if r.job_id is not None}:
        try:
            if repository.get_job(s, job_id).status is JobStatus.CANCELLED:
                out.add(job_id)
        except NotFound:
            continue
    return out


def native_bundle(
    kernel: KernelSpec,
    version: str,
    class_key: str,
    minor: str,
    rows: Sequence[BestRecord],
    default: dict[str, Any],
    environment: dict[str, Any],
    cancelled: Collection[int] = (),
    vllm: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The ``tunefleet-bundle/1`` document for one class, triton minor and objective (the rows'),
    its ``digest`` (:func:`bundle_digest`) written last, over every other key; the entries of
    the ``cancelled`` jobs are marked, and ``vllm`` (problem key -> ``{"config", "time_ms"}``)
    gives the entries whose vLLM config differs from their best."""
    doc: dict[str, Any] = {
        "format": BUNDLE_FORMAT,
        "kernel": kernel.name,
        "kernel_version": version,
        "device_class": class_key,
        "triton_minor": minor,
        "objective": rows[0].objective.value,
        "environment": environment,
        "default": default,
        "problem_fields": list(kernel.schema.names),
        "batch_fields": list(kernel.schema.batch_names),
        "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "entries": [
            _entry(r, r.job_id in cancelled, default, (vllm or {}).get(r.problem_key))
            for r in sorted(rows, key=lambda r: r.problem_key)
        ],
    }
    doc["digest"] = bundle_digest(doc)
    return doc


def _literal(value: object) -> str:
    """``value`` as Python literal source (``repr`` of plain data only), so that no text from the
    database can become code; BundleExportError for anything else (NaN, objects, ...)."""

    def check(v: object) -> None:
        if v is None or isinstance(v, str | bool | int):
            return
        if isinstance(v, float) and math.isfinite(v):
            return
        if isinstance(v, list | tuple):
            for item in v:
                check(item)
            return
        if isinstance(v, dict):
            for k, item in v.items():
                if not isinstance(k, str):
                    break
                check(item)
            else:
                return
        raise BundleExportError(
            f"cannot write {v!r:.60} into a Python file: only strings, integers, finite numbers, "
            "flags and lists or maps of them; check the stored best configs"
        )

    check(value)
    return repr(value)


def _config_call(config: dict[str, Any]) -> str:
    meta, options = split_launch_options(config)
    for name in options:  # launch options become keyword arguments: names, never code
        if not name.isidentifier() or keyword.iskeyword(name):
            raise BundleExportError(f"launch option {name!r:.60} is not a Python name")
    args = [_literal(meta)] + [f"{k}={_literal(v)}" for k, v in options.items()]
    return f"triton.Config({', '.join(args)})"


def triton_module(doc: dict[str, Any], fields: Sequence[str]) -> str:
    """Python source with KEY, CONFIGS, BEST and VENDOR for ``@triton.autotune`` users.

    ``triton.autotune`` can only choose among Triton configs, so a problem whose entry says the
    vendor path won is in ``VENDOR`` (problem values in KEY order -> the path's name): a caller
    that picks without timing keeps that path there; ``BEST`` still maps it to its fastest Triton
    config, for callers that must launch Triton. Every value from the bundle (kernel, device
    class, versions, problems, configs, vendor names) is written as a checked literal
    (:func:`_literal`), never into the docstring or a comment.
    """
    configs: list[str] = []
    best: list[str] = []
    vendor: list[str] = []
    for entry in [*doc["entries"], {"problem": None, "config": doc["default"]}]:
        call = _config_call(entry["config"])
        if call not in configs:
            configs.append(call)
        if entry["problem"] is not None:
            values = _literal(tuple(entry["problem"][f] for f in fields))
            best.append(f"    {values}: {configs.index(call)},")
            if entry.get("backend") == BestBackend.VENDOR.value:
                vendor.append(f"    {values}: {_literal(entry['vendor'])},")
    lines = [
        '"""Tuned configs of KERNEL for DEVICE_CLASS under triton TRITON_MINOR, generated by',
        "`tunefleet pull --format triton` for KERNEL_VERSION of the kernel. Use::",
        "",
        "    @triton.autotune(configs=CONFIGS, key=KEY)",
        "",
        "or pick without timing: CONFIGS[BEST[problem values in KEY order]]. The last config is the",
        "spec's default. VENDOR maps the problems where the vendor path (the library call the",
        "deployment runs without this kernel) measured faster than every Triton config to that",
        "path's name: keep it there. BEST still maps them to their fastest Triton config, and",
        '@triton.autotune over CONFIGS cannot choose the vendor path."""',
        "",
        "import triton",
        "",
        f"KERNEL = {_literal(doc['kernel'])}",
        f"DEVICE_CLASS = {_literal(doc['device_class'])}",
        f"TRITON_MINOR = {_literal(doc['triton_minor'])}",
        f"KERNEL_VERSION = {_literal(doc['kernel_version'])}",
        "",
        f"KEY = {_literal(list(fields))}",
        "",
        "CONFIGS = [",
        *[f"    {c}," for c in configs],
        "]",
        "",
        "BEST = {",
        *best,
        "}",
        "",
        "VENDOR = {",
        *vendor,
        "}",
        "",
    ]
    return "\n".join(lines)


def _vllm_fallbacks(
    s: Session, kernel: KernelSpec, version: str, objective: Objective, rows: Sequence[BestRecord]
) -> dict[str, dict[str, Any]]:
    """For a kernel with vLLM files, per problem key of ``rows`` (one device class) whose best
    config vLLM's kernel cannot run, the fastest ``ok`` trial config of that key it can run and
    its median (:func:`orchestrator.export.vllm.vllm_fallback`); keys without one are absent."""
    if kernel.name not in VLLM_FILES:
        return {}
    needed: dict[str, dict[str, Any]] = {}
    for r in rows:
        problem = json.loads(r.problem_key)
        if r.config and inexpressible(kernel.name, problem, r.config):
            needed[r.problem_key] = problem
    if not needed:
        return {}
    ids = repository.kernel_ids(s, kernel.name, version)
    found: dict[str, dict[str, Any]] = {}
    for key, problem in needed.items():
        trials = repository.fastest_ok_configs(s, ids, objective, rows[0].device_class_id, key)
        fallback = vllm_fallback(kernel.name, problem, trials)
        if fallback is not None:
            found[key] = fallback
    return found


def render(
    database: Database,
    kernel_name: str,
    device_classes: Sequence[str] = (),
    fmt: BundleFormat = BundleFormat.NATIVE,
    objective: Objective = Objective.KERNEL,
) -> list[tuple[str, str]]:
    """The files (name, text) of one bundle per (class, triton minor) for the installed version
    of ``kernel_name``, from the best configs of ``objective`` (a file name says a non-kernel
    objective); ``vllm`` gives vLLM's files instead (fused_moe, fp8_matmul)."""
    kernel = get_spec(kernel_name)
    if fmt is BundleFormat.VLLM:
        vllm_writer(kernel.name)
    version = kernel.version_hash()
    with database.session(readonly=True) as s:
        rows = repository.get_best(s, kernel.name, kernel_version=version, objective=objective)
        if device_classes:
            rows = [r for r in rows if _one_of(r.device_class_key, device_classes)]
        if not rows:
            where = f" on {', '.join(device_classes)}" if device_classes else ""
            raise BundleExportError(
                f"no best configs for {kernel.name} version {version}{where} (objective "
                f"{objective.value}); run `tunefleet tune` first"
            )
        groups: dict[tuple[str, str], list[BestRecord]] = {}
        for r in rows:
            groups.setdefault((r.device_class_key, r.triton_minor), []).append(r)
        cancelled = cancelled_jobs(s, rows)
        docs = []
        for (class_key, minor), group in sorted(groups.items()):
            if fmt is BundleFormat.VLLM:
                _device_name(class_key)  # refused before the bundles are built
            cls = repository.device_class_by_key(s, class_key)
            env_id = next((r.environment_id for r in group if r.environment_id), None)
            env = repository.get_environment(s, env_id) if env_id is not None else None
            docs.append(
                native_bundle(
                    kernel,
                    version,
                    class_key,
                    minor,
                    group,
                    default_config(kernel, cls),
                    _environment(env),
                    cancelled,
                    _vllm_fallbacks(s, kernel, version, objective, group),
                )
            )
    if fmt is BundleFormat.VLLM:
        return vllm_bundle_files(docs)
    files: list[tuple[str, str]] = []
    for doc in docs:
        stem = f"{kernel.name}-{slug(doc['device_class'])}-triton{slug(doc['triton_minor'])}"
        if objective is not Objective.KERNEL:
            stem += f"-{objective.value}"
        if fmt is BundleFormat.NATIVE:
            files.append((f"{stem}.json", json.dumps(doc, indent=1, sort_keys=False) + "\n"))
        else:
            files.append((f"{stem}.py", triton_module(doc, kernel.schema.names)))
    return files


def by_stack(
    fmt: BundleFormat, named: Sequence[tuple[str, str]], native: Sequence[tuple[str, str]]
) -> list[tuple[str, str]]:
    """``named`` (files of ``fmt`` from the same pull as the ``native`` bundles) each under the
    stack folder of its bundle's triton minor (:func:`search_spaces.stack.folder_for`, one per
    minor); vLLM's files, which name neither class nor minor, are written anew per bundle.
    BundleExportError for a minor that is not ``<major>.<minor>`` or a file without its bundle."""
    docs = {Path(name).stem: json.loads(text) for name, text in native}
    versions: dict[str, list[object]] = {}
    for doc in docs.values():
        versions.setdefault(doc["triton_minor"], []).append(doc["environment"].get("triton"))
    try:
        folders = {minor: folder_for(minor, found) for minor, found in versions.items()}
    except StackError as exc:
        raise BundleExportError(f"cannot lay the bundles out by stack: {exc}") from None
    if fmt is BundleFormat.VLLM:
        return [
            (f"{folders[doc['triton_minor']]}/{name}", text)
            for doc in docs.values()
            for name, text in vllm_bundle_files([doc])
        ]
    out = []
    for name, text in named:
        doc = docs.get(Path(name).stem)
        if doc is None:
            raise BundleExportError(f"{name} has no native bundle to name its Triton version")
        out.append((f"{folders[doc['triton_minor']]}/{name}", text))
    return out


def export(
    database: Database,
    kernel_name: str,
    out_dir: str | Path,
    device_classes: Sequence[str] = (),
    fmt: BundleFormat = BundleFormat.NATIVE,
    objective: Objective = Objective.KERNEL,
) -> list[Path]:
    """Write the :func:`render` files into ``out_dir`` (created if needed); return the paths."""
    return write_files(render(database, kernel_name, device_classes, fmt, objective), Path(out_dir))
