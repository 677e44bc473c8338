// DSpark's greedy draft chain on the device, one launch per draft row. Row i's Markov bias is
// w2 . w1[prev] (prev: the pending token for row 0, else the id row i - 1 wrote), accumulated
// exactly as the few-row GEMM does it (gemm.cuh, with the (tiles, warps) that gemm_plan gives
// the [vocab, rank] weight, K unsplit), rounded to bf16 as that GEMM stores it, widened and
// added in f32 to the row's logit; the row's id is the argmax of those sums by argmax_rows'
// rule (rows.cuh: the first index of the largest value, NaN never chosen, 0 when nothing is
// above -inf). Each block reduces its column tile; the last block to arrive reduces the tiles and
// writes the id. So the ids are those of the separate ops (gather, GEMM, two casts, add,
// argmax), with one launch a row instead of six.
#pragma once
#include "gemm.cuh"
#include "rows.cuh"

template <int NT, int W, typename L>
__device__ void markov_row(const L* __restrict__ logits, long ld, const __nv_bfloat16* __restrict__ w1,
                           const __nv_bfloat16* __restrict__ w2, uint32_t* __restrict__ ids,
                           float* __restrict__ tile_v, uint32_t* __restrict__ tile_i,
                           unsigned* __restrict__ counter, int row, uint32_t pending, int vocab,
                           int rank, int vec) {
    __shared__ float part[W][16][8 * NT];
    __shared__ float sv[W * 32];
    __shared__ uint32_t si[W * 32];
    __shared__ bool last;
    pdl_enter();  // row i - 1's id is the kernel before's output
    const uint32_t prev = row == 0 ? pending : ids[row - 1];
    const long n0 = (long)blockIdx.x * 8 * NT;
    const long chunks = (rank + 31) / 32;
    float c[NT][4];
    gemm_accumulate<NT, W, 4, false>(w1 + (long)prev * rank, w2, 1, vocab, rank, rank, vec, n0, 0,
                                     chunks, false, c);
    gemm_park<NT, W>(c, part);
    __syncthreads();
    const L* lrow = logits + (long)row * ld;
    float bv = -INFINITY;
    uint32_t bi = ARGMAX_NONE;
    for (int col = threadIdx.x; col < 8 * NT && n0 + col < vocab; col += blockDim.x) {
        const float bias = __bfloat162float(__float2bfloat16(gemm_warps_sum<NT, W>(part, 0, col)));
        const float v = to_f(lrow[n0 + col]) + bias;
        if (v > bv) {
            bv = v;
            bi = (uint32_t)(n0 + col);
        }
    }
    argmax_block(bv, bi, sv, si);
    if (threadIdx.x == 0) {
        tile_v[blockIdx.x] = sv[0];
        tile_i[blockIdx.x] = si[0];
        __threadfence();
        last = atomicAdd(counter, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    bv = -INFINITY;
    bi = ARGMAX_NONE;
    for (int t = threadIdx.x; t < (int)gridDim.x; t += blockDim.x)
        argmax_merge(bv, bi, __ldcg(&tile_v[t]), __ldcg(&tile_i[t]));
    argmax_block(bv, bi, sv, si);
    if (threadIdx.x == 0) {
        ids[row] = argmax_id(si[0]);
        *counter = 0u;
    }
}

#define MARKOV_ROW_AS(SFX, L, NT, W)                                                            \
    extern "C" __global__ void __launch_bounds__(W * 32) markov_row_##SFX##_nt##NT##_w##W(      \
        const L* logits, long ld, const __nv_bfloat16* w1, const __nv_bfloat16* w2,             \
        uint32_t* ids, float* tile_v, uint32_t* tile_i, unsigned* counter, int row,             \
        uint32_t pending, int vocab, int rank, int vec) {                                       \
        markov_row<NT, W>(logits, ld, w1, w2, ids, tile_v, tile_i, counter, row, pending, vocab, \
                          rank, vec);                                                           \
    }
#define MARKOV_ROW(NT, W) MARKOV_ROW_AS(bf16, __nv_bfloat16, NT, W) MARKOV_ROW_AS(f32, float, NT, W)
// the unsplit shapes of gemm_plan (cuda_shapes.rs)
MARKOV_ROW(4, 4)
MARKOV_ROW(2, 8)
MARKOV_ROW(1, 8)
