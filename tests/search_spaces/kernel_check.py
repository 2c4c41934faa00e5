"""One checked launch, the way the trial runner does it: NaN-poisoned out, launch, compare."""

from typing import Any

from search_spaces import Config, DeviceLimits, KernelSpec, Problem
from search_spaces.accuracy import max_rel_error


def checked_launch(
    spec: KernelSpec, problem: Problem, config: Config, limits: DeviceLimits
) -> tuple[float, dict[str, Any]]:
    """Launch ``config`` once on fresh CPU inputs; return (max rel. error, inputs).

    Fails the test if the config is invalid on ``limits`` or if any element of out stays NaN.
    """
    import torch

    spec.space.validate(config, limits)
    inputs = spec.build_inputs(spec.validate_problem(problem), "cpu")
    inputs["out"].fill_(float("nan"))
    spec.make_launcher(inputs, config)()
    unwritten = int(torch.isnan(inputs["out"]).sum())
    assert unwritten == 0, f"{unwritten} elements of out left unwritten"
    ref = spec.reference(inputs)
    assert tuple(ref.shape) == tuple(inputs["out"].shape)
    return max_rel_error(inputs["out"], ref), inputs


def vendor_launch(
    spec: KernelSpec, problem: Problem, name: str, device: str = "cpu"
) -> tuple[float, dict[str, Any]]:
    """Run the vendor path ``name`` once on fresh inputs, as the trial runner does: out poisoned
    with NaN, the launch, then ``inputs["out"]`` read after it (a launch may rebind it); return
    (max rel. error against the reference, inputs)."""
    inputs = spec.build_inputs(spec.validate_problem(problem), device)
    inputs["out"].fill_(float("nan"))
    shape, dtype = tuple(inputs["out"].shape), inputs["out"].dtype
    spec.make_vendor_launcher(inputs, name)()
    assert (tuple(inputs["out"].shape), inputs["out"].dtype) == (shape, dtype)
    return max_rel_error(inputs["out"], spec.reference(inputs)), inputs
