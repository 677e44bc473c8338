// Grouped-query attention on bf16 tensor cores over the KV cache in place (head size 64 or 128).
#pragma once
#include <cooperative_groups.h>

#include "attention.cuh"

// A block computes one 128-key split (attn_split's grid) for one kv head and a tile of 16 query
// rows, where the tile stacks the (query row i, head hg of the group) pairs r = i * G + hg: all
// query heads and verify rows that read a kv head share each K/V load. Its 4 warps take 32 keys
// each (NH below): scores S = Q K^T by MMA (f32 accumulate), scaled and masked per row;
// p = exp(s - max) rounded to bf16 (the row sum adds the rounded values); O = P V by MMA with
// the warp's V rows staged in shared memory. The warps merge in warp order and write the
// split's (max, sum, acc) in attn_split's scratch layout, so attn_combine merges the splits.
// A row's numbers depend only on its own query, the keys it sees and the split grid: invisible
// keys enter as p = 0 and keys past lk as zero vectors, and MMA rows never mix, so a verify row
// is the decode step's bits.
// Q, K and V rows must be 16-byte aligned (the host checks).
// PRE: the K and V rows below the first query's cache row (`off`) are loaded before the PDL
// wait, V by cp.async into the stage and K into registers (all of a warp's in flight at once),
// then the rest after it: the kernel just before (the attention inputs' cache write) writes
// rows from `off` on, and every kernel before it has completed once that one passed its wait
// (`pdl_enter`). The same values meet the same arithmetic, so the bits are those without PRE.
// The host takes it where it pays (attention.rs `PRE_SPLITS_MAX`).
// NH = 2 (the `_h2` kernels, 8 warps): two warps per 32 keys; both compute the same scores and
// p (the same values), each stages and multiplies its half of V's dims, and the merge reads each
// half's acc: the bits of NH = 1 with half the P V work per warp (the host takes it for decode
// steps, one tile).
// CL: the splits of a (kv head, tile) are one thread-block cluster (cluster dims (splits, 1, 1),
// so the block's cluster rank is its split). Each block keeps its merged (max, sum, acc) in
// shared memory instead of the scratch, and after a cluster barrier the cluster's blocks merge
// the splits through distributed shared memory, each a share of the outputs, with attn_combine's
// arithmetic in attn_combine's order (`combine_add`), so the bits are those of the two launches
// and one launch (and the scratch round trip) fewer. Only for splits <= CLUSTER_MAX.
// 16 bytes global -> shared, through L2 only (cp.async.cg); complete after cp_async_wait_all.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// Blocks per cluster of the CL kernels at most (past the portable 8 the host allows it per
// kernel).
#define CLUSTER_MAX 16

// The cluster's merge of its splits (CL above): rows [0, rows) of the tile, each block's stats
// in cm / cs and its merged acc in co ([16][D]); outputs to o ([b, lq, hq, D]).
template <int D>
__device__ void cluster_combine(const float* cm, const float* cs, const float* co,
                                __nv_bfloat16* __restrict__ o, const AttnArgs& a, int tile,
                                int kvh, int bi, int rows) {
    namespace cg = cooperative_groups;
    cg::cluster_group cl = cg::this_cluster();
    cl.sync();  // every split's stats and acc are in its block's shared memory
    const int n = a.splits, G = a.hq / a.hkv;
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < rows * D; e += n * blockDim.x) {
        const int rl = e / D, dd = e % D, r = tile * 16 + rl;
        float m[CLUSTER_MAX];
        float mm = -INFINITY;
#pragma unroll
        for (int j = 0; j < CLUSTER_MAX; ++j) {
            m[j] = j < n ? cl.map_shared_rank(cm, j)[rl] : -INFINITY;
            mm = fmaxf(mm, m[j]);
        }
        float num = 0.f, den = 0.f;
#pragma unroll
        for (int j = 0; j < CLUSTER_MAX; ++j) {
            if (j >= n || m[j] == -INFINITY) continue;
            const float f = expf(m[j] - mm);
            const float l = cl.map_shared_rank(cs, j)[rl];
            const float v = cl.map_shared_rank(co, j)[rl * D + dd];
            combine_add(den, num, l, v, f);
        }
        o[(((long)bi * a.lq + r / G) * a.hq + kvh * G + r % G) * D + dd] =
            __float2bfloat16(den > 0.f ? num / den : 0.f);
    }
    cl.sync();  // no block leaves while another still reads its shared memory
}

