"""Host time per launch that the capture hook and the drop-in add to triton.autotune's cached path.

The kernel's own launch is replaced by a no-op (``fn.run`` returns at once), so what is timed is
Triton's Autotuner.run on a key it has already tuned: building the key, the cache lookup, the
config's kwargs, plus whatever tunefleet adds. Three autotuners over the same no-op kernel, timed
in interleaved rounds: plain ``triton.autotune``, the drop-in serving the key from a bundle, and
``triton.autotune`` with the capture hook installed. Runs on any machine (no GPU launch);
``compare.py`` calls :func:`measure` in its own process on the GPU too.

    python3 benchmarks/triton_autotune/host_overhead.py OUT.json
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from triton.runtime.autotuner import Autotuner, Config

from search_spaces.bundle_env import current_environment
from search_spaces.triton_autotune import _device_class, _served_class, autotune
from search_spaces.triton_capture import CaptureWriter, kernel_source, patch_autotuner, source_hash

LAUNCHES = 20000
ROUNDS = 30


def noop_kernel(x_ptr, y_ptr, n, BLOCK):  # type: ignore[no-untyped-def]
    """Stands in for the kernel's Python source (hashed by the drop-in)."""


class NoLaunch:
    """A jit-function stand-in whose ``run`` launches nothing."""

    arg_names = ("x_ptr", "y_ptr", "n", "BLOCK")
    fn = staticmethod(noop_kernel)

    def run(self, *args: Any, **kwargs: Any) -> None:
        return None


def measure(launches: int = LAUNCHES, rounds: int = ROUNDS) -> dict[str, Any]:
    """Median and range of host µs per launch of each autotuner over ``rounds`` interleaved
    rounds of ``launches``; the bundle is made for this process's device class."""
    configs = [Config({"BLOCK": 128}, num_warps=4), Config({"BLOCK": 256}, num_warps=4)]
    fn = NoLaunch()
    x, y, n = torch.empty(1024), torch.empty(1024), 1024
    key = (n, "torch.float32", "torch.float32")
    with tempfile.TemporaryDirectory() as tmp:
        bundle = {
            "format": "tunefleet-bundle/1",
            "kernel": f"{__name__ if __name__ != '__main__' else Path(__file__).stem}.noop_kernel",
            "kernel_version": source_hash(kernel_source(noop_kernel))[:8] + "00000000",
            "device_class": _device_class(),
            "environment": current_environment(),
            "default": {"BLOCK": 128, "num_warps": 4, "num_stages": 3},
            "entries": [
                {
                    "problem": {"n": n, "dtypes": "float32,float32"},
                    "config": {"BLOCK": 256, "num_warps": 4, "num_stages": 3},
                }
            ],
        }
        (Path(tmp) / "b.json").write_text(json.dumps(bundle))
        plain = Autotuner(fn, list(fn.arg_names), configs, ["n"], None, None)
        served = autotune(configs=configs, key=["n"], bundle=tmp)(fn)
        assert isinstance(served, _served_class())

        class Captured(Autotuner):  # type: ignore[misc]
            pass

        patch_autotuner(Captured, CaptureWriter(Path(tmp) / "cap"))
        captured = Captured(fn, list(fn.arg_names), configs, ["n"], None, None)
        plain.cache[key] = configs[0]
        captured.cache[key] = configs[0]
        served.run(x, y, n, grid=(1,), warmup=False)  # first launch: the bundle answers the key
        assert served.cache[key].kwargs == {"BLOCK": 256} and served.timed == 0
        captured.run(x, y, n, grid=(1,), warmup=False)
        tuners = {"triton.autotune": plain, "drop-in (served)": served, "captured": captured}
        per: dict[str, list[float]] = {name: [] for name in tuners}
        names = list(tuners)
        for i in range(rounds):
            for name in names[i % 3 :] + names[: i % 3]:  # rotate who goes first
                tuner = tuners[name]
                start = time.perf_counter()
                for _ in range(launches):
                    tuner.run(x, y, n, grid=(1,), warmup=False)
                per[name].append((time.perf_counter() - start) / launches * 1e6)
    return {
        "us_per_launch_median": {name: statistics.median(v) for name, v in per.items()},
        "min_max": {name: (min(v), max(v)) for name, v in per.items()},
        "launches": launches,
        "rounds": rounds,
    }


def report(found: dict[str, Any]) -> None:
    """One line per autotuner: median µs, the rounds' range, and the difference to plain."""
    result = found["us_per_launch_median"]
    base = result["triton.autotune"]
    for name, us in result.items():
        lo, hi = found["min_max"][name]
        print(f"{name:<18} {us:6.3f} us per launch (rounds {lo:.3f}-{hi:.3f}), {us - base:+.3f} us")


def main() -> None:
    out = Path(sys.argv[1])
    os.environ["TRITON_INTERPRET"] = "1"  # the bundle's class and environment: the interpreter's
    found = measure()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(found, indent=1))
    report(found)


if __name__ == "__main__":
    main()
