# Gluon reads kernel parameter annotations itself, so the kernels stay unannotated.
# mypy: disallow-untyped-defs=False
"""Gluon kernel of the ``fp8_matmul`` spec (``GLUON``): a Hopper (sm_90) block-scaled FP8 GEMM in
DeepGEMM's layout, on the same inputs as the Triton kernel.

An output tile is 128 x BLOCK_N (BLOCK_N <= 128, so its columns lie in one of B's 128x128 scale
blocks and B's scale is one number per K step, folded into the row scales), held by two 4-warp
consumer partitions of 64 rows each, which share one ``STAGES``-deep shared-memory ring of A and B
tiles fed through TMA by a 1-warp producer partition (``gl.warp_specialize``). A K step is one
scale group (BLOCK_K = 128): each consumer waits for a slot's "ready" mbarrier, runs the step's
product as an asynchronous ``warpgroup_mma`` into one of two fp32 register tiles (the steps
alternate) and releases the slot on its "empty" mbarrier (count 2: both consumers) once that
product is done. The scaling lags one step: step k's product is issued, then step k-1's is waited
for, scaled by its rows' scales and added to the fp32 accumulator on the CUDA cores while step k's
runs on the tensor cores.

Without ``PERSISTENT`` the grid has one program per tile; ``PERSISTENT``: fewer programs than
tiles, program p taking tiles p, p + programs, ... in rounds and keeping its barriers, so the
producer loads the next tile's first K steps while the consumers store the current one. Tiles go in
``_fp8_matmul_kernels``' grouped order. Imported only inside ``Fp8MatmulSpec.make_launcher``; its
text is part of the kernel's source for the version hash.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

#: Output rows per consumer partition (one warpgroup's wgmma M); a tile has two.
PART_ROWS = gl.constexpr(64)
#: Warps per consumer partition, and registers per thread of the consumers and of the producer
#: (2 * 128 * 232 + 32 * 40 of the 64K registers).
PART_WARPS = gl.constexpr(4)
CONSUMER_REGS = gl.constexpr(232)
PRODUCER_REGS = gl.constexpr(40)
#: K elements per step: one scale group of A and B.
BLOCK_K = gl.constexpr(128)


@gluon.jit
def _tile(t, M, N, BLOCK_N: gl.constexpr, GROUP_SIZE_M: gl.constexpr):
    """(tile row, tile column) of tile ``t``: GROUP_SIZE_M tile rows walked column by column."""
    tiles_n = gl.cdiv(N, BLOCK_N)
    per_group = GROUP_SIZE_M * tiles_n
    first_m = (t // per_group) * GROUP_SIZE_M
    rows = gl.minimum(gl.cdiv(M, 2 * PART_ROWS) - first_m, GROUP_SIZE_M)
    in_group = t % per_group
    return first_m + in_group % rows, in_group // rows


@gluon.jit
def _producer(a_desc, b_desc, a_smem, b_smem, ready, empty, M, N, K, n_rounds,
              GROUP_SIZE_M: gl.constexpr, BLOCK_N: gl.constexpr,
              STAGES: gl.constexpr):  # fmt: skip
    """Each tile's K steps in order, step i (counted over the program's tiles) into ring slot
    i % STAGES once both consumers released it: A's two row halves and B's tile."""
    tiles = gl.cdiv(M, 2 * PART_ROWS) * gl.cdiv(N, BLOCK_N)
    n_k = K // BLOCK_K
    base = 0
    for r in range(n_rounds):
        t = r * gl.num_programs(0) + gl.program_id(0)
        if t < tiles:
            pid_m, pid_n = _tile(t, M, N, BLOCK_N, GROUP_SIZE_M)
            for k in range(n_k):
                s = (base + k) % STAGES
                # a fresh barrier passes a wait on parity 1 at once: the first pass needs no release
                mbarrier.wait(empty.index(s), (((base + k) // STAGES) & 1) ^ 1)
                mbarrier.expect(ready.index(s),
                                2 * a_desc.block_type.nbytes + b_desc.block_type.nbytes)  # fmt: skip
                for h in gl.static_range(2):
                    tma.async_copy_global_to_shared(
                        a_desc, [(2 * pid_m + h) * PART_ROWS, k * BLOCK_K], ready.index(s),
                        a_smem.index(2 * s + h),
                    )  # fmt: skip
                tma.async_copy_global_to_shared(b_desc, [pid_n * BLOCK_N, k * BLOCK_K],
                                                ready.index(s), b_smem.index(s))  # fmt: skip
            base += n_k


@gluon.jit
def _issue(i, a_smem, b_smem, ready, regs, HALF: gl.constexpr, STAGES: gl.constexpr):
    """The product of ring position ``i``'s tiles (rows ``HALF * PART_ROWS`` onwards), issued
    asynchronously once the producer filled it, into the registers of ``regs`` (a finished tile,
    overwritten: use_acc off)."""
    s = i % STAGES
    mbarrier.wait(ready.index(s), (i // STAGES) & 1)
    return warpgroup_mma(a_smem.index(2 * s + HALF), b_smem.index(s).permute((1, 0)), regs,
                         use_acc=False, is_async=True)  # fmt: skip


@gluon.jit
def _retire(acc, held, held_s, i, empty, STAGES: gl.constexpr, PENDING: gl.constexpr):
    """(``acc`` plus the product ``held`` of ring position ``i`` scaled by its rows' ``held_s``,
    that product) once it is done (PENDING later products may still run); the slot released."""
    done = warpgroup_mma_wait(PENDING, deps=(held,))
    mbarrier.arrive(empty.index(i % STAGES))
    acc += done * gl.expand_dims(held_s, 1)
    # Waits for nothing more, but ties the scaled sum and the product's registers to one point:
    # LLVM cannot sink the scaling past the next product issued into those registers.
    return warpgroup_mma_wait(PENDING, deps=(acc, done))


@gluon.jit
def _consumer(a_smem, b_smem, ready, empty, as_ptr, bs_ptr, c_ptr, M, N, K, n_rounds, stride_asm,
              stride_ask, stride_bsn, stride_bsk, stride_cm, HALF: gl.constexpr,
              GROUP_SIZE_M: gl.constexpr, BLOCK_N: gl.constexpr,
              STAGES: gl.constexpr):  # fmt: skip
    """Rows ``HALF * PART_ROWS`` onwards of each tile: the K steps' products, each scaled one step
    late (step k's wgmma runs while step k-1's is scaled and added), then stored as C's dtype.

    The steps go in pairs through two register tiles, x and y, each product issued into the
    registers of the tile's last finished one: a product still running when the loop turns must
    stay in the registers it was issued into (ptxas serializes the wgmmas of a loop that copies a
    running product's registers)."""
    layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[PART_WARPS, 1], instr_shape=[16, BLOCK_N, 32]
    )
    tiles = gl.cdiv(M, 2 * PART_ROWS) * gl.cdiv(N, BLOCK_N)
    n_k = K // BLOCK_K
    zero = gl.zeros([PART_ROWS, BLOCK_N], gl.float32, layout)
    base = 0
    for r in range(n_rounds):
        t = r * gl.num_programs(0) + gl.program_id(0)
        if t < tiles:
            pid_m, pid_n = _tile(t, M, N, BLOCK_N, GROUP_SIZE_M)
            offs_m = (2 * pid_m + HALF) * PART_ROWS + gl.arange(
                0, PART_ROWS, layout=gl.SliceLayout(1, layout)
            )
            # rows past M read a wrapped row's scales (in bounds) and are never stored
            a_scales = as_ptr + (offs_m % M).to(gl.int64) * stride_asm
            b_scales = bs_ptr + (pid_n * BLOCK_N // BLOCK_K) * stride_bsn
            acc = zero
            x_regs = zero
            y = _issue(base, a_smem, b_smem, ready, zero, HALF, STAGES)
            y_s = gl.load(a_scales) * gl.load(b_scales)
            for k in range(1, n_k - 1, 2):
                x = _issue(base + k, a_smem, b_smem, ready, x_regs, HALF, STAGES)
                x_s = gl.load(a_scales + k * stride_ask) * gl.load(b_scales + k * stride_bsk)
                acc, y_regs = _retire(acc, y, y_s, base + k - 1, empty, STAGES, 1)
                y = _issue(base + k + 1, a_smem, b_smem, ready, y_regs, HALF, STAGES)
                y_s = (gl.load(a_scales + (k + 1) * stride_ask)
                       * gl.load(b_scales + (k + 1) * stride_bsk))  # fmt: skip
                acc, x_regs = _retire(acc, x, x_s, base + k, empty, STAGES, 1)
            if n_k % 2 == 0:  # one step past the pairs
                last = n_k - 1
                x = _issue(base + last, a_smem, b_smem, ready, x_regs, HALF, STAGES)
                x_s = gl.load(a_scales + last * stride_ask) * gl.load(b_scales + last * stride_bsk)
                acc, _ = _retire(acc, y, y_s, base + last - 1, empty, STAGES, 1)
                acc, _ = _retire(acc, x, x_s, base + last, empty, STAGES, 0)
            else:
                acc, _ = _retire(acc, y, y_s, base + n_k - 1, empty, STAGES, 0)
            offs_n = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, layout))
            ptrs = (c_ptr + gl.expand_dims(offs_m.to(gl.int64) * stride_cm, 1)
                    + gl.expand_dims(offs_n, 0))  # fmt: skip
            mask = gl.expand_dims(offs_m < M, 1) & gl.expand_dims(offs_n < N, 0)
            gl.store(ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)
            base += n_k


