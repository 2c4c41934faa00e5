"""Launch matmul_sweep's ws candidate IDX on a small-K and a full problem; print OK/ERR lines."""

import sys
import time

sys.path.insert(0, "benchmarks")
import matmul_sweep as ms
import torch

from search_spaces import get_spec
from search_spaces.accuracy import max_rel_error

idx = int(sys.argv[1])
spec = get_spec("matmul")
cand = ms._for_device(ms.CANDIDATES["ws"][idx])
for prob in (
    {"M": 64, "N": 256, "K": 256},
    {"M": 200, "N": 1000, "K": 1032},
    {"M": 256, "N": 4096, "K": 4096},
):
    p = spec.validate_problem({**prob, "dtype": "bfloat16"})
    t = time.time()
    try:
        inp = spec.build_inputs(p, "cuda")
        spec.make_launcher(inp, cand)()
        torch.cuda.synchronize()
        err = max_rel_error(inp["out"], spec.reference(inp))
        print(
            f"c{idx} {prob} OK err {err:.1e} tol {spec.tolerance(p):.0e} {time.time() - t:.1f}s",
            flush=True,
        )
    except Exception as e:
        print(f"c{idx} {prob} ERR {type(e).__name__}: {str(e)[-150:]}", flush=True)
