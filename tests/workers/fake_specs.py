"""Kernel specs that misbehave on purpose, loaded by the trial process as ``module:Class``.

Each computes ``out = 2 * x`` (or fails to). Space: one parameter BLOCK in {16, 32}; BLOCK=32
breaks a shared-memory rule on every known device, so it never reaches a child.
"""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path
from typing import Any, ClassVar

from search_spaces import (
    Config,
    Constraint,
    Field,
    FieldKind,
    Inputs,
    KernelSpec,
    Launcher,
    Param,
    ParamKind,
    Problem,
    ProblemSchema,
    Space,
    Vendor,
)

MODULE = "tests.workers.fake_specs"
BLOCK_SMEM = 8192  # pretend bytes of shared memory per BLOCK element: BLOCK=32 needs 256 KiB
LONG_S = 60.0
#: The files CrashOnceThenWaitSpec reads from its environment: the one its crash leaves, and the
#: one whose appearance ends its wait.
CRASHED_ENV = "TUNEFLEET_TEST_CRASHED"
RELEASE_ENV = "TUNEFLEET_TEST_RELEASE"


def ref(name: str) -> str:
    return f"{MODULE}:{name}"


class DoubleSpec(KernelSpec):
    """A correct Triton kernel: out = 2 * x."""

    name: ClassVar[str] = "double"
    description: ClassVar[str] = "out = 2 * x"
    schema: ClassVar[ProblemSchema] = ProblemSchema(
        (Field("N"), Field("dtype", FieldKind.DTYPE, default="float32"))
    )
    example: ClassVar[Problem] = {"N": 40, "dtype": "float32"}
    space: ClassVar[Space] = Space(
        (Param("BLOCK", (16, 32), ParamKind.POW2),),
        (
            Constraint(
                "shared-memory",
                "BLOCK x 8 KiB <= shared memory per block",
                ("BLOCK",),
                lambda c, lim: int(c["BLOCK"]) * BLOCK_SMEM <= lim.shared_mem_per_block,
            ),
        ),
    )
    sources: ClassVar[tuple[str, ...]] = (MODULE,)
    kernel_name: ClassVar[str] = "double_kernel"

    def default_config(self, vendor: Vendor) -> Config:
        return {"BLOCK": 16}

    def flops(self, problem: Problem) -> float:
        return float(problem["N"])

    def bytes_moved(self, problem: Problem) -> float:
        return 8.0 * int(problem["N"])

    def build_inputs(self, problem: Problem, device: str) -> Inputs:
        import torch

        n = int(problem["N"])
        return {"x": torch.randn(n, device=device), "out": torch.empty(n, device=device)}

    def reference(self, inputs: Inputs) -> Any:
        return inputs["x"].double() * 2

    def make_launcher(self, inputs: Inputs, config: Config) -> Launcher:
        import triton

        from tests.workers import fake_kernels

        kernel = getattr(fake_kernels, self.kernel_name)
        x, out = inputs["x"], inputs["out"]
        block = int(config["BLOCK"])
        grid = (triton.cdiv(x.numel(), block),)

        def launch() -> None:
            kernel[grid](x, out, x.numel(), BLOCK=block)

        return launch


class WrongSpec(DoubleSpec):
    """Never writes the last element: NaN is left in the poisoned output."""

    kernel_name: ClassVar[str] = "double_skip_last_kernel"


class _TorchSpec(DoubleSpec):
    """out = 2 * x in torch; ``act(call)`` runs before each launch (call counts from 1)."""

    def act(self, call: int) -> None:
        raise NotImplementedError

    def make_launcher(self, inputs: Inputs, config: Config) -> Launcher:
        x, out = inputs["x"], inputs["out"]
        calls = [0]

        def launch() -> None:
            calls[0] += 1
            self.act(calls[0])
            out.copy_(x * 2)

        return launch


