"""Write ``fused_moe`` and ``fp8_matmul`` results as vLLM's per-device Triton config files.

fused_moe: vLLM (``vllm/model_executor/layers/fused_moe``: ``get_config_file_name``,
``get_moe_configs``) looks for ``E=<E>,N=<N>,device_name=<name>[,dtype=<d>].json`` in
``VLLM_TUNED_CONFIG_FOLDER`` first, then in its own ``configs/`` folder; the file maps a batch size
M (string key) to the kernel config and vLLM takes the entry whose M is nearest to the batch it
runs. Conventions copied from vLLM:

* ``N`` in the name is ``w2.shape[2]``, the intermediate size after SiLU-and-mul: half the N of the
  first GEMM (whose weight ``w1`` is [E, 2*N, K], gate and up projections stacked). Our problem's
  ``N`` is that first GEMM's N, so the file gets N // 2.
* ``device_name`` is ``torch.cuda.get_device_name()`` with spaces replaced by ``_``; any name with a
  ``H200`` word becomes ``NVIDIA_H200``.
* ``dtype`` is omitted for float16 and bfloat16 (they share a file); vLLM writes ``float32`` or a
  quantization scheme such as ``fp8_w8a8`` there.

The down projection (problems with ``gemm=down``: N = hidden size, K = the intermediate size)
goes to the same name with ``_down`` before ``.json``, N being that K (the same intermediate size,
so a layer's two files pair up). vLLM itself reads one file and launches both GEMMs with its
configs; the ``_down`` file is SGLang's convention (``get_config_file_name(..., down_moe=True)``),
which tunes and reads the down projection separately.

Vendor entries: vLLM runs its own Triton ``fused_moe`` at every batch size and its files have no
way to say "keep another path" (every key must be an M). So a row is written for every M the
studies saw, a vendor-won M included, with the fastest Triton config measured for it: dropping
that row would not bring the vendor path back, it would hand the M to the config of the nearest
other M (vLLM's rule), tuned for another batch size. ``pull`` says how many rows that is
(:data:`VENDOR_POLICY`) and its ``--json`` names them (``bundles[].shapes``). vLLM's fused-MoE
kernel has no ``TMA``: an M whose config uses it is left out, as for fp8_matmul below. Nor does
it take the activation in its first GEMM's epilogue or the top-k sum in its second's:
``gemm=up_silu`` and ``gemm=down_sum`` results are left out (tune ``gemm=up`` and ``gemm=down``
for vLLM's files).

fp8_matmul: vLLM's block-FP8 linear (``w8a8_block_fp8_matmul``, ``get_w8a8_block_fp8_configs``)
reads ``N=<N>,K=<K>,device_name=<name>,dtype=fp8_w8a8,block_shape=[128,128].json`` from its
``configs/`` folder beside that module: one file per (N, K) of the weight, M (string key) -> the
six :data:`VLLM_KEYS` (and the AMD keys where the config has them), nearest M wins, and every key
is passed to the Triton launch. ``device_name`` is the GPU name with spaces as ``_`` and no H200
folding (that is the fused-MoE loader's). vLLM's kernel has none of ``SPLIT_K``, ``TMA``,
``PERSISTENT``, ``SCALE_LAG``, ``WARP_SPEC`` and ``GLUON`` (:data:`NOT_IN_VLLM`), so an entry
whose config needs another value than vLLM's is never written: as is, vLLM's launch would reject
the extra key; stripped, vLLM would run a config nobody timed. A bundle holds one config per M,
so such an M is left out of its file (vLLM then takes the nearest written M's config, or its
default when none is left) and ``pull`` names it on stderr and in ``--json`` (``skipped``); with
no entry left, ``pull`` refuses. A vendor-won M keeps its fastest Triton config, as for fused_moe
(the file can only map an M to a config of vLLM's kernel), if that config is expressible.

Where a key's best config needs a parameter vLLM's kernel lacks, ``pull`` looks through the key's
own trials (same kernel version, device class and objective) for the fastest ``ok`` config that
vLLM's kernel runs as measured, and writes that one: the native bundle entry carries it as
``vllm`` (``{"config": ..., "time_ms": <its search-time median>}``), every vLLM file is written
from the entries through :func:`vllm_entries`, and ``pull`` names those rows on stderr
(:data:`FALLBACK_NOTE`). Only a key without such a trial is left out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestrator.errors import BundleExportError
from search_spaces.kernels.fp8_matmul import SCALE_BLOCK
from search_spaces.kernels.fused_moe import GATED, SUMMED

#: Config keys vLLM's files carry, in vLLM's order; the AMD keys only where the config has them
#: (vLLM's ROCm files carry them and vLLM passes every key to the Triton launch).
VLLM_KEYS = (
    "BLOCK_SIZE_M",
    "BLOCK_SIZE_N",
    "BLOCK_SIZE_K",
    "GROUP_SIZE_M",
    "num_warps",
    "num_stages",
)
AMD_KEYS = ("waves_per_eu", "matrix_instr_nonkdim", "kpack")

#: Problem fields that must agree across the entries of one file (M varies).
SHAPE_FIELDS = ("E", "N", "K", "topk", "dtype", "gemm")

#: The fused_moe problem's GEMM when the problem names none (problems from before the field).
DEFAULT_GEMM = "up"

#: Our problem dtypes -> vLLM's dtype selector (None: no ``dtype=`` part in the name).
VLLM_DTYPE: dict[str, str | None] = {"float16": None, "bfloat16": None, "float32": "float32"}

#: ``pull``'s note when vLLM files hold rows where the vendor path won (see the module doc).
VENDOR_POLICY = (
    "vLLM cannot keep a vendor path: the {rows} row(s) where it won hold the fastest Triton "
    "config measured for their M (dropping them would hand the M to the nearest other M's config)"
)

#: Per kernel, the parameters vLLM's kernel lacks, with the value it runs.
NOT_IN_VLLM: dict[str, dict[str, object]] = {
    "fused_moe": {"TMA": False},
    "fp8_matmul": {
        "SPLIT_K": 1,
        "TMA": False,
        "PERSISTENT": False,
        "SCALE_LAG": False,
        "WARP_SPEC": False,
        "GLUON": False,
    },
}

#: fused_moe GEMMs vLLM's kernel does not run (SiLU-and-mul in the first GEMM's epilogue, the
#: top-k sum in the second's).
NOT_IN_VLLM_GEMMS = (GATED, SUMMED)

#: ``pull``'s note for M left out of a vLLM file (see the module doc).
SKIPPED_NOTE = (
    "{where}: left out {rows}: vLLM's kernel lacks these parameters or this GEMM, so it would "
    "run another config (vLLM takes the nearest written M's config, or its default without one)"
)

Entry = tuple[Mapping[str, object], Mapping[str, object]]
"""One tuned result: (problem, its best config)."""

#: The native bundle entry's key for the config vLLM's files take where the best one needs a
#: parameter vLLM's kernel lacks (see the module doc).
VLLM_ENTRY = "vllm"

#: ``pull``'s note for rows written with the fastest config vLLM's kernel runs (module doc).
FALLBACK_NOTE = (
    "{where}: {rows}: the best config needs a parameter vLLM's kernel lacks, so the file holds the "
    "fastest config of the key's trials that vLLM's kernel runs (search-time median vs the best)"
)


#: What a device part of a vLLM file name may hold (the name comes from a database row).
DEVICE_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.()+-]{0,199}")


def _file_device_name(device_name: str) -> str:
    """``device_name`` with spaces as ``_``; BundleExportError for a name that could leave the
    output folder or is not a plain file name."""
    name = device_name.strip().replace(" ", "_")
    if not DEVICE_NAME_PATTERN.fullmatch(name) or ".." in name:
        raise BundleExportError(
            f"device name {device_name!r} cannot be part of a vLLM file name "
            f"(allowed: {DEVICE_NAME_PATTERN.pattern}, no '..')"
        )
    return name


def vllm_device_name(device_name: str) -> str:
    """The device part of vLLM's fused-MoE file name: spaces as ``_``, the H200 family as
    ``NVIDIA_H200``; BundleExportError for a name that is not a plain file name."""
    name = _file_device_name(device_name)
    return "NVIDIA_H200" if "H200" in name.split("_") else name


def vllm_file_name(E: int, N: int, device_name: str, dtype: str | None, down: bool = False) -> str:
    """``E=<E>,N=<N>,device_name=<name>[,dtype=<dtype>][_down].json`` exactly as vLLM (and, with
    ``down``, SGLang for the down projection) looks it up.

    ``N`` is vLLM's (the intermediate size, see the module docstring); ``dtype`` is vLLM's selector
    (``None`` for float16/bfloat16).
    """
    dtype_part = f",dtype={dtype}" if dtype else ""
    down_part = "_down" if down else ""
    return f"E={E},N={N},device_name={vllm_device_name(device_name)}{dtype_part}{down_part}.json"


def _gemm(problem: Mapping[str, object]) -> str:
    gemm = problem.get("gemm", DEFAULT_GEMM)
    if gemm not in ("up", "down", *NOT_IN_VLLM_GEMMS):
        raise BundleExportError(
            f"fused_moe problem {dict(problem)} has gemm={gemm!r}; up, down, {GATED} or {SUMMED}"
        )
    return str(gemm)


def _int(problem: Mapping[str, object], name: str) -> int:
    value = problem.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BundleExportError(f"problem {dict(problem)} lacks an integer {name!r}")
    return value


def _plain_ints(config: Mapping[str, object]) -> bool:
    """Whether every key vLLM's files take from ``config`` holds an integer (a database row's
    value reaches vLLM's kernel launch: nothing else passes)."""
    return all(type(config[key]) is int for key in (*VLLM_KEYS, *AMD_KEYS) if key in config)


