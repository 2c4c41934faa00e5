"""The drop-in's pinned mode, its misses per rank and its vendor decisions, on a real kernel under
Triton's interpreter."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import triton
import triton.language as tl

from search_spaces.bundle import BundleError
from search_spaces.bundle_env import current_environment
from search_spaces.triton_autotune import Miss, autotune, misses
from search_spaces.triton_capture import kernel_source, source_hash

KERNEL = f"{__name__}.scale"


@triton.jit
def scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 3.0, mask=mask)


CONFIGS = [triton.Config({"BLOCK": 16}, num_warps=1), triton.Config({"BLOCK": 32}, num_warps=2)]


def entry(n: int, block: int, **more: Any) -> dict[str, Any]:
    return {"problem": {"n": n, "dtypes": "float32,float32"}, "config": {"BLOCK": block}, **more}


def write_bundle(folder: Path, *entries: dict[str, Any]) -> Path:
    doc = {
        "format": "tunefleet-bundle/1",
        "kernel": KERNEL,
        "kernel_version": source_hash(kernel_source(scale.fn))[:8] + "00000000",
        "device_class": "cpu",
        "environment": current_environment(),
        "default": {"BLOCK": 128},
        "entries": list(entries),
    }
    (folder / "scale.json").write_text(json.dumps(doc))
    return folder


class Bench:
    """Triton's interpreter has no benchmarker: counts the configs Triton times."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, fn: Any, quantiles: Any) -> list[float]:
        self.calls += 1
        fn()
        return [1.0] * len(quantiles)


def launch(tuner: Any, n: int) -> int:
    """Launch ``n`` elements, check the output; the BLOCK the key ran with (0: not the kernel)."""
    x = torch.randn(n)
    out = torch.zeros(n)
    tuner[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    assert torch.allclose(out, 3.0 * x)
    config = tuner.cache.get((n, "torch.float32", "torch.float32"))
    return 0 if config is None else int(config.kwargs["BLOCK"])


@pytest.fixture(autouse=True)
def no_misses(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "LOCAL_RANK", "TUNEFLEET_PINNED", "TUNEFLEET_CAPTURE"):
        monkeypatch.delenv(name, raising=False)
    misses(clear=True)


def problem(n: int) -> dict[str, Any]:
    return {"n": n, "dtypes": "float32,float32"}


def test_pinned_never_benchmarks_and_records_each_miss_with_its_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TUNEFLEET_PINNED", "1")
    monkeypatch.setenv("RANK", "3")
    bench = Bench()
    tuner = autotune(
        CONFIGS, key=["n"], bundle=write_bundle(tmp_path, entry(64, 64)), do_bench=bench
    )(scale)
    assert [launch(tuner, n) for n in (64, 100, 100)] == [64, 64, 64]
    assert bench.calls == 0
    assert misses() == [Miss(3, KERNEL, problem(100), "nearest", "triton")]
    assert len(list((tmp_path / "untuned").glob("*.jsonl"))) == 1  # and written for `tune`


def test_pinned_without_an_entry_or_a_bundle_launches_the_default_or_the_first_config(
    tmp_path: Path,
) -> None:
    bench = Bench()
    no_entries = autotune(
        CONFIGS, key=["n"], bundle=write_bundle(tmp_path), pinned=True, do_bench=bench
    )
    assert launch(no_entries(scale), 50) == 128  # the bundle's default
    (tmp_path / "empty").mkdir()
    with pytest.warns(RuntimeWarning, match="launching the first config"):
        assert (
            launch(
                autotune(
                    CONFIGS, key=["n"], bundle=tmp_path / "empty", pinned=True, do_bench=bench
                )(scale),
                50,
            )
            == 16
        )
    assert bench.calls == 0
    assert [(m.how, m.launched) for m in misses()] == [("default", "triton"), ("none", "triton")]


def test_unpinned_a_miss_is_tuned_and_recorded_as_tuned(tmp_path: Path) -> None:
    bench = Bench()
    tuner = autotune(
        CONFIGS, key=["n"], bundle=write_bundle(tmp_path, entry(64, 64)), do_bench=bench
    )(scale)
    assert launch(tuner, 64) == 64 and bench.calls == 0
    assert launch(tuner, 100) in (16, 32) and bench.calls == 2
    assert misses() == [Miss(0, KERNEL, problem(100), "nearest", "tuned")]


def test_a_vendor_entry_calls_vendor_and_without_one_launches_its_config_with_one_warning(
    tmp_path: Path,
) -> None:
    folder = write_bundle(
        tmp_path, entry(64, 64), entry(256, 32, backend="vendor", vendor="torch.mul")
    )
    calls: list[int] = []

    def vendor(x: torch.Tensor, out: torch.Tensor, n: int) -> None:
        calls.append(n)
        torch.mul(x, 3.0, out=out)

    tuner = autotune(CONFIGS, key=["n"], bundle=folder, pinned=True, vendor=vendor)(scale)
    assert [launch(tuner, n) for n in (256, 64, 256, 300)] == [0, 64, 0, 0]
    assert calls == [256, 256, 300]  # 300 is nearest to 256: its decision, vendor
    assert misses() == [Miss(0, KERNEL, problem(300), "nearest", "vendor")]

    plain = autotune(CONFIGS, key=["n"], bundle=folder, do_bench=Bench())(scale)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [launch(plain, n) for n in (256, 256)] == [32, 32]
    (warning,) = caught
    assert "keeps the vendor path torch.mul" in str(warning.message)
    assert "pass vendor=" in str(warning.message)


def test_a_bad_pinned_variable_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNEFLEET_PINNED", "yes")
    with pytest.raises(BundleError, match="TUNEFLEET_PINNED is 'yes'; set it to 1"):
        autotune(CONFIGS, key=["n"])