class SleepSpec(_TorchSpec):
    """The first launch hangs: a compile timeout."""

    def act(self, call: int) -> None:
        if call == 1:
            time.sleep(LONG_S)


class SleepLaterSpec(_TorchSpec):
    """Launches after the first hang: a run timeout."""

    def act(self, call: int) -> None:
        if call > 1:
            time.sleep(LONG_S)


class CrashOnceThenWaitSpec(_TorchSpec):
    """Its first trial process dies while timing (a crash, so measured once more); the later ones
    wait there until ``$TUNEFLEET_TEST_RELEASE`` exists (at most LONG_S), then compute."""

    def act(self, call: int) -> None:
        if call == 1:
            return
        crashed = Path(os.environ[CRASHED_ENV])
        if not crashed.exists():
            crashed.touch()
            os._exit(3)
        release = Path(os.environ[RELEASE_ENV])
        deadline = time.monotonic() + LONG_S
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.05)


class ExitSpec(_TorchSpec):
    def act(self, call: int) -> None:
        os._exit(3)


class SegfaultSpec(_TorchSpec):
    def act(self, call: int) -> None:
        ctypes.string_at(0)


class RaiseSpec(_TorchSpec):
    """The first launch raises: a compile error."""

    def act(self, call: int) -> None:
        raise ValueError("bad tile\nBLOCK must divide N")


class RaiseLaterSpec(_TorchSpec):
    """A launch after the first raises: a crash in the run phase."""

    def act(self, call: int) -> None:
        if call > 1:
            raise RuntimeError("boom while timing")


class OutOfResourcesSpec(_TorchSpec):
    def act(self, call: int) -> None:
        from triton.runtime.errors import OutOfResources

        raise OutOfResources(262144, 232448, "shared memory")


class HugeInputsSpec(DoubleSpec):
    """Claims to move few bytes, then asks the CPU allocator for 4 PiB: out of host memory."""

    def build_inputs(self, problem: Problem, device: str) -> Inputs:
        import torch

        return {"x": torch.empty(2**50, device=device), "out": torch.empty(1, device=device)}


class InputWriterSpec(_TorchSpec):
    """out = 2 * x; with WRITE=1 the kernel then also overwrites its input x; with WRITE=2 it
    overwrites x first and computes out from the changed x."""

    space: ClassVar[Space] = Space((Param("WRITE", (0, 1, 2), ParamKind.INT),))

    def default_config(self, vendor: Vendor) -> Config:
        return {"WRITE": 0}

    def make_launcher(self, inputs: Inputs, config: Config) -> Launcher:
        x, out = inputs["x"], inputs["out"]

        def launch() -> None:
            if config["WRITE"] == 2:
                x.fill_(7.0)
            out.copy_(x * 2)
            if config["WRITE"] == 1:
                x.fill_(7.0)

        return launch


class VendorSpec(DoubleSpec):
    """DoubleSpec with vendor paths in torch: ``torch.mul`` writes ``out`` in place, ``rebind``
    rebinds ``inputs["out"]`` to its result, ``raises`` raises, ``wrong_shape`` rebinds a tensor
    of another shape, ``unlisted`` is none of its paths."""

    def vendor_paths(self, problem: Problem) -> tuple[str, ...]:
        return ("torch.mul", "rebind", "raises", "wrong_shape")

    def make_vendor_launcher(self, inputs: Inputs, name: str) -> Launcher:
        import torch

        x = inputs["x"]
        if name == "torch.mul":
            out = inputs["out"]

            def in_place() -> None:
                torch.mul(x, 2, out=out)

            return in_place
        if name == "rebind":

            def rebind() -> None:
                inputs["out"] = x * 2

            return rebind
        if name == "raises":

            def raises() -> None:
                raise RuntimeError("the library has no kernel for this problem")

            return raises
        if name == "wrong_shape":

            def wrong_shape() -> None:
                inputs["out"] = torch.cat([x, x]) * 2

            return wrong_shape
        return super().make_vendor_launcher(inputs, name)
