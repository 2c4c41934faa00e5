# Gluon reads kernel parameter annotations itself, so the kernels stay unannotated.
# mypy: disallow-untyped-defs=False
"""Gluon kernel of the ``matmul`` spec (``GLUON``): a Hopper (sm_90) GEMM in the layout of
cuBLAS's warp-specialized kernels, on the same row-major A, B and C as the Triton kernels.

A work item is one K slice (all of K without split-K) of one tile of 2 * PART_ROWS rows x BLOCK_N
columns. Two 4-warp consumer partitions hold PART_ROWS rows each and share one ``STAGES``-deep
shared-memory ring of A and B tiles, fed through TMA by a 1-warp producer partition
(``gl.warp_specialize``). A consumer waits for a slot's "ready" mbarrier, issues its
``warpgroup_mma`` asynchronously, waits for the one before it and then releases that one's slot
on the slot's "empty" mbarrier (count 2: both consumers), so one MMA is always in flight.

Items are numbered tile first, then K slice, tiles in groups of GROUP_M tile rows (as the Triton
kernels' ``_tile``); without ``PERSISTENT`` the grid has one program per item, with it one per SM
taking items in rounds, its producer loading the next item's first tiles while the consumers
store the current one. A K slice is written as fp32 to the workspace, which the spec's split-K
reduction kernel sums. Imported only inside ``MatmulSpec.make_launcher``; its text is part of the
kernel's source for the version hash.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

#: Warps per consumer partition (one warpgroup), and registers per thread of the consumers and
#: of the producer.
PART_WARPS = gl.constexpr(4)
CONSUMER_REGS = gl.constexpr(240)
PRODUCER_REGS = gl.constexpr(24)


@gluon.jit
def _item(w, M, N, K, PART_ROWS: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
          SPLIT_K: gl.constexpr, GROUP_M: gl.constexpr):  # fmt: skip
    """Item ``w``: (first row, first column, K slice, its first K step, its K steps)."""
    n_m = gl.cdiv(M, 2 * PART_ROWS)
    n_n = gl.cdiv(N, BLOCK_N)
    tiles = n_m * n_n
    tile = w % tiles
    split = w // tiles
    in_group = GROUP_M * n_n
    first_m = (tile // in_group) * GROUP_M
    group_m = gl.minimum(n_m - first_m, GROUP_M)
    pid_m = first_m + (tile % in_group) % group_m
    pid_n = (tile % in_group) // group_m
    k_steps = gl.cdiv(K, BLOCK_K)
    per_slice = gl.cdiv(k_steps, SPLIT_K)
    k0 = split * per_slice
    n_k = gl.maximum(gl.minimum(per_slice, k_steps - k0), 0)
    return pid_m * 2 * PART_ROWS, pid_n * BLOCK_N, split, k0, n_k


@gluon.jit
def _producer(a_desc, b_desc, a_smem, b_smem, ready, empty, M, N, K, n_items, n_rounds,
              PART_ROWS: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
              STAGES: gl.constexpr, SPLIT_K: gl.constexpr, GROUP_M: gl.constexpr):  # fmt: skip
    """Load every K step of this program's items into the ring: two A halves and one B tile per
    slot, each slot once both consumers have released it."""
    c = 0
    for r in range(n_rounds):
        w = r * gl.num_programs(0) + gl.program_id(0)
        if w < n_items:
            row, col, _split, k0, n_k = _item(w, M, N, K, PART_ROWS, BLOCK_N, BLOCK_K, SPLIT_K,
                                              GROUP_M)  # fmt: skip
            for i in range(n_k):
                s = c % STAGES
                mbarrier.wait(empty.index(s), ((c // STAGES) & 1) ^ 1)
                mbarrier.expect(
                    ready.index(s), 2 * a_desc.block_type.nbytes + b_desc.block_type.nbytes
                )
                k = (k0 + i) * BLOCK_K
                tma.async_copy_global_to_shared(a_desc, [row, k], ready.index(s),
                                                a_smem.index(2 * s))  # fmt: skip
                tma.async_copy_global_to_shared(a_desc, [row + PART_ROWS, k], ready.index(s),
                                                a_smem.index(2 * s + 1))  # fmt: skip
                tma.async_copy_global_to_shared(b_desc, [k, col], ready.index(s), b_smem.index(s))
                c += 1


@gluon.jit
def _consumer(a_smem, b_smem, ready, empty, out_ptr, ws_ptr, M, N, K, stride_om, stride_on,
              n_items, n_rounds, HALF: gl.constexpr, PART_ROWS: gl.constexpr,
              BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, STAGES: gl.constexpr,
              SPLIT_K: gl.constexpr, GROUP_M: gl.constexpr):  # fmt: skip
    """Rows ``HALF * PART_ROWS`` onwards of each item's tile over its K steps, then stored: cast
    to C's dtype, or (split-K) as fp32 into the item's slice of the workspace."""
    layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[PART_WARPS, 1], instr_shape=[16, BLOCK_N, 16]
    )
    c = 0
    for r in range(n_rounds):
        w = r * gl.num_programs(0) + gl.program_id(0)
        if w < n_items:
            row, col, split, _k0, n_k = _item(w, M, N, K, PART_ROWS, BLOCK_N, BLOCK_K, SPLIT_K,
                                              GROUP_M)  # fmt: skip
            acc = gl.zeros([PART_ROWS, BLOCK_N], gl.float32, layout)
            for i in range(n_k):
                s = c % STAGES
                mbarrier.wait(ready.index(s), (c // STAGES) & 1)
                acc = warpgroup_mma(a_smem.index(2 * s + HALF), b_smem.index(s), acc,
                                    is_async=True)  # fmt: skip
                acc = warpgroup_mma_wait(1, deps=(acc,))
                if i > 0:
                    mbarrier.arrive(empty.index((c - 1) % STAGES))
                c += 1
            acc = warpgroup_mma_wait(0, deps=(acc,))
            if n_k > 0:
                mbarrier.arrive(empty.index((c - 1) % STAGES))
            offs_m = row + HALF * PART_ROWS + gl.arange(0, PART_ROWS,
                                                        layout=gl.SliceLayout(1, layout))  # fmt: skip
            offs_n = col + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, layout))
            mask = gl.expand_dims(offs_m < M, 1) & gl.expand_dims(offs_n < N, 0)
            if SPLIT_K == 1:
                ptrs = (out_ptr + gl.expand_dims(offs_m.to(gl.int64) * stride_om, 1)
                        + gl.expand_dims(offs_n * stride_on, 0))  # fmt: skip
                gl.store(ptrs, acc.to(out_ptr.dtype.element_ty), mask=mask)
            else:
                flat = gl.expand_dims((split * M + offs_m).to(gl.int64) * N, 1)
                gl.store(ws_ptr + flat + gl.expand_dims(offs_n, 0), acc, mask=mask)


@gluon.jit
def matmul_gluon_kernel(a_desc, b_desc, out_ptr, ws_ptr, M, N, K, stride_om, stride_on,
                        PART_ROWS: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                        STAGES: gl.constexpr, SPLIT_K: gl.constexpr,
                        GROUP_M: gl.constexpr):  # fmt: skip
    """C = A @ B over items of tiles x SPLIT_K slices; a 1-D grid of one program per item or
    fewer, launched with num_warps = PART_WARPS (the first consumer partition). a_desc has blocks
    of PART_ROWS x BLOCK_K, b_desc of BLOCK_K x BLOCK_N; ``ws_ptr`` is read only with SPLIT_K > 1
    (fp32 [SPLIT_K, M, N])."""
    n_items = gl.cdiv(M, 2 * PART_ROWS) * gl.cdiv(N, BLOCK_N) * SPLIT_K
    n_rounds = gl.cdiv(n_items, gl.num_programs(0))
    dtype: gl.constexpr = a_desc.dtype
    a_smem = gl.allocate_shared_memory(dtype, [2 * STAGES, PART_ROWS, BLOCK_K], a_desc.layout)
    b_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_K, BLOCK_N], b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)
    gl.warp_specialize(
        [
            (_consumer, (a_smem, b_smem, ready, empty, out_ptr, ws_ptr, M, N, K, stride_om,
                         stride_on, n_items, n_rounds, 0, PART_ROWS, BLOCK_N, BLOCK_K, STAGES,
                         SPLIT_K, GROUP_M)),
            (_consumer, (a_smem, b_smem, ready, empty, out_ptr, ws_ptr, M, N, K, stride_om,
                         stride_on, n_items, n_rounds, 1, PART_ROWS, BLOCK_N, BLOCK_K, STAGES,
                         SPLIT_K, GROUP_M)),
            (_producer, (a_desc, b_desc, a_smem, b_smem, ready, empty, M, N, K, n_items,
                         n_rounds, PART_ROWS, BLOCK_N, BLOCK_K, STAGES, SPLIT_K, GROUP_M)),
        ],
        [PART_WARPS, 1],
        [CONSUMER_REGS, PRODUCER_REGS],
    )  # fmt: skip
