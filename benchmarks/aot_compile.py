"""Compile a spec's kernels for an NVIDIA GPU on a machine without one, through the spec's own
launcher, and report what ptxas and Triton say of each: registers, spilled bytes, shared memory
against the device's limit, warps. A config that spills, needs too much shared memory or fails to
lower shows here before a device call is spent on it.

Usage (repo root; the Triton of the GPU machine, e.g. 3.6.0 installed with
``pip install --no-deps --target /tmp/t36 triton==3.6.0``, then ``PYTHONPATH=/tmp/t36:$PWD``):
    python benchmarks/aot_compile.py matmul -p M=128,N=4096,K=4096,dtype=bfloat16 \\
        -c '{"BLOCK_M": 128, "BLOCK_N": 256, ...}' [-c ...] [--device H200] [--outside-space]
Each ``-c`` is a JSON config, completed from the spec's default on the device. The inputs are built
on torch's ``meta`` device (no memory, no data); every kernel the launcher starts is compiled
(Triton's warmup path: nothing runs) for the device's architecture and listed once.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from search_spaces import Problem, SpecError, Vendor, get_spec
from workers.device_table import lookup
from workers.errors import UnknownDeviceClass


@dataclass(frozen=True)
class Compiled:
    """What one compiled kernel needs on the device."""

    kernel: str
    warps: int
    registers: int
    spilled_bytes: int
    shared_bytes: int
    #: Hopper's warpgroup MMAs in the PTX, its waits for all of them (``wgmma.wait_group 0``)
    #: and for all but N > 0 (the MMA stays asynchronous past the wait), and whether ptxas
    #: serialized them (warning C7514).
    wgmma: int
    full_waits: int
    partial_waits: int
    serialized: bool


class _TargetDriver:
    """The part of Triton's driver that compiling asks for: a device, a stream, the target."""

    def __init__(self, target: Any) -> None:
        self._target = target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, _device: int | None = None) -> int:
        return 0

    def get_current_target(self) -> Any:
        return self._target


def _ptxas(ptx: str, sm: int, arch: str) -> tuple[int, int, bool]:
    """(registers, spilled bytes, wgmma serialized) by the ptxas Triton compiles ``sm`` with."""
    from triton.backends.nvidia.compiler import get_ptxas

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.ptx"
        path.write_text(ptx)
        out = subprocess.run(
            [get_ptxas(sm).path, f"-arch={arch}", "-v", str(path), "-o", "/dev/null"],
            capture_output=True,
            text=True,
            check=True,
        ).stderr
    registers = max((int(r) for r in re.findall(r"Used (\d+) registers", out)), default=0)
    spilled = sum(int(s) for s in re.findall(r"(\d+) bytes spill stores", out))
    return registers, spilled, "C7514" in out


def _waits(ptx: str) -> tuple[int, int, int]:
    """(wgmma issued, full waits, partial waits) in ``ptx``."""
    waits = [int(n) for n in re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", ptx)]
    issued = len(re.findall(r"wgmma\.mma_async", ptx))
    return issued, waits.count(0), len(waits) - waits.count(0)


def compile_config(
    kernel: str, problem: Problem, config: dict[str, Any], sm: int
) -> list[Compiled]:
    """Every kernel the spec's launcher starts for ``config`` on ``problem``, compiled for ``sm``
    (90: sm_90a) with the installed Triton and nothing launched; each kernel reported once."""
    import torch
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver
    from triton.runtime.jit import JITFunction

    spec = get_spec(kernel)
    arch = f"sm_{sm}a" if sm >= 90 else f"sm_{sm}"
    previous = driver._active  # Triton has no public way to put back "none chosen yet"
    driver.set_active(_TargetDriver(GPUTarget("cuda", sm, 32)))
    compiled: dict[str, Compiled] = {}
    original = JITFunction.__getitem__

    def compile_only(self: JITFunction, grid: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            binary = self.run(*args, grid=grid, warmup=True, **kwargs)
            name = self.fn.__name__
            if name not in compiled:
                ptx = binary.asm["ptx"]
                registers, spilled, serialized = _ptxas(ptx, sm, arch)
                meta = binary.metadata
                compiled[name] = Compiled(
                    name, meta.num_warps, registers, spilled, meta.shared, *_waits(ptx), serialized
                )
            return binary

        return run

    JITFunction.__getitem__ = compile_only
    try:
        inputs = spec.build_inputs(problem, "meta")
        with torch.device("meta"):
            spec.make_launcher(inputs, config)()
    finally:
        JITFunction.__getitem__ = original
        driver._active = previous
    return list(compiled.values())


def main(argv: Sequence[str] | None = None) -> None:
    # The kernels must be Triton JIT functions, not the interpreter's stand-ins.
    os.environ["TRITON_INTERPRET"] = "0"
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kernel")
    parser.add_argument(
        "-p", "--problem", required=True, help="e.g. M=128,N=4096,K=4096,dtype=bfloat16"
    )
    parser.add_argument("-c", "--config", action="append", required=True, help="a JSON config")
    parser.add_argument(
        "--device", default="H200", help="device class whose space and limits apply"
    )
    parser.add_argument(
        "--outside-space", action="store_true", help="compile configs the space leaves out"
    )
    args = parser.parse_args(argv)
    try:
        spec = get_spec(args.kernel)
        problem = spec.parse_problem(args.problem)
        limits = lookup(args.device).limits
    except (SpecError, UnknownDeviceClass) as exc:
        parser.error(str(exc).splitlines()[0])
    configs = []
    for text in args.config:
        try:
            configs.append(json.loads(text))
        except ValueError as exc:
            parser.error(
                f"-c {text!r} is not JSON ({exc}); give an object such as '{{\"BLOCK_M\": 64}}'"
            )
    if limits.vendor is not Vendor.NVIDIA or not limits.arch.startswith("sm_"):
        parser.error(f"{args.device} is not an NVIDIA device class; name one such as H200")
    if not all(isinstance(c, dict) for c in configs):
        parser.error("each -c is a JSON object, e.g. '{\"BLOCK_M\": 64}'")
    sm = int(limits.arch.removeprefix("sm_"))
    for given in configs:
        config = {**spec.default_for(limits), **given}
        label = json.dumps(given, separators=(",", ":"))
        violation = spec.space.violation(config, limits)
        if violation is not None and not args.outside_space:
            print(f"{label}: not in the space ({violation}); --outside-space compiles it")
            continue
        try:
            kernels = compile_config(args.kernel, problem, config, sm)
        except Exception as exc:  # a config that fails to compile is the answer, not a crash
            last = (str(exc).strip().splitlines() or [""])[-1][:200]
            print(f"{label}: does not compile here: {type(exc).__name__}: {last}")
            continue
        for k in kernels:
            fits = "" if k.shared_bytes <= limits.shared_mem_per_block else " (too much)"
            mma = ""
            if k.wgmma:
                mma = (
                    f"; wgmma: {k.wgmma} issued, {k.full_waits} full waits, {k.partial_waits} "
                    f"partial{', serialized by ptxas' if k.serialized else ''}"
                )
            print(
                f"{label}: {k.kernel}: {k.warps} warps, {k.registers} registers, "
                f"{k.spilled_bytes} bytes spilled, {k.shared_bytes} bytes shared memory of "
                f"{limits.shared_mem_per_block}{fits}{mma}"
            )


if __name__ == "__main__":
    main()
