"""One swapped MoE expert block against the torch path, both against a float64 reference.

Usage (repo root; a GPU, or the CPU with Triton's interpreter):
    python benchmarks/moe_block_error.py --tokens 512 [--experts 128 --topk 8 --hidden 2048
        --ffn 768] [--dtype float16] [--config JSON] [--out FILE.json]
The block is workers.profiling.swap's: fused_moe's up GEMM (routing weights once, in the down
GEMM), ``silu_and_mul``, the down GEMM sharing the up launch's alignment, the top-k sum; ``--config``
is both GEMMs' config (default: the H100 bundle's at 64 tokens, recorded in
``results/deployment/2026-12-06-a5d4b76-h100/qwen/bundle/``). The torch path is the per-expert loop
of workers.profiling.models in ``--dtype``; the reference is the same loop in float64. Prints and
writes each path's ``max |out - ref| / max |ref|`` (the same-function check's measure). Random
weights scaled by 1/sqrt(fan-in), router softmax over random logits, top-k renormalized; seed 0.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

CONFIG = {
    "BLOCK_SIZE_M": 16,
    "BLOCK_SIZE_N": 256,
    "BLOCK_SIZE_K": 128,
    "GROUP_SIZE_M": 1,
    "num_warps": 8,
    "num_stages": 2,
    "TMA": True,
}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="moe_block_error.py")
    parser.add_argument("--tokens", type=int, required=True)
    parser.add_argument("--experts", type=int, default=128)
    parser.add_argument("--topk", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--ffn", type=int, default=768)
    parser.add_argument("--dtype", choices=("float16", "bfloat16"), default="float16")
    parser.add_argument("--config", type=json.loads, default=CONFIG)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"
    from search_spaces.kernels.fused_moe import launch_plan, silu_and_mul
    from workers.profiling.models import looped_experts

    device = "cuda" if torch.cuda.is_available() else "cpu"
    e, k, h, f, m = args.experts, args.topk, args.hidden, args.ffn, args.tokens
    dtype = getattr(torch, args.dtype)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(m, h, generator=gen)
    w_up = torch.randn(e, 2 * f, h, generator=gen) / h**0.5
    w_down = torch.randn(e, h, f, generator=gen) / f**0.5
    weights, ids = torch.randn(m, e, generator=gen).softmax(-1).topk(k, -1)
    weights = (weights / weights.sum(-1, keepdim=True)).contiguous()
    ids = ids.to(torch.int32).contiguous()
    ref = looped_experts(x.double(), w_up.double(), w_down.double(), ids, weights.double())
    base = looped_experts(x.to(dtype), w_up.to(dtype), w_down.to(dtype), ids, weights)

    xd, wu, wd = (t.to(device, dtype).contiguous() for t in (x, w_up, w_down))
    ids_d, weights_d = ids.to(device), weights.to(device)
    start = time.perf_counter()
    up = launch_plan(args.config, m, e, k, 2 * f, h, False, xd)
    down = launch_plan(args.config, m, e, k, h, f, k > 1, xd, share=up)
    hidden = torch.empty(m, k, 2 * f, dtype=dtype, device=device)
    up(xd, wu, ids_d, torch.ones(m, k, device=device), hidden)
    act = torch.empty(m * k, f, dtype=dtype, device=device)
    silu_and_mul(hidden.view(m * k, 2 * f), act)
    out = torch.empty(m, k, h, dtype=dtype, device=device)
    down(act, wd, ids_d, weights_d, out)
    swapped = out.sum(1).cpu()

    def error(a: torch.Tensor) -> float:
        return float((a.double() - ref).abs().max() / ref.abs().max())

    result = {
        "tokens": m, "experts": e, "topk": k, "hidden": h, "ffn": f, "dtype": args.dtype,
        "device": device, "config": args.config, "torch_path_error": error(base),
        "swapped_error": error(swapped), "swapped_s": time.perf_counter() - start,
    }  # fmt: skip
    print(json.dumps(result))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
