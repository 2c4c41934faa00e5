"""PDL (programmatic dependent launch), a parameter of rmsnorm and paged_attention: where it
exists, and (on a GPU) that paged attention's two PDL launches still order their workspace."""

import pytest
import torch

from search_spaces import DeviceLimits, KernelSpec, get_spec
from search_spaces.accuracy import max_rel_error
from tests.gpu import needs_gpu

PDL_KERNELS = ("rmsnorm", "paged_attention")


@pytest.mark.parametrize("kernel", PDL_KERNELS)
def test_pdl_is_a_hopper_parameter(
    kernel: str, h200_limits: DeviceLimits, cpu_limits: DeviceLimits
) -> None:
    from workers.device_table import lookup

    spec: KernelSpec = get_spec(kernel)
    a100, mi300x = lookup("A100").limits, lookup("MI300X").limits
    assert spec.space.violation({**spec.default_for(h200_limits), "PDL": True}, h200_limits) is None
    violation = spec.space.violation({**spec.default_for(a100), "PDL": True}, a100)
    assert violation is not None and violation.rule == "pdl-arch"
    # The interpreter cannot run griddepcontrol (inline PTX), so its space has no PDL.
    assert "PDL" not in spec.default_for(mi300x) and "PDL" not in spec.default_for(cpu_limits)
    assert spec.space.count(h200_limits) == 2 * spec.space.count(a100)


@needs_gpu
def test_paged_attention_pdl_reduction_reads_this_launchs_partitions() -> None:
    """Split-KV paged attention with PDL captured in a CUDA graph (the partition kernel, then the
    reduction), replayed with new queries each time: every replay matches the reference. A
    reduction that read the workspace before this replay's partition kernel wrote it would return
    the previous replay's answer."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs sm_90+")
    spec = get_spec("paged_attention")
    problem = spec.validate_problem(
        {"batch": 8, "context_len": 4096, "q_heads": 32, "kv_heads": 8, "head_dim": 128}
        | {"dtype": "bfloat16"}
    )
    inputs = spec.build_inputs(problem, "cuda")
    config = {"PARTITION_SIZE": 512, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "PDL": True}
    launch = spec.make_launcher(inputs, config)
    launch()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch()
    for _ in range(5):
        inputs["q"].copy_(torch.randn_like(inputs["q"]))
        inputs["out"].fill_(float("nan"))
        graph.replay()
        assert max_rel_error(inputs["out"], spec.reference(inputs)) <= spec.tolerance(problem)
