"""benchmarks/search.py with sampler constants patched, for a probe of variants.

Usage (repo root): VAR=NAME=VALUE[,local.NAME=VALUE...] PYTHONPATH=$PWD OPENBLAS_NUM_THREADS=1 \
    python3 benchmarks/results/search/2026-12-04-4a74eb9-cpu-needle-variants/variant.py SEARCH.PY-ARGS
NAME is a constant of orchestrator/samplers/learned.py, local.NAME one of .../local.py.
"""

import os
import sys

sys.path.insert(0, ".")

import orchestrator.samplers.learned as learned
import orchestrator.samplers.local as local
from benchmarks.search import main

for item in filter(None, os.environ.get("VAR", "").split(",")):
    name, value = item.split("=")
    module = learned
    if name.startswith("local."):
        module, name = local, name.removeprefix("local.")
    setattr(module, name, type(getattr(module, name))(float(value)))
    print("patched", module.__name__, name, getattr(module, name), file=sys.stderr)
main(sys.argv[1:])
