// Grouped-query attention on bf16 tensor cores over the KV cache in place (head size 64 or 128).
#pragma once
#include "attention.cuh"

// A block computes one 128-key split (attn_split's grid) for one kv head and a tile of 16 query
// rows, where the tile stacks the (query row i, head hg of the group) pairs r = i * G + hg: all
// query heads and verify rows that read a kv head share each K/V load. Its 4 warps take 32 keys
// each: scores S = Q K^T by MMA (f32 accumulate), scaled and masked per row; p = exp(s - max)
// rounded to bf16 (the row sum adds the rounded values); O = P V by MMA with the warp's V rows
// staged in shared memory. The warps merge in warp order and write the split's (max, sum, acc)
// in attn_split's scratch layout, so attn_combine merges the splits. A row's numbers depend only
// on its own query, the keys it sees and the split grid: invisible keys enter as p = 0 and keys
// past lk as zero vectors, and MMA rows never mix, so a verify row is the decode step's bits.
// Q, K and V rows must be 16-byte aligned (the host checks).
// PRE: the K and V rows below the first query's cache row (`off`) are loaded before the PDL
// wait, V by cp.async into the stage and K into registers (all of a warp's in flight at once),
// then the rest after it: the kernel just before (the attention inputs' cache write) writes
// rows from `off` on, and every kernel before it has completed once that one passed its wait
// (`pdl_enter`). The same values meet the same arithmetic, so the bits are those without PRE.
// The host takes it for short contexts only (attention.rs says where it pays).
// 16 bytes global -> shared, through L2 only (cp.async.cg); complete after cp_async_wait_all.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

