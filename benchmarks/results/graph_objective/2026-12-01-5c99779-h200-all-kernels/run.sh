#!/usr/bin/env bash
# One nvidia-h200 device call (repo root, wheels installed, PYTHONPATH set), at commit 000c6c1: every
# built-in kernel timed by the graph objective (`tunefleet trial ... --graph`, default config, and
# for matmul the split-K configs of both reduce settings), each also timed alone, so that each
# kernel's launcher is known to be captured and replayed in a CUDA graph. Output in $OUT/results.tgz.
set -u
R=$OUT/r
mkdir -p "$R"
bash benchmarks/runs/byte_compile_wheels.sh
TF=(python3 -c "from orchestrator.cli import main; main()")
run() {  # name, kernel, problem, config
  for mode in alone graph; do
    flag=(); [ $mode = graph ] && flag=(--graph)
    timeout 120 "${TF[@]}" trial "$2" -p "$3" -c "$4" "${flag[@]}" --json > "$R/$1_$mode.json" 2> "$R/$1_$mode.err"
    echo "$1 $mode rc=$? $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['outcome'], round(d['median_ms']*1e3, 2), 'us')" "$R/$1_$mode.json" 2>&1 | tail -n 1)"
  done
}
run matmul_splitk_fused matmul M=128,N=4096,K=4096,dtype=bfloat16 SPLIT_K=4,GROUP_M=1,FUSED_REDUCE=True,BLOCK_M=128,BLOCK_N=64,num_warps=4
run matmul_splitk_second matmul M=128,N=4096,K=4096,dtype=bfloat16 SPLIT_K=4,GROUP_M=1,FUSED_REDUCE=False,BLOCK_M=128,BLOCK_N=64,num_warps=4
run matmul_persistent matmul M=4096,N=4096,K=4096,dtype=bfloat16 PERSISTENT=True,TMA=True
run rmsnorm rmsnorm M=4096,N=4096,dtype=bfloat16 default
run flash_attention flash_attention batch=8,max_seqlen=1024,pattern=mixed,q_heads=32,kv_heads=8,head_dim=128,causal=True,dtype=float16 default
run paged_attention paged_attention batch=32,context_len=4096,pattern=mixed,q_heads=32,kv_heads=8,head_dim=128,page_size=16,dtype=float16 default
run fused_moe fused_moe M=64,E=8,topk=2,N=14336,K=4096,dtype=bfloat16 default
tar czf "$OUT/results.tgz" -C "$R" .
