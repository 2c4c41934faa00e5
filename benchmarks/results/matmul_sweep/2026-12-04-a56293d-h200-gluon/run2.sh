#!/usr/bin/env bash
# Device call (repo root): cuBLAS's kernel names on the few-tile shapes.
python3 benchmarks/results/matmul_sweep/2026-12-04-a56293d-h200-gluon/cublas_kernels.py 2>&1 | tee $OUT/cublas_kernels.txt