template <int D, bool PRE>
__device__ void attn_mma(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                         const __nv_bfloat16* __restrict__ v, float* __restrict__ scratch,
                         AttnArgs a) {
    constexpr int KC = D / 32;  // 32-dim chunks of the score MMAs
    constexpr int DN = D / 8;   // 8-dim tiles of the output
    constexpr int VS = D + 8;   // staged V row stride (bf16): 16 bytes of padding against bank conflicts
    // per warp: V [32][VS] bf16 while scoring, then its acc [16][D] f32 for the merge
    __shared__ __align__(16) uint32_t stage[ATT_WARPS][16 * VS];
    __shared__ float wm[ATT_WARPS][16], wl[ATT_WARPS][16];
    const int G = a.hq / a.hkv, R = a.lq * G, tiles = (R + 15) / 16;
    const int s = blockIdx.x, kvh = blockIdx.y, bi = blockIdx.z / tiles, tile = blockIdx.z % tiles;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int r_end = min(R, tile * 16 + 16);
    auto dst = [&](int r) {
        const long out = (((long)bi * a.lq + r / G) * a.hq + kvh * G + r % G) * a.splits + s;
        return scratch + out * (D + 2);
    };
    if (!PRE) pdl_enter();
    const int s0 = s * SPLIT, s1 = s0 + SPLIT - 1;
    bool any = false;
    for (int r = tile * 16; r < r_end; ++r) {
        int lo, hi;
        visible(a, r / G, lo, hi);
        any = any || max(lo, s0) <= min(hi, s1);
    }
    if (!any) {  // no row of the tile sees a key of this split
        if (PRE) pdl_enter();
        if (threadIdx.x < r_end - tile * 16) {
            float* d = dst(tile * 16 + threadIdx.x);
            d[0] = -INFINITY;
            d[1] = 0.f;
        }
        return;
    }
    const int ra = tile * 16 + g, rb = ra + 8;
    int lo_a = 1, hi_a = 0, lo_b = 1, hi_b = 0;  // empty ranges for rows past R
    if (ra < R) visible(a, ra / G, lo_a, hi_a);
    if (rb < R) visible(a, rb / G, lo_b, hi_b);
    const __nv_bfloat16* kbase = k + bi * a.k_b + kvh * a.k_h;
    const __nv_bfloat16* vbase = v + bi * a.v_b + kvh * a.v_h;
    const int w0 = s0 + warp * 32;
    uint32_t* st = stage[warp];
    // PRE: this warp's V rows into the stage (zeros past lk) and its K fragments into registers,
    // the rows below `early` before the wait, then the rest
    const int early = PRE ? max(0, min(a.off, a.lk)) : 0;
    uint32_t kf[PRE ? 4 : 1][KC][4];
    auto load_kv = [&](bool first) {
#pragma unroll
        for (int e = lane; e < 32 * D / 8; e += 32) {
            const int kr = e / (D / 8), cc = e % (D / 8), key = w0 + kr;
            if ((key < early) != first) continue;
            uint32_t* sp = st + (kr * VS + cc * 8) / 2;
            if (key < a.lk) cp_async16(sp, vbase + (long)key * a.v_r + cc * 8);
            else *reinterpret_cast<uint4*>(sp) = make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
            const int key = w0 + 8 * nt + g;
            if ((key < early) != first) continue;
            const bool live = key < a.lk;
            const __nv_bfloat16* kr = kbase + (long)(live ? key : 0) * a.k_r;
#pragma unroll
            for (int c = 0; c < KC; ++c) load8_bf16<false>(kr, c * 32 + 8 * t, D, true, live, kf[PRE ? nt : 0][c]);
        }
    };
    if constexpr (PRE) {
        load_kv(true);
        pdl_enter();
        load_kv(false);
    }
    auto qrow = [&](int r) {
        return q + bi * a.q_b + (long)(kvh * G + r % G) * a.q_h + (long)(r / G) * a.q_r;
    };
    uint32_t qa[KC][4], qb[KC][4];
#pragma unroll
    for (int c = 0; c < KC; ++c) {
        load8_bf16<false>(ra < R ? qrow(ra) : q, c * 32 + 8 * t, D, true, ra < R, qa[c]);
        load8_bf16<false>(rb < R ? qrow(rb) : q, c * 32 + 8 * t, D, true, rb < R, qb[c]);
    }
    if constexpr (!PRE) {
        // stage this warp's 32 V rows (zeros past lk) while the scores run
#pragma unroll 4
        for (int e = lane; e < 32 * D / 8; e += 32) {
            const int kr = e / (D / 8), cc = e % (D / 8), key = w0 + kr;
            uint4 val = make_uint4(0u, 0u, 0u, 0u);
            if (key < a.lk) val = *reinterpret_cast<const uint4*>(vbase + (long)key * a.v_r + cc * 8);
            *reinterpret_cast<uint4*>(st + (kr * VS + cc * 8) / 2) = val;
        }
    }
    float sc[4][4];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
        sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.f;
        const int key = w0 + 8 * nt + g;
        const bool live = key < a.lk;
        const __nv_bfloat16* kr = kbase + (long)(live ? key : 0) * a.k_r;
#pragma unroll
        for (int c = 0; c < KC; ++c) {
            uint32_t kl[4];
            if (!PRE) load8_bf16<false>(kr, c * 32 + 8 * t, D, true, live, kl);
            const uint32_t* kk = PRE ? kf[PRE ? nt : 0][c] : kl;
            mma_bf16(sc[nt], qa[c][0], qb[c][0], qa[c][1], qb[c][1], kk[0], kk[1]);
            mma_bf16(sc[nt], qa[c][2], qb[c][2], qa[c][3], qb[c][3], kk[2], kk[3]);
        }
    }
    // scale and mask: c0/c1 are row ra at keys 2t, 2t + 1 of the n-tile, c2/c3 row rb
    float ma = -INFINITY, mb = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int j = w0 + 8 * nt + 2 * t + e;
            sc[nt][e] = (j >= lo_a && j <= hi_a) ? sc[nt][e] * a.scale : -INFINITY;
            sc[nt][2 + e] = (j >= lo_b && j <= hi_b) ? sc[nt][2 + e] * a.scale : -INFINITY;
            ma = fmaxf(ma, sc[nt][e]);
            mb = fmaxf(mb, sc[nt][2 + e]);
        }
    ma = fmaxf(ma, __shfl_xor_sync(0xffffffffu, ma, 1));
    ma = fmaxf(ma, __shfl_xor_sync(0xffffffffu, ma, 2));
    mb = fmaxf(mb, __shfl_xor_sync(0xffffffffu, mb, 1));
    mb = fmaxf(mb, __shfl_xor_sync(0xffffffffu, mb, 2));
    // p rounded to bf16, packed as the A fragments of P V (keys 16 ks + kk in natural order)
    float la = 0.f, lb = 0.f;
    uint32_t pf[2][4];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
        float p[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float m = e < 2 ? ma : mb;
            const float x = m == -INFINITY ? 0.f : expf(sc[nt][e] - m);
            p[e] = __bfloat162float(__float2bfloat16(x));
        }
        la += p[0] + p[1];
        lb += p[2] + p[3];
        pf[nt / 2][(nt % 2) * 2] = pack_bf16(p[0], p[1]);
        pf[nt / 2][(nt % 2) * 2 + 1] = pack_bf16(p[2], p[3]);
    }
    la += __shfl_xor_sync(0xffffffffu, la, 1);
    la += __shfl_xor_sync(0xffffffffu, la, 2);
    lb += __shfl_xor_sync(0xffffffffu, lb, 1);
    lb += __shfl_xor_sync(0xffffffffu, lb, 2);
    if (PRE) cp_async_wait_all();
    __syncwarp();
    const unsigned short* vs = reinterpret_cast<const unsigned short*>(st);
    float o[DN][4];
