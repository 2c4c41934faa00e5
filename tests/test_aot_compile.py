"""benchmarks/aot_compile.py: a spec's kernels compiled for sm_90a on a machine without a GPU,
through the spec's launcher (real Triton and ptxas, nothing launched)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / "benchmarks" / "aot_compile.py"
SPLIT_K = '{"BLOCK_M":128,"BLOCK_N":64,"BLOCK_K":64,"num_warps":8,"num_stages":6,"TMA":true,"SPLIT_K":4,"GROUP_M":1}'


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run(
        [sys.executable, str(TOOL), *args], capture_output=True, text=True, env=env, timeout=240
    )


def test_every_kernel_the_launcher_starts_is_compiled_and_reported() -> None:
    out = _run(
        "matmul", "-p", "M=128,N=4096,K=4096,dtype=bfloat16", "-c", SPLIT_K,
        "-c", '{"BLOCK_M":128,"BLOCK_N":256,"BLOCK_K":64,"num_stages":6}',
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    main = next(x for x in lines if "matmul_tma_kernel:" in x)
    reduce = next(x for x in lines if "splitk_reduce_kernel:" in x)
    assert "8 warps" in main and "0 bytes spilled" in main and "(too much)" not in main
    assert "4 warps" in reduce
    # 128x64 and 64x64 tiles of 2 bytes, six stages: 144 KiB of the H200's 227.
    shared = int(main.split(" bytes shared memory")[0].rsplit(" ", 1)[1])
    assert 6 * (128 * 64 + 64 * 64) * 2 <= shared <= 232448
    assert any("not in the space (shared-memory" in x for x in lines)


def test_bad_input_is_one_line_and_exit_code_2() -> None:
    for args, says in [
        (("nokernel", "-p", "M=1", "-c", "{}"), "unknown kernel 'nokernel'"),
        (("matmul", "-p", "M=1,N=8,K=8,dtype=float16", "-c", "{BLOCK_M"), "is not JSON"),
        (
            ("matmul", "-p", "M=1,N=8,K=8,dtype=float16", "-c", "{}", "--device", "MI300X"),
            "not an NVIDIA",
        ),
    ]:
        out = _run(*args)
        assert out.returncode == 2 and says in out.stderr.splitlines()[-1], out.stderr


def test_the_wgmma_waits_say_whether_an_mma_stays_asynchronous() -> None:
    """A bf16 GEMM's pipelined loop waits for all but the newest wgmma; fp8_matmul scales each
    step's product on the CUDA cores, so its loop waits for every wgmma (none partial)."""
    matmul = _run(
        "matmul", "-p", "M=128,N=4096,K=4096,dtype=bfloat16",
        "-c", '{"BLOCK_M":128,"BLOCK_N":256,"BLOCK_K":64,"num_warps":8,"num_stages":4,"TMA":true}',
    )  # fmt: skip
    fp8 = _run(
        "fp8_matmul", "-p", "M=4096,N=7168,K=2048", "--device", "H100",
        "-c", '{"BLOCK_SIZE_M":64,"BLOCK_SIZE_N":128,"num_stages":4,"TMA":true}',
    )  # fmt: skip
    assert matmul.returncode == fp8.returncode == 0, matmul.stderr + fp8.stderr
    (pipelined,) = [x for x in matmul.stdout.splitlines() if "matmul_tma_kernel:" in x]
    (scaled,) = [x for x in fp8.stdout.splitlines() if "fp8_matmul_kernel:" in x]
    assert "wgmma: " in pipelined and " 0 partial" not in pipelined
    assert "wgmma: " in scaled and scaled.endswith(" 0 partial")