template <int D, bool PRE, bool CL, int NH>
__device__ void attn_mma(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                         const __nv_bfloat16* __restrict__ v, float* __restrict__ scratch,
                         __nv_bfloat16* __restrict__ out, AttnArgs a) {
    constexpr int KC = D / 32;  // 32-dim chunks of the score MMAs
    constexpr int DH = D / NH;  // output dims of a warp (NH: warps per 32 keys, each its dims)
    constexpr int DN = DH / 8;  // 8-dim tiles of the warp's output
    constexpr int VS = DH + 8;  // staged V row stride (bf16): 16 bytes against bank conflicts
    // per warp: V [32][VS] bf16 (its dims) while scoring, then its acc [16][DH + 8] f32
    __shared__ __align__(16) uint32_t stage[ATT_WARPS * NH][16 * VS];
    __shared__ float wm[ATT_WARPS][16], wl[ATT_WARPS][16];
    // CL: this split's merged stats and acc, read by the cluster's blocks
    __shared__ float cm[CL ? 16 : 1], cs[CL ? 16 : 1];
    __shared__ __align__(16) float co[CL ? 16 * D : 1];
    const int G = a.hq / a.hkv, R = a.lq * G, tiles = (R + 15) / 16;
    const int s = blockIdx.x, kvh = blockIdx.y, bi = blockIdx.z / tiles, tile = blockIdx.z % tiles;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    // the warp's 32 keys (kw) and output dims (dh): NH warps score the same keys (the same
    // values), each stages and multiplies its own dims of V
    const int kw = warp % ATT_WARPS, dh = warp / ATT_WARPS;
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
            if (CL) {
                cm[threadIdx.x] = -INFINITY;
                cs[threadIdx.x] = 0.f;
            } else {
                float* d = dst(tile * 16 + threadIdx.x);
                d[0] = -INFINITY;
                d[1] = 0.f;
            }
        }
        if (CL) cluster_combine<D>(cm, cs, co, out, a, tile, kvh, bi, r_end - tile * 16);
        return;
    }
    const int ra = tile * 16 + g, rb = ra + 8;
    int lo_a = 1, hi_a = 0, lo_b = 1, hi_b = 0;  // empty ranges for rows past R
    if (ra < R) visible(a, ra / G, lo_a, hi_a);
    if (rb < R) visible(a, rb / G, lo_b, hi_b);
    const __nv_bfloat16* kbase = k + bi * a.k_b + kvh * a.k_h;
    const __nv_bfloat16* vbase = v + bi * a.v_b + kvh * a.v_h + dh * DH;
    const int w0 = s0 + kw * 32;
    uint32_t* st = stage[warp];
    // PRE: this warp's V rows into the stage (zeros past lk) and its K fragments into registers,
    // the rows below `early` before the wait, then the rest
    const int early = PRE ? max(0, min(a.off, a.lk)) : 0;
    uint32_t kf[PRE ? 4 : 1][KC][4];
    auto load_kv = [&](bool first) {
#pragma unroll
        for (int e = lane; e < 32 * DH / 8; e += 32) {
            const int kr = e / (DH / 8), cc = e % (DH / 8), key = w0 + kr;
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
        for (int e = lane; e < 32 * DH / 8; e += 32) {
            const int kr = e / (DH / 8), cc = e % (DH / 8), key = w0 + kr;
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
    // V fragments by ldmatrix.trans: matrix i of an x4 is keys 16 ks + 8 (i % 2) .. + 8 at dims
    // 8 (dn + i / 2) .. + 8, so registers 0/1 are b0/b1 of tile dn and 2/3 those of dn + 1 (the
    // values the MMA's col-major B layout takes, as 16-bit loads would gather them)
    const unsigned vst = (unsigned)__cvta_generic_to_shared(st);
    float o[DN][4];
#pragma unroll
    for (int dn = 0; dn < DN; ++dn) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.f;
#pragma unroll
    for (int dn = 0; dn < DN; dn += 2) {
#pragma unroll
        for (int ks = 0; ks < 2; ++ks) {
            const int mi = lane / 8, key = 16 * ks + 8 * (mi % 2) + lane % 8;
            const int dim = 8 * (dn + mi / 2);
            uint32_t b[4];
            asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                         : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                         : "r"(vst + (unsigned)(key * VS + dim) * 2u));
            mma_bf16(o[dn], pf[ks][0], pf[ks][1], pf[ks][2], pf[ks][3], b[0], b[1]);
            mma_bf16(o[dn + 1], pf[ks][0], pf[ks][1], pf[ks][2], pf[ks][3], b[2], b[3]);
        }
    }
    if (t == 0 && dh == 0) {
        wm[kw][g] = ma;
        wm[kw][g + 8] = mb;
        wl[kw][g] = la;
        wl[kw][g + 8] = lb;
    }
    __syncwarp();  // every lane is done with the staged V before the acc overwrites it
    // the warp's acc [16][AS] (padded rows: fewer bank conflicts on these stores)
    constexpr int AS = DH + 8;
    float* acc = reinterpret_cast<float*>(st);
#pragma unroll
    for (int dn = 0; dn < DN; ++dn) {
        *reinterpret_cast<float2*>(&acc[g * AS + dn * 8 + 2 * t]) = make_float2(o[dn][0], o[dn][1]);
        *reinterpret_cast<float2*>(&acc[(g + 8) * AS + dn * 8 + 2 * t]) =
            make_float2(o[dn][2], o[dn][3]);
    }
    __syncthreads();
    // per row, once: the block's max, each warp's factor and the sum of the warps' sums (warp
    // order); then every (row, dim) adds the warps' acc with those factors, in warp order
    __shared__ float fw[ATT_WARPS][16], bm[16], bl[16];
    if (threadIdx.x < 16) {
        const int rl = threadIdx.x;
        float mm = -INFINITY;
        for (int w = 0; w < ATT_WARPS; ++w) mm = fmaxf(mm, wm[w][rl]);
        float den = 0.f;
        for (int w = 0; w < ATT_WARPS; ++w) {
            const float f = wm[w][rl] == -INFINITY ? 0.f : expf(wm[w][rl] - mm);
            fw[w][rl] = f;
            if (wm[w][rl] != -INFINITY) den = fmaf(wl[w][rl], f, den);
        }
        bm[rl] = mm;
        bl[rl] = den;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < (r_end - tile * 16) * D; e += blockDim.x) {
        const int rl = e / D, dd = e % D, r = tile * 16 + rl;
        const float mm = bm[rl], den = bl[rl];
        const int h = dd / DH, dl = dd % DH;
        float num = 0.f;
#pragma unroll
        for (int w = 0; w < ATT_WARPS; ++w)
            if (wm[w][rl] != -INFINITY)
                num = fmaf(reinterpret_cast<const float*>(stage[w + ATT_WARPS * h])[rl * AS + dl],
                           fw[w][rl], num);
        if (CL) {
            co[rl * D + dd] = num;
            if (dd == 0) {
                cm[rl] = mm;
                cs[rl] = den;
            }
        } else {
            float* d = dst(r);
            d[2 + dd] = num;
            if (dd == 0) {
                d[0] = mm;
                d[1] = den;
            }
        }
    }
    if (CL) cluster_combine<D>(cm, cs, co, out, a, tile, kvh, bi, r_end - tile * 16);
}

// attn_mma_bf16_d*: the kernel; attn_mma_pre_bf16_d*: the same with PRE; *_cl_*: with CL
// (launched as clusters of `splits` blocks, the output written in place of the combine's);
// *_h2_*: 8 warps, two per 32 keys, each multiplying half the dims of V (256 threads).
#define ATTN_MMA_AS(NAME, D, PRE, CL, NH)                                                     \
    extern "C" __global__ void __launch_bounds__(128 * NH)                                    \
        NAME(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,          \
             float* scratch, __nv_bfloat16* o, AttnArgs a) {                                  \
        live_step(a);                                                                         \
        attn_mma<D, PRE, CL, NH>(q, k, v, scratch, o, a);                                     \
    }
#define ATTN_MMA(D)                                                                           \
    ATTN_MMA_AS(attn_mma_bf16_d##D, D, false, false, 1)                                       \
    ATTN_MMA_AS(attn_mma_pre_bf16_d##D, D, true, false, 1)                                    \
    ATTN_MMA_AS(attn_mma_cl_bf16_d##D, D, false, true, 1)                                     \
    ATTN_MMA_AS(attn_mma_pre_cl_bf16_d##D, D, true, true, 1)                                  \
    ATTN_MMA_AS(attn_mma_h2_bf16_d##D, D, false, false, 2)                                    \
    ATTN_MMA_AS(attn_mma_pre_h2_bf16_d##D, D, true, false, 2)                                 \
    ATTN_MMA_AS(attn_mma_cl_h2_bf16_d##D, D, false, true, 2)                                  \
    ATTN_MMA_AS(attn_mma_pre_cl_h2_bf16_d##D, D, true, true, 2)
ATTN_MMA(64)
ATTN_MMA(128)