#pragma unroll
    for (int dn = 0; dn < DN; ++dn) {
        o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.f;
        const int dim = dn * 8 + g;
#pragma unroll
        for (int ks = 0; ks < 2; ++ks) {
            const int kb = 16 * ks + 2 * t;
            const uint32_t b0 = (uint32_t)vs[kb * VS + dim] | ((uint32_t)vs[(kb + 1) * VS + dim] << 16);
            const uint32_t b1 =
                (uint32_t)vs[(kb + 8) * VS + dim] | ((uint32_t)vs[(kb + 9) * VS + dim] << 16);
            mma_bf16(o[dn], pf[ks][0], pf[ks][1], pf[ks][2], pf[ks][3], b0, b1);
        }
    }
    if (t == 0) {
        wm[warp][g] = ma;
        wm[warp][g + 8] = mb;
        wl[warp][g] = la;
        wl[warp][g + 8] = lb;
    }
    __syncwarp();  // every lane is done with the staged V before the acc overwrites it
    float* acc = reinterpret_cast<float*>(st);
#pragma unroll
    for (int dn = 0; dn < DN; ++dn) {
        acc[g * D + dn * 8 + 2 * t] = o[dn][0];
        acc[g * D + dn * 8 + 2 * t + 1] = o[dn][1];
        acc[(g + 8) * D + dn * 8 + 2 * t] = o[dn][2];
        acc[(g + 8) * D + dn * 8 + 2 * t + 1] = o[dn][3];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < 16 * D; e += blockDim.x) {
        const int rl = e / D, dd = e % D, r = tile * 16 + rl;
        if (r >= R) continue;
        float mm = -INFINITY;
        for (int w = 0; w < ATT_WARPS; ++w) mm = fmaxf(mm, wm[w][rl]);
        float num = 0.f, den = 0.f;
        for (int w = 0; w < ATT_WARPS; ++w) {
            if (wm[w][rl] == -INFINITY) continue;
            const float f = expf(wm[w][rl] - mm);
            num += reinterpret_cast<const float*>(stage[w])[rl * D + dd] * f;
            den += wl[w][rl] * f;
        }
        float* d = dst(r);
        d[2 + dd] = num;
        if (dd == 0) {
            d[0] = mm;
            d[1] = den;
        }
    }
}

// attn_mma_bf16_d*: the kernel; attn_mma_pre_bf16_d*: the same with PRE.
#define ATTN_MMA(D)                                                                           \
    extern "C" __global__ void __launch_bounds__(128)                                         \
        attn_mma_bf16_d##D(const __nv_bfloat16* q, const __nv_bfloat16* k,                    \
                           const __nv_bfloat16* v, float* scratch, AttnArgs a) {              \
        live_step(a);                                                                         \
        attn_mma<D, false>(q, k, v, scratch, a);                                              \
    }                                                                                         \
    extern "C" __global__ void __launch_bounds__(128)                                         \
        attn_mma_pre_bf16_d##D(const __nv_bfloat16* q, const __nv_bfloat16* k,                \
                               const __nv_bfloat16* v, float* scratch, AttnArgs a) {          \
        live_step(a);                                                                         \
        attn_mma<D, true>(q, k, v, scratch, a);                                               \
    }
ATTN_MMA(64)
ATTN_MMA(128)