# M stays unspecialized: one compile serves every batch size.
@gluon.jit(do_not_specialize=["M"])
def fp8_matmul_gluon_kernel(a_desc, b_desc, as_ptr, bs_ptr, c_ptr, M, N, K, stride_asm,
                            stride_ask, stride_bsn, stride_bsk, stride_cm,
                            GROUP_SIZE_M: gl.constexpr, BLOCK_N: gl.constexpr,
                            STAGES: gl.constexpr, PERSISTENT: gl.constexpr):  # fmt: skip
    """C = (A * a_scale) @ (B * b_scale)^T, C [M, N] (rows ``stride_cm`` apart) in its dtype.

    a_desc: Gluon TMA descriptor of A e4m3 [M, K] with blocks [PART_ROWS, BLOCK_K]; b_desc: of
    B e4m3 [N, K] with blocks [BLOCK_N, BLOCK_K] (BLOCK_N divides BLOCK_K); ``as_ptr``: fp32
    [M, K / BLOCK_K], ``bs_ptr``: fp32 [cdiv(N, BLOCK_K), K / BLOCK_K]; K a multiple of BLOCK_K.
    Grid: one program per 2 * PART_ROWS x BLOCK_N tile, or (``PERSISTENT``) fewer, each taking
    tiles in rounds; launched with num_warps = PART_WARPS (the first consumer partition)."""
    dtype: gl.constexpr = a_desc.dtype
    if PERSISTENT:
        tiles = gl.cdiv(M, 2 * PART_ROWS) * gl.cdiv(N, BLOCK_N)
        n_rounds = gl.cdiv(tiles, gl.num_programs(0))
    else:
        n_rounds = 1
    a_smem = gl.allocate_shared_memory(dtype, [2 * STAGES, PART_ROWS, BLOCK_K], a_desc.layout)
    b_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, BLOCK_K], b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)
    gl.warp_specialize(
        [
            (_consumer, (a_smem, b_smem, ready, empty, as_ptr, bs_ptr, c_ptr, M, N, K, n_rounds,
                         stride_asm, stride_ask, stride_bsn, stride_bsk, stride_cm, 0,
                         GROUP_SIZE_M, BLOCK_N, STAGES)),
            (_consumer, (a_smem, b_smem, ready, empty, as_ptr, bs_ptr, c_ptr, M, N, K, n_rounds,
                         stride_asm, stride_ask, stride_bsn, stride_bsk, stride_cm, 1,
                         GROUP_SIZE_M, BLOCK_N, STAGES)),
            (_producer, (a_desc, b_desc, a_smem, b_smem, ready, empty, M, N, K, n_rounds,
                         GROUP_SIZE_M, BLOCK_N, STAGES)),
        ],
        [PART_WARPS, 1],
        [CONSUMER_REGS, PRODUCER_REGS],
    )  # fmt: skip
