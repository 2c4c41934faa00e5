"""Tunable kernels: optimizer-neutral search spaces, kernel specs and their registry.

Importing this package loads neither torch nor triton.
"""

from search_spaces.errors import ConfigError, ProblemError, RegistryError, SpecError
from search_spaces.problem import Field, FieldKind, Problem, ProblemSchema, problem_key
from search_spaces.registry import available, get_spec
from search_spaces.space import (
    Config,
    Constraint,
    DeviceLimits,
    Param,
    ParamKind,
    Space,
    Vendor,
    Violation,
    config_key,
    pow2_range,
)
from search_spaces.spec import Inputs, KernelSpec, Launcher, MathRate, split_launch_options

__all__ = [
    "Config",
    "ConfigError",
    "Constraint",
    "DeviceLimits",
    "Field",
    "FieldKind",
    "Inputs",
    "KernelSpec",
    "Launcher",
    "MathRate",
    "Param",
    "ParamKind",
    "Problem",
    "ProblemError",
    "ProblemSchema",
    "RegistryError",
    "Space",
    "SpecError",
    "Vendor",
    "Violation",
    "available",
    "config_key",
    "get_spec",
    "pow2_range",
    "problem_key",
    "split_launch_options",
]