def _vllm_entry(config: Mapping[str, object]) -> dict[str, object]:
    missing = [key for key in VLLM_KEYS if key not in config]
    if missing:
        raise BundleExportError(f"config {dict(config)} lacks {', '.join(missing)} for vLLM")
    if not _plain_ints(config):
        raise BundleExportError(f"config {dict(config)} holds a non-integer value for vLLM")
    return {key: config[key] for key in (*VLLM_KEYS, *AMD_KEYS) if key in config}


def vllm_config(entries: Sequence[Entry]) -> dict[str, dict[str, object]]:
    """vLLM's file content: batch size M (string, in numeric order) -> config.

    All entries must share (E, N, K, topk, dtype) and have distinct M; raises BundleExportError.
    """
    if not entries:
        raise BundleExportError("no fused_moe results to export")
    first = entries[0][0]
    shape = {f: first.get(f) for f in SHAPE_FIELDS} | {"gemm": _gemm(first)}
    by_m: dict[int, dict[str, object]] = {}
    for problem, config in entries:
        other = {f: problem.get(f) for f in SHAPE_FIELDS} | {"gemm": _gemm(problem)}
        if other != shape:
            raise BundleExportError(
                f"one vLLM file holds one shape; got {shape} and {other} (only M may differ)"
            )
        m = _int(problem, "M")
        if m in by_m:
            raise BundleExportError(f"two results for M={m} with shape {shape}")
        by_m[m] = _vllm_entry(config)
    return {str(m): by_m[m] for m in sorted(by_m)}


