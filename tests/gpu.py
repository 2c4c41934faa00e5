"""``@needs_gpu`` marks a test ``gpu`` and skips it without a CUDA or ROCm GPU
(`pytest -m gpu` selects these on a GPU machine)."""

from collections.abc import Callable
from typing import TypeVar

import pytest

F = TypeVar("F", bound=Callable[..., object])


def has_gpu() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def needs_gpu(test: F) -> F:
    skip = pytest.mark.skipif(not has_gpu(), reason="needs a CUDA or ROCm GPU")
    return pytest.mark.gpu(skip(test))  # type: ignore[no-any-return]
