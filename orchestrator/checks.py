"""Checks of a job spec that need no cluster (run before Ray starts): problems too big for a
named device class (from the device table), and how much of the search space each replay
landscape answers."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.errors import JobSpecError
from orchestrator.jobs import JobSpec, SourceKind
from search_spaces.problem import Problem, problem_key
from search_spaces.spec import KernelSpec


@dataclass(frozen=True)
class Coverage:
    """How many of the space's valid configs on a replay device its landscapes answer."""

    device_class: str
    problem: Problem
    answered: int
    valid: int

    @property
    def complete(self) -> bool:
        return self.answered >= self.valid

    def warning(self, kernel: str) -> str:
        share = 100.0 * self.answered / self.valid if self.valid else 0.0
        return (
            f"warning: {self.device_class} answers {self.answered} of the {self.valid} valid "
            f"{kernel} configs on {problem_key(self.problem)} ({share:.0f}%); trials of the "
            "others are recorded invalid: record a fuller landscape with `tunefleet record`"
        )


def replay_coverage(spec: JobSpec, kernel: KernelSpec) -> list[Coverage]:
    """Per replay device of ``spec`` and problem it has a landscape for: the configs answered
    (problems without a landscape are refused later, by planning)."""
    from orchestrator.encoding import valid_configs  # Optuna: only when a replay device is named
    from workers.replay import ReplayRunner
    from workers.trial import TrialRequest

    found = []
    for source in spec.devices:
        if source.kind is not SourceKind.REPLAY:
            continue
        runner = ReplayRunner(source.paths)
        configs = valid_configs(kernel.space, runner.limits)
        for problem in spec.problems:
            if not runner.covers(spec.kernel, problem):
                continue
            answered = sum(
                runner.answers(TrialRequest(spec.kernel, dict(problem), dict(c))) for c in configs
            )
            found.append(Coverage(runner.device_class.key, problem, answered, len(configs)))
    return found


def check_memory(spec: JobSpec, kernel: KernelSpec) -> None:
    """JobSpecError if a problem's inputs and outputs exceed the memory of a device class the
    job names and the device table knows (classes found only on the cluster: see planning)."""
    from orchestrator.planning import oversized
    from workers.device_table import find

    if spec.all_classes:
        return
    for name in spec.device_classes:
        known = find(name)
        if known is None:
            continue
        for problem in spec.problems:
            too_big = oversized(kernel, problem, known.memory_bytes)
            if too_big is not None:
                raise JobSpecError(f"{known.name}: {too_big}; give a smaller problem")