def vllm_files(entries: Sequence[Entry], device_name: str) -> list[tuple[str, str]]:
    """One file per (E, N, dtype, GEMM) as (file name, text), in name order: vLLM's file for the
    up projection, its ``_down`` twin for the down projection.

    Entries of one file must also share K and topk (vLLM's name does not tell them apart).
    """
    groups: dict[tuple[int, int, str | None, bool], list[Entry]] = {}
    for problem, config in entries:
        if inexpressible("fused_moe", problem, config):
            continue
        e = _int(problem, "E")
        dtype_name = str(problem.get("dtype"))
        if dtype_name not in VLLM_DTYPE:
            raise BundleExportError(f"dtype {dtype_name!r} has no vLLM config file name")
        down = _gemm(problem) == "down"
        if down:
            n = _int(problem, "K")
        else:
            n = _int(problem, "N")
            if n % 2:
                raise BundleExportError(
                    f"N={n} is odd; vLLM names files by N/2 (w1 stacks gate and up projections)"
                )
            n //= 2
        groups.setdefault((e, n, VLLM_DTYPE[dtype_name], down), []).append((problem, config))
    if not entries:
        raise BundleExportError("no fused_moe results to export")
    if not groups:
        raise BundleExportError(
            f"none of the {len(entries)} fused_moe result(s) can run in vLLM's kernel (TMA or "
            "gemm=up_silu or down_sum everywhere); use native"
        )
    return [
        (
            vllm_file_name(e, n, device_name, dtype, down),
            json.dumps(vllm_config(group), indent=4) + "\n",
        )
        for (e, n, dtype, down), group in sorted(
            groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or "", kv[0][3])
        )
    ]


def vllm_fp8_file_name(N: int, K: int, device_name: str) -> str:
    """``N=<N>,K=<K>,device_name=<name>,dtype=fp8_w8a8,block_shape=[128,128].json`` exactly as
    vLLM's ``get_w8a8_block_fp8_configs`` looks it up; BundleExportError for an unsafe name."""
    return (
        f"N={N},K={K},device_name={_file_device_name(device_name)},dtype=fp8_w8a8,"
        f"block_shape=[{SCALE_BLOCK},{SCALE_BLOCK}].json"
    )


