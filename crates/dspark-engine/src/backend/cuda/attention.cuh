// Attention over the KV cache in place, one query row and head per block (f32 and bf16, any
// head size that is a multiple of 16 up to 256), and the combine of its key splits.
#pragma once
#include "common.cuh"

#define SPLIT 128
#define KEYS_PER_WARP 32
#define ATT_WARPS 4
#define HEAD_MAX 256

// Attention over the cache in place. Row i of the query block sits at cache row p = off + i and
// sees keys [lo, hi]: causal lo = 0, hi = p; sliding lo = p - window + 1; none: all lk keys.
// Split s covers keys [128 s, 128 s + 128); a block computes one (split, head, row): each of its
// 4 warps scores 32 keys, takes their max and sum of exponentials, and accumulates values key
// by key; the warps then merge in order. The combine kernel merges the splits in order.
// `step`, when set, points at the step's first position on the device (a replayed graph's
// input, see `live_step`); null: `lk` and `off` are the host's.
struct AttnArgs {
    const int* step;
    long q_b, q_h, q_r;  // strides (elements) of q over batch, head, row; inner stride 1
    long k_b, k_h, k_r;
    long v_b, v_h, v_r;
    int hq, hkv, lq, lk, d, kind, off, window, splits, vec;
    float scale;
};

// A replayed step (`a.step` set; causal or full, no sliding window): the grid and `splits` (the
// scratch stride) cover the cache's capacity, the live keys end at the step's last row. Splits past them
// see no key and write an empty (max -inf) entry, which the combine skips, so the result is the
// bits of a launch sized for the live keys. The position is written before the graph starts and
// no kernel writes it, so it may be read before the PDL wait.
__device__ __forceinline__ void live_step(AttnArgs& a) {
    if (a.step != nullptr) {
        a.off = *a.step;
        a.lk = a.off + a.lq;
    }
}

__device__ __forceinline__ void visible(const AttnArgs& a, int i, int& lo, int& hi) {
    if (a.kind == 0) { lo = 0; hi = a.lk - 1; return; }
    const int p = a.off + i;
    hi = min(p, a.lk - 1);
    lo = (a.kind == 2) ? max(0, p - a.window + 1) : 0;
}

// Sixteen consecutive values of a row as floats (two 16-byte loads for bf16 when aligned).
__device__ __forceinline__ void load16(const float* p, bool vec, float o[16]) {
    if (vec) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const float4 v = *reinterpret_cast<const float4*>(p + 4 * c);
            o[4 * c] = v.x; o[4 * c + 1] = v.y; o[4 * c + 2] = v.z; o[4 * c + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int e = 0; e < 16; ++e) o[e] = p[e];
    }
}
__device__ __forceinline__ void load16(const __nv_bfloat16* p, bool vec, float o[16]) {
    if (vec) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            const uint4 v = *reinterpret_cast<const uint4*>(p + 8 * c);
            const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const __nv_bfloat162 h = *reinterpret_cast<const __nv_bfloat162*>(&w[e]);
                o[8 * c + 2 * e] = __low2float(h);
                o[8 * c + 2 * e + 1] = __high2float(h);
            }
        }
    } else {
#pragma unroll
        for (int e = 0; e < 16; ++e) o[e] = __bfloat162float(p[e]);
    }
}

