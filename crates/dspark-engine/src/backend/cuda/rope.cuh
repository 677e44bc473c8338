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

template <typename T>
__device__ void norm_rope(const T* __restrict__ x, const T* __restrict__ w,
                          const T* __restrict__ cos, const T* __restrict__ sin,
                          T* __restrict__ out, RopeArgs a) {
    __shared__ float part[4];
    const int half = a.d / 2, i = threadIdx.x;
    const long r = blockIdx.x;
    const int hh = r % a.heads, l = (r / a.heads) % a.len;
    const long bi = r / ((long)a.heads * a.len);
    const T* xr = x + bi * a.sb + l * a.sl + hh * a.sh;
    const int i0 = a.interleaved ? 2 * i : i, i1 = a.interleaved ? 2 * i + 1 : i + half;
    float x0 = to_f(xr[i0]), x1 = to_f(xr[i1]);
    if (a.has_norm) {
        float ss = warp_sum(x0 * x0 + x1 * x1);
        if (i % 32 == 0) part[i / 32] = ss;
        __syncthreads();
        float tot = 0.f;
        for (int k = 0; k < (half + 31) / 32; ++k) tot += part[k];
        const float inv = rsqrtf(tot / (float)a.d + a.eps);
        x0 = to_f(from_f<T>(x0 * inv * to_f(w[i0])));
        x1 = to_f(from_f<T>(x1 * inv * to_f(w[i1])));
    }
    const long p = (long)(a.start + l) * half + i;
    const float c = to_f(cos[p]), s = to_f(sin[p]);
    T* o = out + ((bi * a.heads + hh) * a.len + l) * a.d;
    o[i0] = from_f<T>(x0 * c - x1 * s);
    o[i1] = from_f<T>(x1 * c + x0 * s);
}
extern "C" __global__ void norm_rope_f32(const float* x, const float* w, const float* cos,
                                         const float* sin, float* out, RopeArgs a) {
    pdl_enter();
    norm_rope<float>(x, w, cos, sin, out, a);
}
extern "C" __global__ void norm_rope_bf16(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                          const __nv_bfloat16* cos, const __nv_bfloat16* sin,
                                          __nv_bfloat16* out, RopeArgs a) {
    pdl_enter();
    norm_rope<__nv_bfloat16>(x, w, cos, sin, out, a);
}