def inexpressible(
    kernel: str, problem: Mapping[str, object], config: Mapping[str, object]
) -> str | None:
    """Why vLLM's ``kernel`` would run ``config`` for ``problem`` differently (``SPLIT_K=4,
    TMA=True``; ``gemm=up_silu``; ``gemm=down_sum``), or None when it runs it as measured."""
    differ = [
        f"{key}={config[key]}"
        for key, value in NOT_IN_VLLM.get(kernel, {}).items()
        if key in config and config[key] != value
    ]
    if kernel == "fused_moe" and problem.get("gemm") in NOT_IN_VLLM_GEMMS:
        differ.insert(0, f"gemm={problem['gemm']}")
    return ", ".join(differ) or None


def vllm_fp8_files(entries: Sequence[Entry], device_name: str) -> list[tuple[str, str]]:
    """One block-FP8 file per (N, K) as (file name, text), in (N, K) order, M in numeric order;
    entries whose config vLLM cannot run as measured (:func:`inexpressible`) are left out.

    BundleExportError for two results of one (M, N, K) or when no entry is left."""
    groups: dict[tuple[int, int], dict[int, dict[str, object]]] = {}
    for problem, config in entries:
        n, k, m = _int(problem, "N"), _int(problem, "K"), _int(problem, "M")
        if inexpressible("fp8_matmul", problem, config):
            continue
        by_m = groups.setdefault((n, k), {})
        if m in by_m:
            raise BundleExportError(f"two results for M={m} with N={n}, K={k}")
        by_m[m] = _vllm_entry(config)
    if not groups:
        raise BundleExportError(
            f"none of the {len(entries)} fp8_matmul result(s) can run in vLLM's kernel (SPLIT_K "
            "> 1 or TMA everywhere); use native"
        )
    return [
        (
            vllm_fp8_file_name(n, k, device_name),
            json.dumps({str(m): by_m[m] for m in sorted(by_m)}, indent=4) + "\n",
        )
        for (n, k), by_m in sorted(groups.items())
    ]


def vllm_fallback(
    kernel: str, problem: Mapping[str, object], trials: Iterable[tuple[Mapping[str, Any], float]]
) -> dict[str, Any] | None:
    """``{"config", "time_ms"}`` of the first of ``trials`` (config, median; fastest first) that
    vLLM's ``kernel`` runs as measured for ``problem`` (:func:`inexpressible`) and whose values
    for vLLM's keys are integers, or None."""
    for config, time_ms in trials:
        if inexpressible(kernel, problem, config) is None and _plain_ints(config):
            return {"config": dict(config), "time_ms": time_ms}
    return None


def vllm_entries(entries: Sequence[Mapping[str, Any]]) -> list[Entry]:
    """(problem, config) of native bundle entries as vLLM's files take them: the entry's
    :data:`VLLM_ENTRY` config where it has one, else its best config."""
    return [(e["problem"], (e.get(VLLM_ENTRY) or {}).get("config", e["config"])) for e in entries]


def vllm_skipped(kernel: str, entries: Sequence[Entry]) -> list[tuple[Mapping[str, object], str]]:
    """The (problem, reason) of each entry that :data:`VLLM_FILES`'s writer for ``kernel`` leaves
    out (:func:`inexpressible`)."""
    reasons = [(problem, inexpressible(kernel, problem, config)) for problem, config in entries]
    return [(problem, reason) for problem, reason in reasons if reason]


#: Kernels with a vLLM file format -> the writer of their files (entries, device name).
VLLM_FILES = {"fused_moe": vllm_files, "fp8_matmul": vllm_fp8_files}


def write_files(files: Sequence[tuple[str, str]], out_dir: Path) -> list[Path]:
    """Write (name, text) files into ``out_dir`` (created if needed); return the paths."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = []
        for name, text in files:
            path = out_dir / name
            path.write_text(text)
            paths.append(path)
    except OSError as exc:
        raise BundleExportError(f"cannot write to {out_dir}: {exc.strerror or exc}") from None
    return paths


def write_vllm_files(entries: Sequence[Entry], device_name: str, out_dir: Path) -> list[Path]:
    """Write the :func:`vllm_files` into ``out_dir`` (created if needed); return the paths."""
    return write_files(vllm_files(entries, device_name), out_dir)
