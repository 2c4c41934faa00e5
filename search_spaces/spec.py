"""The kernel-spec interface: everything tunefleet needs to know to tune one Triton kernel.

Subclass :class:`KernelSpec` and fill in the class attributes and abstract methods. Methods that
touch tensors (``build_inputs``, ``make_launcher``, ``reference``) import torch/triton inside their
bodies, so importing a spec module never loads a GPU library; they run only in a worker's trial
process.
"""

from __future__ import annotations

import abc
import enum
import hashlib
import importlib.util
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from search_spaces.errors import SpecError
from search_spaces.problem import Problem, ProblemSchema
from search_spaces.space import Config, DeviceLimits, Space, Vendor

Inputs = dict[str, Any]
"""What ``build_inputs`` returns: named tensors; ``inputs["out"]`` is the output buffer the launcher
must write completely (the runner poisons it with NaN before each checked launch)."""

Launcher = Callable[[], None]

#: Max-norm relative error allowed by dtype: max|out - ref| / max|ref|.
DEFAULT_TOLERANCE: dict[str, float] = {"float16": 1e-2, "bfloat16": 2e-2, "float32": 1e-3}

#: Config keys that are Triton launch options rather than kernel constexprs.
LAUNCH_OPTIONS = ("num_warps", "num_stages", "waves_per_eu", "matrix_instr_nonkdim", "kpack")


class MathRate(str, enum.Enum):
    """The tensor-core rate a kernel's FLOPs run at: which vendor peak bounds its roofline."""

    BF16 = "bf16"
    FP8 = "fp8"


