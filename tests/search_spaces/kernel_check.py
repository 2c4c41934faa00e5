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