// One (split, head, row) per block, 4 warps of 32 keys. Scores: LPK = d / 16 lanes share a key
// (16 dims each, summed over the group in a fixed butterfly), 32 / LPK keys per step, so the
// loads of a warp's keys are in flight together. Values: lane l owns dims l, l + 32, ...,
// adding the visible keys in order. scratch per (row, head, split): [m, l, acc[d]] f32.
template <typename T, int LPK>
__device__ void attn_split(const T* __restrict__ q, const T* __restrict__ k,
                           const T* __restrict__ v, float* __restrict__ scratch, AttnArgs a) {
    __shared__ float sc[ATT_WARPS][KEYS_PER_WARP];
    __shared__ float wm[ATT_WARPS], wl[ATT_WARPS];
    __shared__ float wacc[ATT_WARPS][HEAD_MAX];
    constexpr int KPS = 32 / LPK;
    const int s = blockIdx.x, h = blockIdx.y, bi = blockIdx.z / a.lq, i = blockIdx.z % a.lq;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int kvh = h / (a.hq / a.hkv);
    int lo, hi;
    visible(a, i, lo, hi);
    const long out = (((long)bi * a.lq + i) * a.hq + h) * a.splits + s;
    float* dst = scratch + out * (a.d + 2);
    const int s_lo = max(lo, s * SPLIT), s_hi = min(hi, s * SPLIT + SPLIT - 1);
    if (s_lo > s_hi) {
        if (threadIdx.x == 0) { dst[0] = -INFINITY; dst[1] = 0.f; }
        return;
    }
    const T* kbase = k + bi * a.k_b + kvh * a.k_h;
    const T* vbase = v + bi * a.v_b + kvh * a.v_h;
    const int sub = lane % LPK, slot = lane / LPK;
    float qv[16];
    load16(q + bi * a.q_b + h * a.q_h + i * a.q_r + 16 * sub, a.vec != 0, qv);
    const int w0 = s * SPLIT + warp * KEYS_PER_WARP;
    const int j_lo = max(0, s_lo - w0), j_hi = min(KEYS_PER_WARP - 1, s_hi - w0);
#pragma unroll
    for (int j0 = 0; j0 < KEYS_PER_WARP; j0 += KPS) {
        const int j = j0 + slot;
        const bool in = j >= j_lo && j <= j_hi;
        float part = 0.f;
        if (in) {
            float kv[16];
            load16(kbase + (long)(w0 + j) * a.k_r + 16 * sub, a.vec != 0, kv);
#pragma unroll
            for (int e = 0; e < 16; ++e) part = fmaf(qv[e], kv[e], part);
        }
#pragma unroll
        for (int o = LPK / 2; o > 0; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
        if (sub == 0) sc[warp][j] = in ? part * a.scale : -INFINITY;
    }
    __syncwarp();
    const float mine = sc[warp][lane];
    const float m = warp_max(mine);
    constexpr int E = HEAD_MAX / 32;
    float acc[E];
#pragma unroll
    for (int e = 0; e < E; ++e) acc[e] = 0.f;
    float l = 0.f;
    if (m > -INFINITY) {
        l = warp_sum(mine > -INFINITY ? expf(mine - m) : 0.f);
#pragma unroll 4
        for (int j = j_lo; j <= j_hi; ++j) {
            const float p = expf(sc[warp][j] - m);
            const T* vr = vbase + (long)(w0 + j) * a.v_r;
#pragma unroll
            for (int e = 0; e < E; ++e) {
                const int dd = lane + 32 * e;
                if (dd < a.d) acc[e] = fmaf(p, to_f(vr[dd]), acc[e]);
            }
        }
    }
    if (lane == 0) { wm[warp] = m; wl[warp] = l; }
#pragma unroll
    for (int e = 0; e < E; ++e) {
        const int dd = lane + 32 * e;
        if (dd < a.d) wacc[warp][dd] = acc[e];
    }
    __syncthreads();
    float mm = -INFINITY;
    for (int w = 0; w < ATT_WARPS; ++w) mm = fmaxf(mm, wm[w]);
    if (threadIdx.x == 0) {
        float ll = 0.f;
        for (int w = 0; w < ATT_WARPS; ++w)
            if (wm[w] > -INFINITY) ll += wl[w] * expf(wm[w] - mm);
        dst[0] = mm;
        dst[1] = ll;
    }
    for (int dd = threadIdx.x; dd < a.d; dd += blockDim.x) {
        float r = 0.f;
        for (int w = 0; w < ATT_WARPS; ++w)
            if (wm[w] > -INFINITY) r += wacc[w][dd] * expf(wm[w] - mm);
        dst[2 + dd] = r;
    }
}

// out[b, i, h, :] (row-major [b, lq, hq, d]) from the splits of (row, head), merged in split
// order: mm is the splits' largest max; each split with a key adds sum * f to the denominator
// and acc * f to the numerator, f = exp(max - mm). The (max, sum, f) of COMB_CH splits at a time
// go to shared tables, and a thread loads its values of 8 splits before adding them, so the
// loads are in flight together (session 25: a loop that loaded one split at a time gave the
// same bits and was 7% of a 16-row verify step slower at 8192 context). A thread owns dims t and
// t + blockDim (d <= 2 blockDim).
#define COMB_CH 128
// One split's terms of the combine: den += l f, num += v f, each one fused multiply-add (the one
// formula of attn_combine and of the tensor-core attention's cluster merge, so both give the bits).
__device__ __forceinline__ void combine_add(float& den, float& num, float l, float v, float f) {
    den = fmaf(l, f, den);
    num = fmaf(v, f, num);
}

template <typename T>
__device__ void attn_combine(const float* __restrict__ scratch, T* __restrict__ o, AttnArgs a) {
    __shared__ float fm[COMB_CH], fl[COMB_CH], ff[COMB_CH], wmax[32];
    const int h = blockIdx.x, bi = blockIdx.y / a.lq, i = blockIdx.y % a.lq;
    const long base = (((long)bi * a.lq + i) * a.hq + h) * a.splits;
    const long d2 = a.d + 2;
    float mm = -INFINITY;
    for (int sp = threadIdx.x; sp < a.splits; sp += blockDim.x) mm = fmaxf(mm, scratch[(base + sp) * d2]);
    mm = warp_max(mm);
    if (threadIdx.x % 32 == 0) wmax[threadIdx.x / 32] = mm;
    __syncthreads();
    for (int w = 0; w < (int)blockDim.x / 32; ++w) mm = fmaxf(mm, wmax[w]);
    const int dd0 = threadIdx.x, dd1 = threadIdx.x + blockDim.x;
    float num0 = 0.f, num1 = 0.f, den = 0.f;
    for (int c0 = 0; c0 < a.splits; c0 += COMB_CH) {
        const int cn = min(COMB_CH, a.splits - c0);
        __syncthreads();  // the tables of the chunk before are used up
        for (int j = threadIdx.x; j < cn; j += blockDim.x) {
            const float* src = scratch + (base + c0 + j) * d2;
            const float m0 = src[0];
            fm[j] = m0;
            fl[j] = src[1];
            ff[j] = m0 == -INFINITY ? 0.f : expf(m0 - mm);
        }
        __syncthreads();
        for (int j0 = 0; j0 < cn; j0 += 8) {
            float v0[8], v1[8];
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                const float* src = scratch + (base + c0 + j0 + u) * d2 + 2;
                const bool in = j0 + u < cn;
                v0[u] = in && dd0 < a.d ? src[dd0] : 0.f;
                v1[u] = in && dd1 < a.d ? src[dd1] : 0.f;
            }
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                const int j = j0 + u;
                if (j >= cn || fm[j] == -INFINITY) continue;
                combine_add(den, num0, fl[j], v0[u], ff[j]);
                num1 = fmaf(v1[u], ff[j], num1);
            }
        }
    }
    T* orow = o + (((long)bi * a.lq + i) * a.hq + h) * a.d;
    if (dd0 < a.d) orow[dd0] = from_f<T>(den > 0.f ? num0 / den : 0.f);
    if (dd1 < a.d) orow[dd1] = from_f<T>(den > 0.f ? num1 / den : 0.f);
}

