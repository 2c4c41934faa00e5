#!/usr/bin/env bash
# Device call (repo root): the matmul GPU tests (WIDE_N's among them) compiled for the GPU
# (TRITON_INTERPRET=0; run.sh's test step ran them under the interpreter by mistake).
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl3/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD TRITON_INTERPRET=0
timeout 100 python3 -m pytest -q -p no:cacheprovider -o addopts= -m gpu tests/search_spaces/test_matmul.py 2>&1 | tail -4 | tee $OUT/gpu_tests_compiled.txt
