"""rmsnorm in Triton's interpreter: one-pass and chunked paths, ragged rows, three dtypes."""

import itertools

import pytest
import torch

from search_spaces import Config, DeviceLimits, Problem, SpecError, Vendor
from search_spaces.accuracy import max_rel_error
from search_spaces.kernels.rmsnorm import EPS, SPEC
from tests.gpu import needs_gpu
from tests.search_spaces.kernel_check import checked_launch, vendor_launch


def cfg(block_n: int, rows: int = 1, warps: int = 1, streaming: bool = False) -> Config:
    return {
        "BLOCK_N": block_n,
        "num_warps": warps,
        "ROWS_PER_PROGRAM": rows,
        "STREAMING": streaming,
    }


CASES: list[tuple[Problem, Config]] = [
    (SPEC.example, SPEC.default_config(Vendor.CPU)),
    ({"M": 7, "N": 100, "dtype": "float16"}, cfg(256, rows=2)),
    ({"M": 7, "N": 100, "dtype": "float16"}, cfg(256, rows=2, streaming=True)),
    ({"M": 5, "N": 600, "dtype": "bfloat16"}, cfg(256, rows=8, warps=4)),
    ({"M": 5, "N": 600, "dtype": "bfloat16"}, cfg(256, rows=8, warps=4, streaming=True)),
    ({"M": 9, "N": 512, "dtype": "float32"}, cfg(256, rows=4, warps=2)),
    ({"M": 3, "N": 1000, "dtype": "float32"}, cfg(1024)),
]


@pytest.mark.parametrize(
    ("problem", "config"),
    CASES,
    ids=[
        f"{p['M']}x{p['N']}-{p['dtype']}-bn{c['BLOCK_N']}-rows{c['ROWS_PER_PROGRAM']}"
        + ("-streaming" if c["STREAMING"] else "")
        for p, c in CASES
    ],
)
def test_correct_in_interpreter(problem: Problem, config: Config, cpu_limits: DeviceLimits) -> None:
    err, inputs = checked_launch(SPEC, problem, config, cpu_limits)
    assert err <= SPEC.tolerance(problem)
    assert inputs["out"].dtype == inputs["x"].dtype


def test_reference_is_rmsnorm() -> None:
    inputs = SPEC.build_inputs({"M": 2, "N": 4, "dtype": "float32"}, "cpu")
    x, w = inputs["x"].double(), inputs["weight"].double()
    expected = x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + EPS) * w
    assert torch.allclose(SPEC.reference(inputs).double(), expected, rtol=1e-5, atol=1e-6)


def test_checker_catches_a_wrong_result(cpu_limits: DeviceLimits) -> None:
    problem: Problem = {"M": 4, "N": 300, "dtype": "float16"}
    err, inputs = checked_launch(SPEC, problem, cfg(256), cpu_limits)
    assert err <= SPEC.tolerance(problem)
    ref = SPEC.reference(inputs)
    inputs["out"][2] = inputs["out"][1]
    assert max_rel_error(inputs["out"], ref) > SPEC.tolerance(problem)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_vendor_path_is_torch_rms_norm_with_the_specs_eps(dtype: str) -> None:
    problem: Problem = {"M": 7, "N": 300, "dtype": dtype}
    assert SPEC.vendor_paths(problem) == ("torch.rms_norm",)
    err, _ = vendor_launch(SPEC, problem, "torch.rms_norm")
    assert err <= SPEC.tolerance(problem)


def test_vendor_check_tells_the_eps_apart() -> None:
    """Rows whose mean square is near eps: the vendor path passes, rms_norm with the eps of the
    issue's model (1e-5 instead of the spec's 1e-6) fails the same check."""
    problem: Problem = {"M": 4, "N": 256, "dtype": "float32"}
    inputs = SPEC.build_inputs(problem, "cpu")
    inputs["x"].mul_(1e-3)
    SPEC.make_vendor_launcher(inputs, "torch.rms_norm")()
    ref = SPEC.reference(inputs)
    assert max_rel_error(inputs["out"], ref) <= SPEC.tolerance(problem)
    other = torch.rms_norm(inputs["x"], (256,), inputs["weight"], 1e-5)
    assert EPS != 1e-5 and max_rel_error(other, ref) > SPEC.tolerance(problem)


def test_unknown_vendor_path_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match=r"no vendor path 'torch\.layer_norm'"):
        SPEC.make_vendor_launcher(SPEC.build_inputs(SPEC.example, "cpu"), "torch.layer_norm")


@needs_gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_vendor_path_on_the_gpu(dtype: str) -> None:
    problem: Problem = {"M": 4096, "N": 4096, "dtype": dtype}
    err, _ = vendor_launch(SPEC, problem, "torch.rms_norm", "cuda")
    assert err <= SPEC.tolerance(problem)


@needs_gpu
def test_pdl_chain_reads_what_the_previous_launch_wrote() -> None:
    """64 rmsnorms, each reading the previous one's output, in one CUDA graph with PDL on give the
    bits of the same chain with PDL off; the buffers between are NaN before each replay, so a
    launch that read before its predecessor finished writing would carry NaN to the end."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs sm_90+")
    base = SPEC.build_inputs({"M": 4096, "N": 4096, "dtype": "bfloat16"}, "cuda")
    bufs = [base["x"], *(torch.empty_like(base["x"]) for _ in range(64))]

    def chain_end(pdl: bool) -> torch.Tensor:
        config = {**SPEC.default_config(Vendor.NVIDIA), "PDL": pdl}
        launchers = [
            SPEC.make_launcher({"x": x, "weight": base["weight"], "out": y}, config)
            for x, y in itertools.pairwise(bufs)
        ]
        for launch in launchers:
            launch()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for launch in launchers:
                launch()
        ends = []
        for _ in range(5):
            for buf in bufs[1:]:
                buf.fill_(float("nan"))
            graph.replay()
            ends.append(bufs[-1].clone())
        return torch.stack(ends)

    plain, pdl = chain_end(False), chain_end(True)
    assert not plain.isnan().any()
    assert torch.equal(plain, pdl)
