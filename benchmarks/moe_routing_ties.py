"""How much of an MoE model's error against its float32 twin is routing near-ties, not rounding.

Usage (repo root; the CPU or a GPU):
    python benchmarks/moe_routing_ties.py [--model qwen3-30b-a3b --layers 2 --phase prefill
        --batch 1 --seq 512 --dtype bfloat16 --device cpu] [--out FILE.json]
Builds the built-in model (random weights, workers.profiling.models) and its float32 twin, runs one
forward of each on the same inputs, and prints the model's error (the same-function check's
``max |logits - twin's| / max |twin's|``) against the twin routed by its own top-k, the tokens per
MoE layer the twin routed to another set of experts than the model did, and the error against the
twin routed as the model was (``Workload.pinned``, what ``profile --with-bundle`` compares with).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="moe_routing_ties.py")
    parser.add_argument("--model", default="qwen3-30b-a3b")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--phase", choices=("prefill", "decode"), default="prefill")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--dtype", choices=("bfloat16", "float16"), default="bfloat16")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from workers.profiling.check import max_rel_error
    from workers.profiling.models import load_workload, moe_layers
    from workers.profiling.trace import Phase

    start = time.perf_counter()
    workload = load_workload(args.model, args.device, args.dtype, args.layers)
    twin = workload.fp32_twin()
    phase = Phase(args.phase)
    out, routes = workload.routed(workload.forward_for(phase, args.batch, args.seq))
    if not routes:
        parser.error(f"{args.model} has no MoE layers")
    reference = workload.reference_for(twin, phase, args.batch, args.seq)
    own = reference()
    pinned, moved = workload.pinned(twin, reference, routes)
    per_layer = [layer.rerouted for layer in moe_layers(twin)]
    result = {
        "model": args.model,
        "layers": args.layers,
        "phase": args.phase,
        "batch": args.batch,
        "seq": args.seq,
        "dtype": args.dtype,
        "device": args.device,
        "tokens_per_layer": int(routes[0].shape[0]),
        "error_vs_twin_own_routing": max_rel_error(out, own),
        "rerouted_tokens_per_layer": per_layer,
        "error_vs_twin_pinned": max_rel_error(out, pinned),
        "seconds": round(time.perf_counter() - start, 1),
    }
    assert moved == sum(per_layer)
    print(json.dumps(result, indent=1))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