class KernelSpec(abc.ABC):
    """A tunable kernel: its space, problems, inputs, launcher, reference and cost model.

    Contract of the tensor methods (run in the trial process only):

    * ``build_inputs(problem, device)`` draws fresh random inputs on ``device`` ("cuda" or "cpu")
      on every call, plus the output buffer ``out``.
    * ``make_launcher(inputs, config)`` does all allocation and argument preparation, then returns a
      zero-argument callable that launches the kernel(s) once, writing ``inputs["out"]``; the first
      call JIT-compiles. It may raise triton's OutOfResources, which the runner records as invalid.
    * ``reference(inputs)`` returns the expected ``out`` computed in torch at higher precision.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    schema: ClassVar[ProblemSchema]
    example: ClassVar[Problem]
    space: ClassVar[Space]
    #: Modules whose source text identifies the kernel's code (hashed without importing them).
    sources: ClassVar[tuple[str, ...]]
    #: The tensor-core rate its FLOPs run at: which of the device's peaks its roofline takes
    #: (bf16 unless a spec says otherwise; fp16 runs at the bf16 rate).
    math_rate: ClassVar[MathRate] = MathRate.BF16

    @abc.abstractmethod
    def default_config(self, vendor: Vendor) -> Config:
        """The config a user would get without tuning; valid on every known class of ``vendor``."""

    @abc.abstractmethod
    def flops(self, problem: Problem) -> float:
        """Floating-point operations of one launch (multiply-add = 2)."""

    @abc.abstractmethod
    def bytes_moved(self, problem: Problem) -> float:
        """Fewest bytes one launch must move through device memory (inputs read, output written)."""

    @abc.abstractmethod
    def build_inputs(self, problem: Problem, device: str) -> Inputs: ...

    @abc.abstractmethod
    def make_launcher(self, inputs: Inputs, config: Config) -> Launcher: ...

    @abc.abstractmethod
    def reference(self, inputs: Inputs) -> Any: ...

    def features(self, problem: Problem, config: Config) -> dict[str, float]:
        """Derived quantities of ``config`` on ``problem`` that a learned cost model may use (tiles,
        k-steps, bytes per stage; log2 where they span decades). The same names for every config
        of the space; none by default (the model then sees the parameters only)."""
        return {}

    def equivalence(self, problem: Problem) -> Callable[[Config], Config] | None:
        """On ``problem``, a map from a valid config to the representative of the configs that
        launch the same programs in the same order (a parameter that changes nothing on this
        problem set to one value); the representative is valid too. A study measures one config
        of each class and answers the others from it. None (here): every config is its own
        class."""
        return None

    def vendor_paths(self, problem: Problem) -> tuple[str, ...]:
        """Names of the library paths a deployment runs for ``problem`` without this kernel
        (``torch.matmul``, an SDPA backend, ...), each a candidate measured beside the trials
        that may win the key; none by default. Called in the orchestrator: stdlib only."""
        return ()

    def make_vendor_launcher(self, inputs: Inputs, name: str) -> Launcher:
        """Like ``make_launcher`` for the vendor path ``name`` (one of ``vendor_paths``): a
        zero-argument callable that runs the library once, checked against ``reference`` and
        timed exactly as a config is; the work a deployment does around the library call for
        this problem (routing, gathering pages, ...) happens inside the call too.

        The launch writes ``inputs["out"]`` in place where the library can write into a given
        buffer; where it cannot, it may instead rebind ``inputs["out"]`` to the library's result
        (same shape and dtype), so the timed launch holds no extra copy: the caller reads
        ``inputs["out"]`` after the launch, never a reference taken before it. SpecError for a
        name the spec does not have or a library that is missing; the launch itself raises where
        the library refuses the inputs (an SDPA backend that does not support them, say)."""
        raise SpecError(f"kernel {self.name!r} has no vendor path {name!r}")

    def tolerance(self, problem: Problem) -> float:
        """Max-norm relative error allowed for ``problem`` (by its dtype unless overridden)."""
        return DEFAULT_TOLERANCE[str(problem.get("dtype", "float32"))]

    def check_device(self, problem: Problem, limits: DeviceLimits) -> str | None:
        """Why ``problem`` cannot run on the device class of ``limits`` whatever the config (one
        line), or None (here: it runs wherever a config of the space does). Checked per class
        before any trial; called in the orchestrator: stdlib only."""
        return None

    def validate_problem(self, raw: Mapping[str, object]) -> Problem:
        """A complete, typed problem; override to add checks across fields (call super first)."""
        return self.schema.validate(raw)

    def parse_problem(self, text: str) -> Problem:
        """Parse ``NAME=VALUE,...`` (the CLI's ``-p``) through ``validate_problem``."""
        return self.validate_problem(self.schema.parse(text))

    def default_for(self, limits: DeviceLimits) -> Config:
        return self.default_config(limits.vendor)

    def listed_configs(self, limits: DeviceLimits) -> list[Config]:
        """Configs a new study asks right after the default (none here): a kernel captured from
        ``@triton.autotune`` gives its own list, so a widened search tries it first."""
        return []

    def source_text(self) -> str:
        """Concatenated source of ``sources``; raises SpecError if a module cannot be found."""
        parts = []
        for module in self.sources:
            found = importlib.util.find_spec(module)
            if found is None or found.origin is None:
                raise SpecError(f"kernel {self.name!r}: source module {module!r} not found")
            parts.append(Path(found.origin).read_text())
        return "\n".join(parts)

    def version_hash(self) -> str:
        """Hash of the kernel's source and its space: changes whenever either changes."""
        digest = hashlib.sha256()
        digest.update(self.source_text().encode())
        digest.update(self.space.hash().encode())
        return digest.hexdigest()[:16]

    def describe(self) -> dict[str, object]:
        return {
            "name": self.name,
            "description": self.description,
            "problem": self.schema.describe(),
            "example": dict(self.example),
        }


def split_launch_options(
    config: Mapping[str, object],
) -> tuple[dict[str, object], dict[str, object]]:
    """Split a config into (kernel constexprs, Triton launch options such as num_warps)."""
    meta = {k: v for k, v in config.items() if k not in LAUNCH_OPTIONS}
    options = {k: v for k, v in config.items() if k in LAUNCH_OPTIONS}
    return meta, options
