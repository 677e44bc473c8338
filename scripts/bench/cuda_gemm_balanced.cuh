// A trial kept for the benches only (docs/cuda.md, twelfth slice: slower in the decode step than
// the engine's tile grid, so the engine does not build it): the few-row GEMM y = x W^T (up to 16
// rows) with the work cut evenly over a fixed grid of P blocks, batch-invariant like gemm.cuh: a
// row's bits depend on n, k and P only. Included after the engine's kernels.cu.
#pragma once

// The weight is T column tiles of 8 * NT columns, each C chunks of 32 k: T * C units, tile after
// tile. Block b takes units [b * T * C / P, (b + 1) * T * C / P), so every block streams the
// same number of weight bytes (give or take one chunk) and no block waits on a short last wave
// or a tile split that leaves SMs idle (gemm.cuh's tile-per-block grid at the narrow shapes).
// Its units are one or more segments, each a run of chunks of one tile, accumulated as
// gemm.cuh's block does (warp w takes chunks w, w + W, ... of the segment, warps summed in
// order). A segment that is a whole tile is written out at once; otherwise its sums go to
// `partial` (slot 0 when the tile is the block's first, else 1: only a block's first and last
// segments can be part of a tile) and the last of the tile's blocks to arrive (a counter per
// tile, reset by that block) adds the segments in block order, which is k order. Every choice
// here is a function of (n, k, P), never of m, so a 16-row verify gives 16 one-row steps' bits.
__device__ __forceinline__ long balanced_start(long b, long units, long p) { return b * units / p; }
// The block whose range holds unit u: the largest b with start(b) <= u.
__device__ __forceinline__ long balanced_block(long u, long units, long p) {
    return ((u + 1) * p - 1) / units;
}

template <int NT, int W, int U, bool GLU, bool PRE>
__device__ void gemm_balanced(const __nv_bfloat16* __restrict__ x,
                              const __nv_bfloat16* __restrict__ w, __nv_bfloat16* __restrict__ y,
                              int m, int n, int k, int ldx, int vec, float* __restrict__ partial,
                              unsigned* __restrict__ counters) {
    __shared__ float part[W][16][8 * NT];
    __shared__ bool last;
    constexpr int TW = 8 * NT;
    const long chunks = (k + 31) / 32, tiles = (n + TW - 1) / TW, units = tiles * chunks;
    const long p = gridDim.x, b = blockIdx.x;
    long u = balanced_start(b, units, p);
    const long u_end = balanced_start(b + 1, units, p), first_tile = u / chunks;
    bool enter = true;
    while (u < u_end) {
        const long tile = u / chunks, c_lo = u % chunks;
        const long c_hi = c_lo + (u_end - u) < chunks ? c_lo + (u_end - u) : chunks;
        const long n0 = tile * TW;
        float c[NT][4];
        gemm_accumulate<NT, W, U, PRE>(x, w, m, n, k, ldx, vec, n0, c_lo, c_hi, enter, c);
        enter = false;
        __syncthreads();  // the previous segment's readers of `part` are done
        gemm_park<NT, W>(c, part);
        __syncthreads();
        auto warps_sum = [&](int row, int col) { return gemm_warps_sum<NT, W>(part, row, col); };
        u += c_hi - c_lo;
        if (c_lo == 0 && c_hi == chunks) {
            gemm_store<NT, GLU>(y, m, n, n0, warps_sum);
            continue;
        }
        const int slot = tile == first_tile ? 0 : 1;
        float* mine = partial + (b * 2 + slot) * 16 * TW;
        for (int e = threadIdx.x; e < 16 * TW; e += blockDim.x) {
            const int row = e / TW, col = e % TW;
            if (row < m) mine[e] = warps_sum(row, col);
        }
        const long b_lo = balanced_block(tile * chunks, units, p);
        const long b_hi = balanced_block(tile * chunks + chunks - 1, units, p);
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) last = atomicAdd(&counters[tile], 1u) == (unsigned)(b_hi - b_lo);
        __syncthreads();
        if (!last) continue;
        __threadfence();
        gemm_store<NT, GLU>(y, m, n, n0, [&](int row, int col) {
            float s = 0.f;
            for (long o = b_lo; o <= b_hi; ++o) {
                const int os = tile == balanced_start(o, units, p) / chunks ? 0 : 1;
                s += __ldcg(&partial[((o * 2 + os) * 16 + row) * TW + col]);
            }
            return s;
        });
        if (threadIdx.x == 0) counters[tile] = 0u;
    }
    if (enter) pdl_enter();
}

#define GEMM_BALANCED_AS(NAME, NT, W, U, GLU)                                                 \
    extern "C" __global__ void __launch_bounds__(W * 32)                                      \
        NAME(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,       \
             __nv_bfloat16* __restrict__ y, int m, int n, int k, int ldx, int vec,           \
             float* partial, unsigned* counters) {                                           \
        gemm_balanced<NT, W, U, GLU, true>(x, w, y, m, n, k, ldx, vec, partial, counters);   \
    }
#define GEMM_BALANCED(NT, W, U)                                                               \
    GEMM_BALANCED_AS(gemm_bal_bf16_nt##NT##_w##W, NT, W, U, false)                            \
    GEMM_BALANCED_AS(gemm_bal_glu_bf16_nt##NT##_w##W, NT, W, U, true)
GEMM_BALANCED(1, 4, 4)
GEMM_BALANCED(2, 4, 4)
GEMM_BALANCED(4, 4, 4)
GEMM_BALANCED(1, 8, 4)
GEMM_BALANCED(2, 8, 4)
GEMM_BALANCED(4, 8, 4)
