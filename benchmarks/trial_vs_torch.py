"""Issue 2 check: `tunefleet trial matmul` on a large bf16 GEMM against torch.matmul, same run.

Usage (GPU machine, from the repo root): python benchmarks/trial_vs_torch.py [--out FILE]
Runs `python -m orchestrator trial matmul ... --json` for a few hand-picked configs, and times
torch.matmul (cuBLAS) with the workers' own timer (events, L2 flushed, warm-up, median) before and
after them. Prints a table; writes the raw JSON (commands included) to --out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

PROBLEM = "M=4096,N=4096,K=4096,dtype=bfloat16"
CONFIGS = (
    "BLOCK_M=128,BLOCK_N=256,BLOCK_K=64,GROUP_M=8,SPLIT_K=1,num_warps=8,num_stages=3",
    "BLOCK_M=128,BLOCK_N=128,BLOCK_K=64,GROUP_M=8,SPLIT_K=1,num_warps=4,num_stages=4",
    "BLOCK_M=256,BLOCK_N=128,BLOCK_K=64,GROUP_M=8,SPLIT_K=1,num_warps=8,num_stages=3",
    "default",
)


def torch_matmul_ms(m: int, n: int, k: int, reps: int) -> list[float]:
    import torch

    from workers.device import Backend
    from workers.timing import l2_flush_buffer, time_launcher

    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    return time_launcher(
        lambda: torch.matmul(a, b, out=c),
        Backend.CUDA,
        warmup=10,
        reps=reps,
        flush=l2_flush_buffer(),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    parser.add_argument("--reps", type=int, default=50)
    args = parser.parse_args()
    m = n = k = 4096
    flops = 2 * m * n * k
    runs = []
    before = torch_matmul_ms(m, n, k, args.reps)
    for config in CONFIGS:
        cmd = [
            sys.executable,
            "-m",
            "orchestrator",
            "trial",
            "matmul",
            "-p",
            PROBLEM,
            "-c",
            config,
            "--reps",
            str(args.reps),
            "--json",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        result = json.loads(proc.stdout) if proc.stdout.strip() else {"error": proc.stderr[-2000:]}
        runs.append({"command": " ".join(cmd[1:]), "result": result})
    after = torch_matmul_ms(m, n, k, args.reps)
    torch_ms = statistics.median(before + after)
    torch_tflops = flops / (torch_ms * 1e-3) / 1e12
    print(
        f"torch.matmul (cuBLAS): median {torch_ms:.4f} ms = {torch_tflops:.1f} TFLOP/s "
        f"(before {statistics.median(before):.4f}, after {statistics.median(after):.4f})"
    )
    print(f"{'config':<80} {'outcome':<8} {'ms':>8} {'TFLOP/s':>8} {'vs torch':>8}")
    for run in runs:
        r = run["result"]
        ms = r.get("median_ms")
        tf = flops / (ms * 1e-3) / 1e12 if ms else None
        run["ratio_vs_torch"] = tf / torch_tflops if tf else None
        ratio = f"{run['ratio_vs_torch']:.3f}" if tf else "-"
        print(
            f"{run['command'].split(' -c ')[1].split(' --reps')[0]:<80} "
            f"{r.get('outcome', 'error'):<8} {ms or 0:8.4f} {tf or 0:8.1f} {ratio:>8}"
        )
    record = {
        "problem": PROBLEM,
        "torch": {
            "samples_before_ms": before,
            "samples_after_ms": after,
            "median_ms": torch_ms,
            "tflops": torch_tflops,
        },
        "trials": runs,
    }
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(record, fh, indent=1)


if __name__ == "__main__":
    main()
