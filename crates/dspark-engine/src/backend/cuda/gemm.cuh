// Few-row GEMM y = x W^T (up to 16 rows), batch-invariant: a row's bits depend on n and k only.
#pragma once
#include "common.cuh"

// bf16 tensor cores. A block owns 8 * NT output columns; K is cut into 32-wide chunks, the
// chunks into `splits` fixed contiguous ranges (one per blockIdx.y), and a range over the W
// warps (warp w takes chunks w, w + W, ...). Thread (g = lane / 4, t = lane % 4) loads 8
// consecutive k of weight row n0 + g (16 bytes) and the same 8 k of x rows g and g + 8; two
// m16n8k16 MMAs consume them under one fixed permutation of k (the same for A and B, so the
// product is the dot product over a reordered but fixed k sequence). The warps' tiles are
// summed in warp order; with splits > 1 each range's sum goes to `partial` (f32) and the last
// block of a column tile to arrive (a counter per tile, reset by it) adds the ranges in range
// order. Absent rows are zero rows of the MMA and never mix into a present row, and nothing
// here depends on m, so a 16-row verify gives the bits of 16 one-row steps.
// GLU: w holds the gate and up projections' rows interleaved (gate 0, up 0, gate 1, ...), so a
// block's columns are whole pairs; each pair's two sums are rounded to bf16 as the plain GEMM
// stores them and y gets silu(gate) * up (`silu_mul`, as `swiglu_bf16` computes it), n / 2
// columns per row: the bits of the plain GEMM followed by `swiglu_bf16`, one launch fewer.
// PRE: each warp loads the weights of its first UNROLL chunks before the PDL wait, so the
// first DRAM round trip overlaps the tail of the kernel before (weights are written only at
// load, never by the kernel launched just before a GEMM); the bits are the same. Measured in
// scripts/bench/cuda_chain_bench.cu (H200, 1024 context): a decode step 5.61 -> 5.12 ms, 16 rows
// 6.37 -> 5.71; holding more chunks in registers, or L2 prefetches of later chunks, was slower.
// Accumulates chunks [c_lo, c_hi) of the tile at column n0 into c (this warp's share: chunks
// c_lo + warp, c_lo + warp + W, ...). With `enter`, the kernel's PDL wait happens here: after
// the first chunks' weights are loaded when PRE.
template <int NT, int W, int U, bool PRE>
__device__ __forceinline__ void gemm_accumulate(const __nv_bfloat16* __restrict__ x,
                                                const __nv_bfloat16* __restrict__ w, int m, int n,
                                                int k, int ldx, int vec, long n0, long c_lo,
                                                long c_hi, bool enter, float (&c)[NT][4]) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const __nv_bfloat16* xa = x + (long)g * ldx;
    const __nv_bfloat16* xb = x + (long)(g + 8) * ldx;
    const bool alive = g < m, blive = g + 8 < m;
#pragma unroll
    for (int j = 0; j < NT; ++j) c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.f;
    // UNROLL chunks' loads are issued before their MMAs (bytes in flight); the MMAs still run
    // in chunk order
    constexpr int UNROLL = U / NT > 0 ? U / NT : 1;
    const long step = (long)W * UNROLL;
    auto load_w = [&](uint32_t (&wr)[UNROLL][NT][4], long ch0) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const long ch = ch0 + (long)u * W;
            const long k0 = ch * 32 + 8 * t;
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const long col = n0 + 8 * j + g;
                load8_bf16<true>(w + col * (long)k, k0, k, vec, ch < c_hi && col < n, wr[u][j]);
            }
        }
    };
    auto consume = [&](const uint32_t (&wr)[UNROLL][NT][4], long ch0) {
        uint32_t ar[UNROLL][4], br[UNROLL][4];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const long ch = ch0 + (long)u * W;
            const bool in = ch < c_hi;
            const long k0 = ch * 32 + 8 * t;
            load8_bf16<false>(xa, k0, k, vec, alive && in, ar[u]);
            load8_bf16<false>(xb, k0, k, vec, blive && in, br[u]);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            if (ch0 + (long)u * W >= c_hi) break;
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                mma_bf16(c[j], ar[u][0], br[u][0], ar[u][1], br[u][1], wr[u][j][0], wr[u][j][1]);
                mma_bf16(c[j], ar[u][2], br[u][2], ar[u][3], br[u][3], wr[u][j][2], wr[u][j][3]);
            }
        }
    };
    uint32_t wr[UNROLL][NT][4];
    long ch0 = c_lo + warp;
    if (enter) {
        if (PRE) load_w(wr, ch0);
        pdl_enter();
        if (PRE) {
            if (ch0 < c_hi) consume(wr, ch0);
            ch0 += step;
        }
    }
    for (; ch0 < c_hi; ch0 += step) {
        load_w(wr, ch0);
        consume(wr, ch0);
    }
}

// The warps' tiles into `part` (one [16][8 * NT] tile per warp, summed later in warp order).
template <int NT, int W>
__device__ __forceinline__ void gemm_park(const float (&c)[NT][4], float (&part)[W][16][8 * NT]) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        part[warp][g][8 * j + 2 * t] = c[j][0];
        part[warp][g][8 * j + 2 * t + 1] = c[j][1];
        part[warp][g + 8][8 * j + 2 * t] = c[j][2];
        part[warp][g + 8][8 * j + 2 * t + 1] = c[j][3];
    }
}

// One output's sum over the warps' tiles, in warp order.
template <int NT, int W>
__device__ __forceinline__ float gemm_warps_sum(const float (&part)[W][16][8 * NT], int row, int col) {
    float s = 0.f;
    for (int v = 0; v < W; ++v) s += part[v][row][col];
    return s;
}