#define ATTN_SPLIT(NAME, T, LPK)                                                              \
    extern "C" __global__ void NAME(const T* q, const T* k, const T* v, float* scratch,        \
                                    AttnArgs a) {                                              \
        live_step(a);                                                                          \
        pdl_enter();                                                                           \
        attn_split<T, LPK>(q, k, v, scratch, a);                                               \
    }
ATTN_SPLIT(attn_split_f32_l1, float, 1)
ATTN_SPLIT(attn_split_f32_l2, float, 2)
ATTN_SPLIT(attn_split_f32_l4, float, 4)
ATTN_SPLIT(attn_split_f32_l8, float, 8)
ATTN_SPLIT(attn_split_f32_l16, float, 16)
ATTN_SPLIT(attn_split_bf16_l1, __nv_bfloat16, 1)
ATTN_SPLIT(attn_split_bf16_l2, __nv_bfloat16, 2)
ATTN_SPLIT(attn_split_bf16_l4, __nv_bfloat16, 4)
ATTN_SPLIT(attn_split_bf16_l8, __nv_bfloat16, 8)
ATTN_SPLIT(attn_split_bf16_l16, __nv_bfloat16, 16)
extern "C" __global__ void attn_combine_f32(const float* scratch, float* o, AttnArgs a) {
    live_step(a);
    pdl_enter();
    attn_combine<float>(scratch, o, a);
}
extern "C" __global__ void attn_combine_bf16(const float* scratch, __nv_bfloat16* o, AttnArgs a) {
    live_step(a);
    pdl_enter();
    attn_combine<__nv_bfloat16>(scratch, o, a);
}
