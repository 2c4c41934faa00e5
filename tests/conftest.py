"""Shared test fixtures: Triton's interpreter on CPU, and hand-built device limits."""

import os

# Before anything imports triton: the interpreter runs kernels on CPU tensors. setdefault lets a GPU
# run opt out with TRITON_INTERPRET=0.
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest

from search_spaces.space import DeviceLimits, Vendor

# NVIDIA H200 (Hopper, sm_90): 227 KiB opt-in shared memory per block, 64 Ki registers per block,
# 132 SMs (CUDA C++ Programming Guide, compute capability 9.0 table; cudaGetDeviceProperties).
H200 = DeviceLimits(
    vendor=Vendor.NVIDIA,
    name="NVIDIA H200",
    arch="sm_90",
    shared_mem_per_block=232448,
    registers_per_block=65536,
    warp_size=32,
    multiprocessors=132,
    max_threads_per_block=1024,
)

# AMD Instinct MI300X (CDNA3, gfx942): 64 KiB LDS per workgroup, wavefront 64, 304 CUs (ROCm docs,
# "AMD GPU specifications" table); 65536 registers per block and 1024 threads per block as
# hipGetDeviceProperties reports them (regsPerBlock, maxThreadsPerBlock).
MI300X = DeviceLimits(
    vendor=Vendor.AMD,
    name="AMD Instinct MI300X",
    arch="gfx942",
    shared_mem_per_block=65536,
    registers_per_block=65536,
    warp_size=64,
    multiprocessors=304,
    max_threads_per_block=1024,
)

# Triton's interpreter has no hardware limits; it gets an H200-sized budget so that configs valid on
# the GPUs we tune for are valid here too.
CPU = DeviceLimits(
    vendor=Vendor.CPU,
    name="cpu",
    arch="interpreter",
    shared_mem_per_block=232448,
    registers_per_block=65536,
    warp_size=32,
    multiprocessors=1,
    max_threads_per_block=1024,
)


@pytest.fixture
def h200_limits() -> DeviceLimits:
    return H200


@pytest.fixture
def mi300x_limits() -> DeviceLimits:
    return MI300X


@pytest.fixture
def cpu_limits() -> DeviceLimits:
    return CPU
