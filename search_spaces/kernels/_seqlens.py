"""Problem pieces the attention specs share: sequence-length patterns and head/dtype checks.

Pure Python (no torch). A pattern turns (batch, max length) into the per-sequence lengths of a problem. The lengths depend
only on the problem, never on a random state, so a problem key always means the same work; the
tensor data drawn for those lengths is fresh on every trial.
"""

from __future__ import annotations

import random

from search_spaces.errors import ProblemError
from search_spaces.problem import Problem

#: Head sizes the attention kernels are built and checked for.
HEAD_DIMS: tuple[int, ...] = (64, 128)

#: ``uniform``: every sequence has the max length. ``mixed``: lengths drawn uniformly from
#: [max(1, max_len // 8), max_len] with a seed fixed by (batch, max_len); the first sequence is set
#: to max_len so that the problem's max length is the batch's real one.
PATTERNS: tuple[str, ...] = ("uniform", "mixed")

PATTERN_DOC = (
    "sequence lengths: uniform = all max; mixed = fixed seeded draw in [max/8, max], "
    "first sequence at max"
)


def seq_lengths(pattern: str, batch: int, max_len: int) -> list[int]:
    """Per-sequence lengths of ``batch`` sequences of at most ``max_len`` under ``pattern``."""
    if batch <= 0 or max_len <= 0:
        raise ProblemError(f"batch={batch} and max length={max_len} must be positive")
    if pattern == "uniform":
        return [max_len] * batch
    if pattern == "mixed":
        rng = random.Random(f"tunefleet-mixed-{batch}-{max_len}")
        lo = max(1, max_len // 8)
        return [max_len] + [rng.randint(lo, max_len) for _ in range(batch - 1)]
    raise ProblemError(f"pattern={pattern} is not supported; choose one of {', '.join(PATTERNS)}")


def check_attention_problem(problem: Problem) -> None:
    """Raise ProblemError unless q_heads % kv_heads == 0, head_dim is in HEAD_DIMS and the dtype
    is a 2-byte float."""
    q_heads, kv_heads = int(problem["q_heads"]), int(problem["kv_heads"])
    if q_heads % kv_heads:
        raise ProblemError(
            f"q_heads={q_heads} must be a multiple of kv_heads={kv_heads} (GQA groups)"
        )
    if int(problem["head_dim"]) not in HEAD_DIMS:
        raise ProblemError(
            f"head_dim={problem['head_dim']} is not supported; choose one of "
            f"{', '.join(map(str, HEAD_DIMS))}"
        )
    if problem["dtype"] not in ("float16", "bfloat16"):
        raise ProblemError(f"dtype={problem['dtype']} is not supported; choose float16 or bfloat16")
