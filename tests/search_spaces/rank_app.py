"""One rank of the two-rank tests: joins a gloo group over loopback (MASTER_ADDR, MASTER_PORT,
RANK, WORLD_SIZE from the environment), loads the bundle files given, checks them against the other
ranks and prints one JSON line: its rank, the error (or null), the collectives the check issued (as
the profiler saw them) and the check's wall time."""

import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from search_spaces.bundle import load_bundle
from search_spaces.ranks import RankMismatch, check_same_bundles, current_rank

dist.init_process_group("gloo", timeout=timedelta(seconds=60))
bundles = [load_bundle(path) for path in sys.argv[1:]]
error = None
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
    start = time.perf_counter()
    try:
        check_same_bundles(bundles)
    except RankMismatch as exc:
        error = str(exc)
    seconds = time.perf_counter() - start
collectives = [e.name for e in prof.events() if e.name.startswith("c10d::")]
print(
    json.dumps(
        {"rank": current_rank(), "error": error, "collectives": collectives, "seconds": seconds}
    ),
    flush=True,
)
dist.destroy_process_group()
# Interpreter teardown can abort ("terminate called without an active exception") when a
# profiler or gloo thread is still joinable at static destruction; the report is out, so skip it.
os._exit(0)
