// Per-head RMSNorm (optional) and rotary embedding in one pass, reading a strided [b, L, heads,
// d] view (a fused projection's slice) and writing [b, heads, L, d] contiguous.
#pragma once
#include "common.cuh"

// One (batch, position, head) row per block, d / 2 threads: thread i owns the rotary pair
// (i, i + d / 2) (half style) or (2i, 2i + 1) (interleaved). With a norm, the pair's squares
// meet in a fixed butterfly per warp and the warps in order, and the normed values are rounded
// to T (what a norm op would store) before the rotation. cos / sin: [positions, d / 2] in T.
struct RopeArgs {
    long sb, sl, sh;  // element strides of x over batch, position, head (inner stride 1)
    int heads, len, d, start, interleaved, has_norm;
    float eps;
};

// What thread i of a row reads besides the row itself: its pair's norm weights (1 without a
// norm) and the rotation's cos / sin at `pos`. All of it is written only at load, so the kernels
// read it before the PDL wait (`pdl_enter`), off the dependent path.
struct PairConsts {
    float w0, w1, c, s;
};
template <typename T>
__device__ PairConsts pair_consts(const T* __restrict__ w, const T* __restrict__ cos,
                                  const T* __restrict__ sin, int d, int pos, bool interleaved) {
    const int half = d / 2, i = threadIdx.x;
    const int i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + half;
    const long p = (long)pos * half + i;
    return {w ? to_f(w[i0]) : 1.f, w ? to_f(w[i1]) : 1.f, to_f(cos[p]), to_f(sin[p])};
}

// One row xr of d values, normed when `norm` (weights in k) and rotated (k.c, k.s), into o.
template <typename T>
__device__ void norm_rope_row(const T* __restrict__ xr, bool norm, PairConsts k,
                              T* __restrict__ o, int d, bool interleaved, float eps) {
    __shared__ float part[4];
    const int half = d / 2, i = threadIdx.x;
    const int i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + half;
    float x0 = to_f(xr[i0]), x1 = to_f(xr[i1]);
    if (norm) {
        float ss = warp_sum(x0 * x0 + x1 * x1);
        if (i % 32 == 0) part[i / 32] = ss;
        __syncthreads();
        float tot = 0.f;
        for (int j = 0; j < (half + 31) / 32; ++j) tot += part[j];
        const float inv = rsqrtf(tot / (float)d + eps);
        x0 = to_f(from_f<T>(x0 * inv * k.w0));
        x1 = to_f(from_f<T>(x1 * inv * k.w1));
    }
    o[i0] = from_f<T>(x0 * k.c - x1 * k.s);
    o[i1] = from_f<T>(x1 * k.c + x0 * k.s);
}

template <typename T>
__device__ void norm_rope(const T* __restrict__ x, const T* __restrict__ w,
                          const T* __restrict__ cos, const T* __restrict__ sin,
                          T* __restrict__ out, RopeArgs a) {
    const long r = blockIdx.x;
    const int hh = r % a.heads, l = (r / a.heads) % a.len;
    const long bi = r / ((long)a.heads * a.len);
    const T* xr = x + bi * a.sb + l * a.sl + hh * a.sh;
    T* o = out + ((bi * a.heads + hh) * a.len + l) * a.d;
    const PairConsts k =
        pair_consts(a.has_norm ? w : nullptr, cos, sin, a.d, a.start + l, a.interleaved);
    pdl_enter();
    norm_rope_row(xr, a.has_norm, k, o, a.d, a.interleaved, a.eps);
}
extern "C" __global__ void norm_rope_f32(const float* x, const float* w, const float* cos,
                                         const float* sin, float* out, RopeArgs a) {
    norm_rope<float>(x, w, cos, sin, out, a);
}
extern "C" __global__ void norm_rope_bf16(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                          const __nv_bfloat16* cos, const __nv_bfloat16* sin,
                                          __nv_bfloat16* out, RopeArgs a) {
    norm_rope<__nv_bfloat16>(x, w, cos, sin, out, a);
}

// The attention inputs of one forward in one launch: the queries normed and rotated into `q`
// ([hq, L, d]), the keys normed and rotated straight into the key cache and the values copied
// into the value cache ([h, cap, d] each, rows at..at + L). Block r: position r / (hq + 2 hkv),
// then head r % (hq + 2 hkv) over queries, keys, values. Each row's arithmetic is
// `norm_rope_row`'s, so the bits are those of the separate norm_rope and cache writes.
// `step`, when set, points at the step's first position on the device (a replayed graph's
// input): it replaces `start` and `at` (a cache whose row 0 is position 0).
struct QkvStoreArgs {
    const int* step;
    long sq, sk, sv;  // position strides of the [L, heads, d] sources (head stride d, inner 1)
    int hq, hkv, len, d, start, interleaved, cap, at;
    float eps;
};

template <typename T>
__device__ void qkv_rope_store(const T* __restrict__ yq, const T* __restrict__ yk,
                               const T* __restrict__ yv, const T* __restrict__ qw,
                               const T* __restrict__ kw, const T* __restrict__ cos,
                               const T* __restrict__ sin, T* __restrict__ q, T* __restrict__ kc,
                               T* __restrict__ vc, QkvStoreArgs a) {
    if (a.step != nullptr) a.start = a.at = *a.step;  // written before the graph; no kernel writes it
    const int per = a.hq + 2 * a.hkv;
    const int l = blockIdx.x / per, j = blockIdx.x % per;
    PairConsts k = {};
    if (j < a.hq + a.hkv)
        k = pair_consts(j < a.hq ? qw : kw, cos, sin, a.d, a.start + l, a.interleaved);
    pdl_enter();
    if (j < a.hq) {
        norm_rope_row(yq + l * a.sq + (long)j * a.d, qw != nullptr, k,
                      q + ((long)j * a.len + l) * a.d, a.d, a.interleaved, a.eps);
    } else if (j < a.hq + a.hkv) {
        const int h = j - a.hq;
        norm_rope_row(yk + l * a.sk + (long)h * a.d, kw != nullptr, k,
                      kc + ((long)h * a.cap + a.at + l) * a.d, a.d, a.interleaved, a.eps);
    } else {
        const int h = j - a.hq - a.hkv;
        const T* s = yv + l * a.sv + (long)h * a.d;
        T* o = vc + ((long)h * a.cap + a.at + l) * a.d;
        for (int e = threadIdx.x; e < a.d; e += blockDim.x) o[e] = s[e];
    }
}
extern "C" __global__ void qkv_rope_store_f32(const float* yq, const float* yk, const float* yv,
                                              const float* qw, const float* kw, const float* cos,
                                              const float* sin, float* q, float* kc, float* vc,
                                              QkvStoreArgs a) {
    qkv_rope_store<float>(yq, yk, yv, qw, kw, cos, sin, q, kc, vc, a);
}
extern "C" __global__ void qkv_rope_store_bf16(const __nv_bfloat16* yq, const __nv_bfloat16* yk,
                                               const __nv_bfloat16* yv, const __nv_bfloat16* qw,
                                               const __nv_bfloat16* kw, const __nv_bfloat16* cos,
                                               const __nv_bfloat16* sin, __nv_bfloat16* q,
                                               __nv_bfloat16* kc, __nv_bfloat16* vc,
                                               QkvStoreArgs a) {
    qkv_rope_store<__nv_bfloat16>(yq, yk, yv, qw, kw, cos, sin, q, kc, vc, a);
}
