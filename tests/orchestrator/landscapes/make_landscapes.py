"""Synthetic matmul landscapes for two "devices" with different optima (test fixtures).

``python tests/orchestrator/landscapes/make_landscapes.py OUT_DIR`` writes them; the tests call
:func:`write_all` into a temporary folder. Times follow a smooth bowl around each device's optimum
with a deterministic jitter; a few configs are recorded as failures and some are left out (a replay
answers those ``invalid``), never the spec's default config or its class representative on the
problem, which a study measures first.
"""

from __future__ import annotations

import hashlib
import math
import sys
from pathlib import Path

from search_spaces.registry import get_spec
from search_spaces.space import config_key
from workers.device_table import lookup
from workers.landscape import Landscape, LandscapeResult, write_landscape
from workers.measurement import Outcome

PROBLEMS = (
    {"M": 256, "N": 256, "K": 256, "dtype": "float16"},
    {"M": 1024, "N": 1024, "K": 1024, "dtype": "float16"},
)

#: Device name -> the config the bowl is centred on.
OPTIMA = {
    "NVIDIA H200": {
        "BLOCK_M": 128,
        "BLOCK_N": 128,
        "BLOCK_K": 64,
        "GROUP_M": 8,
        "SPLIT_K": 1,
        "num_warps": 8,
        "num_stages": 4,
    },
    "NVIDIA A100-SXM4-80GB": {
        "BLOCK_M": 64,
        "BLOCK_N": 256,
        "BLOCK_K": 32,
        "GROUP_M": 4,
        "SPLIT_K": 2,
        "num_warps": 4,
        "num_stages": 3,
    },
}


def _jitter(text: str) -> float:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF


def synthetic(device: str, problem: dict[str, object]) -> Landscape:
    spec = get_spec("matmul")
    limits = lookup(device).limits
    optimum = OPTIMA[device]
    scale = float(problem["M"]) * float(problem["N"]) * float(problem["K"]) / 256**3 * 0.01
    results = []
    default = spec.default_for(limits)
    firsts = {config_key(default), config_key(spec.equivalence(problem)(default))}
    for config in spec.space.iter_valid(limits):
        key = config_key(config)
        j = _jitter(f"{device}|{key}|{problem['M']}")
        if key in firsts:
            j = 0.5
        if j < 0.05:
            continue  # not recorded: the replay says invalid
        if j > 0.97:
            results.append(LandscapeResult(config, Outcome.COMPILE_ERROR))
            continue
        penalty = 1.0
        for name, best in optimum.items():
            penalty *= 1.0 + 0.25 * abs(math.log2(int(config[name]) / best))
        results.append(
            LandscapeResult(config, Outcome.OK, round(scale * penalty * (1 + 0.01 * j), 6))
        )
    fp = {
        "vendor": limits.vendor.value,
        "name": device,
        "arch": limits.arch,
        "triton": "3.9.0",
        "torch": "2.13.0",
        "driver": "synthetic",
        "runtime": "synthetic",
    }
    return Landscape("matmul", spec.version_hash(), dict(problem), fp, results)


def write_all(folder: Path) -> dict[str, list[Path]]:
    """Write every synthetic landscape under ``folder``; device name -> its files."""
    out: dict[str, list[Path]] = {}
    for device in OPTIMA:
        for problem in PROBLEMS:
            slug = device.split()[1].split("-")[0].lower()
            path = folder / f"matmul-{slug}-M{problem['M']}.json.gz"
            out.setdefault(device, []).append(write_landscape(path, synthetic(device, problem)))
    return out


if __name__ == "__main__":
    for device, paths in write_all(Path(sys.argv[1])).items():
        print(device, *paths)