// Writes one tile's outputs from its f32 sums, `sum(row, col)` with col inside the tile:
// rounded to bf16, or with GLU each (gate, up) pair rounded to bf16 and `silu_mul` of them.
template <int NT, bool GLU, typename Sum>
__device__ __forceinline__ void gemm_store(__nv_bfloat16* __restrict__ y, int m, int n, long n0,
                                           Sum sum) {
    if (GLU) {
        for (int e = threadIdx.x; e < 16 * 4 * NT; e += blockDim.x) {
            const int row = e / (4 * NT), p = e % (4 * NT);
            if (row < m && n0 + 2 * p + 1 < n)
                y[(long)row * (n / 2) + n0 / 2 + p] =
                    silu_mul(__float2bfloat16(sum(row, 2 * p)), __float2bfloat16(sum(row, 2 * p + 1)));
        }
    } else {
        for (int e = threadIdx.x; e < 16 * 8 * NT; e += blockDim.x) {
            const int row = e / (8 * NT), col = e % (8 * NT);
            if (row < m && n0 + col < n) y[(long)row * n + n0 + col] = __float2bfloat16(sum(row, col));
        }
    }
}

template <int NT, int W, int U, bool GLU, bool PRE>
__device__ void gemm_rows(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                          __nv_bfloat16* __restrict__ y, int m, int n, int k, int ldx, int vec,
                          int splits, float* __restrict__ partial, unsigned* __restrict__ counters) {
    __shared__ float part[W][16][8 * NT];
    __shared__ bool last;
    const long n0 = (long)blockIdx.x * 8 * NT;
    const long chunks = (k + 31) / 32;
    const long c_lo = chunks * blockIdx.y / splits, c_hi = chunks * (blockIdx.y + 1) / splits;
    float c[NT][4];
    gemm_accumulate<NT, W, U, PRE>(x, w, m, n, k, ldx, vec, n0, c_lo, c_hi, true, c);
    gemm_park<NT, W>(c, part);
    __syncthreads();
    auto warps_sum = [&](int row, int col) { return gemm_warps_sum<NT, W>(part, row, col); };
    if (splits == 1) {
        gemm_store<NT, GLU>(y, m, n, n0, warps_sum);
        return;
    }
    for (int e = threadIdx.x; e < 16 * 8 * NT; e += blockDim.x) {
        const int row = e / (8 * NT), col = e % (8 * NT);
        if (row < m && n0 + col < n)
            partial[((long)blockIdx.y * m + row) * n + n0 + col] = warps_sum(row, col);
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(&counters[blockIdx.x], 1u) == (unsigned)splits - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    gemm_store<NT, GLU>(y, m, n, n0, [&](int row, int col) {
        float s = 0.f;
        for (int r = 0; r < splits; ++r) s += __ldcg(&partial[((long)r * m + row) * n + n0 + col]);
        return s;
    });
    if (threadIdx.x == 0) counters[blockIdx.x] = 0u;
}

#define GEMM_ROWS_AS(NAME, NT, W, U, GLU, PRE)                                                \
    extern "C" __global__ void __launch_bounds__(W * 32)                                      \
        NAME(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,       \
             __nv_bfloat16* __restrict__ y, int m, int n, int k, int ldx, int vec,           \
             int splits, float* partial, unsigned* counters) {                               \
        gemm_rows<NT, W, U, GLU, PRE>(x, w, y, m, n, k, ldx, vec, splits, partial, counters); \
    }
#define GEMM_ROWS(NT, W, U)                                                                   \
    GEMM_ROWS_AS(gemm_rows_bf16_nt##NT##_w##W, NT, W, U, false, true)                         \
    GEMM_ROWS_AS(gemm_rows_glu_bf16_nt##NT##_w##W, NT, W, U, true, true)                      \
    GEMM_ROWS_AS(gemm_rows_nopre_bf16_nt##NT##_w##W, NT, W, U, false, false)                  \
    GEMM_ROWS_AS(gemm_rows_nopre_glu_bf16_nt##NT##_w##W, NT, W, U, true, false)
GEMM_ROWS(1, 8, 4)
GEMM_ROWS(2, 8, 4)
GEMM_ROWS(4, 8, 4)
GEMM_ROWS(1, 4, 4)
GEMM_ROWS(2, 4, 4)
GEMM_ROWS(4, 4, 4)

// Few-row GEMM on CUDA cores (f32). A warp owns one output column; lane l takes k = l, l + 32,
// ...; each row's partial sums meet in a fixed butterfly.
extern "C" __global__ void gemm_rows_f32(const float* __restrict__ x, const float* __restrict__ w,
                                         float* __restrict__ y, int m, int n, int k, int ldx) {
    pdl_enter();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const long col = (long)blockIdx.x * 8 + warp;
    if (col >= n) return;
    const float* wrow = w + col * (long)k;
    float acc[ROWS_MAX];
#pragma unroll
    for (int r = 0; r < ROWS_MAX; ++r) acc[r] = 0.f;
    for (long i = lane; i < k; i += 32) {
        const float wv = wrow[i];
#pragma unroll
        for (int r = 0; r < ROWS_MAX; ++r)
            if (r < m) acc[r] = fmaf(x[(long)r * ldx + i], wv, acc[r]);
    }
#pragma unroll
    for (int r = 0; r < ROWS_MAX; ++r) {
        if (r >= m) break;
        float s = acc[r];
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) y[(long)r * n + col] = s;
    }
}
