// Row-wise kernels: argmax, SwiGLU, and RMSNorm with the residual add fused in front.
#pragma once
#include "common.cuh"

// The argmax rule of sampling.rs `argmax`: the first index of the largest value, NaN never
// chosen, 0 when no value is above -inf. A thread scans its values in index order keeping only
// larger ones (`v > best`, so NaN and -inf never enter); candidates then meet by `argmax_merge`.
#define ARGMAX_NONE 0xffffffffu

// Merges candidate (v, i) into (bv, bi): the larger value, the lower index on a tie.
__device__ __forceinline__ void argmax_merge(float& bv, uint32_t& bi, float v, uint32_t i) {
    if (v > bv || (v == bv && i < bi)) {
        bv = v;
        bi = i;
    }
}

// The block's candidates (bv, bi) merged in tree order into (sv[0], si[0]) (blockDim.x entries
// each, a power of two).
__device__ __forceinline__ void argmax_block(float bv, uint32_t bi, float* sv, uint32_t* si) {
    sv[threadIdx.x] = bv;
    si[threadIdx.x] = bi;
    __syncthreads();
    for (int step = blockDim.x / 2; step > 0; step >>= 1) {
        if (threadIdx.x < step) {
            float v = sv[threadIdx.x];
            uint32_t i = si[threadIdx.x];
            argmax_merge(v, i, sv[threadIdx.x + step], si[threadIdx.x + step]);
            sv[threadIdx.x] = v;
            si[threadIdx.x] = i;
        }
        __syncthreads();
    }
}

// The id a merged candidate index stands for (ARGMAX_NONE: no value above -inf, id 0).
__device__ __forceinline__ uint32_t argmax_id(uint32_t i) { return i == ARGMAX_NONE ? 0u : i; }

// Row argmax by the rule above, one block (256 threads) per row.
template <typename T>
__device__ void argmax_rows(const T* __restrict__ x, uint32_t* __restrict__ out, int n, long ld) {
    __shared__ float sv[256];
    __shared__ uint32_t si[256];
    const T* row = x + (long)blockIdx.x * ld;
    float best = -INFINITY;
    uint32_t idx = ARGMAX_NONE;
    for (int c = threadIdx.x; c < n; c += blockDim.x) {
        const float v = to_f(row[c]);
        if (v > best) { best = v; idx = c; }
    }
    argmax_block(best, idx, sv, si);
    if (threadIdx.x == 0) out[blockIdx.x] = argmax_id(si[0]);
}
extern "C" __global__ void argmax_rows_f32(const float* x, uint32_t* out, int n, long ld) {
    pdl_enter();
    argmax_rows<float>(x, out, n, ld);
}
extern "C" __global__ void argmax_rows_bf16(const __nv_bfloat16* x, uint32_t* out, int n, long ld) {
    pdl_enter();
    argmax_rows<__nv_bfloat16>(x, out, n, ld);
}

// silu(gate) * up, rows of `cols` values at row strides ldg / ldu and element stride es (1, or
// 2 for the gate and up columns of one interleaved GEMM output), out contiguous.
template <typename T>
__device__ void swiglu_rows(const T* g, const T* u, T* o, long rows, int cols, long ldg, long ldu,
                            int es) {
    const long total = rows * cols;
    for (long e = (long)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (long)gridDim.x * blockDim.x) {
        const long r = e / cols, c = e % cols;
        o[e] = silu_mul<T>(g[r * ldg + c * es], u[r * ldu + c * es]);
    }
}
extern "C" __global__ void swiglu_f32(const float* g, const float* u, float* o, long rows,
                                      int cols, long ldg, long ldu, int es) {
    pdl_enter();
    swiglu_rows<float>(g, u, o, rows, cols, ldg, ldu, es);
}
extern "C" __global__ void swiglu_bf16(const __nv_bfloat16* g, const __nv_bfloat16* u,
                                       __nv_bfloat16* o, long rows, int cols, long ldg, long ldu,
                                       int es) {
    pdl_enter();
    swiglu_rows<__nv_bfloat16>(g, u, o, rows, cols, ldg, ldu, es);
}

// ---------------------------------------------------------------------------------------------
// Eight consecutive values as floats, and back (16-byte aligned: one or two vector accesses).
__device__ __forceinline__ void load8f(const float* p, float o[8]) {
    const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
    o[0] = a.x; o[1] = a.y; o[2] = a.z; o[3] = a.w; o[4] = b.x; o[5] = b.y; o[6] = b.z; o[7] = b.w;
}
__device__ __forceinline__ void load8f(const __nv_bfloat16* p, float o[8]) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const __nv_bfloat162 h = *reinterpret_cast<const __nv_bfloat162*>(&w[e]);
        o[2 * e] = __low2float(h);
        o[2 * e + 1] = __high2float(h);
    }
}
__device__ __forceinline__ void store8f(float* p, const float o[8]) {
    *reinterpret_cast<float4*>(p) = make_float4(o[0], o[1], o[2], o[3]);
    *reinterpret_cast<float4*>(p + 4) = make_float4(o[4], o[5], o[6], o[7]);
}
__device__ __forceinline__ void store8f(__nv_bfloat16* p, const float o[8]) {
    *reinterpret_cast<uint4*>(p) =
        make_uint4(pack_bf16(o[0], o[1]), pack_bf16(o[2], o[3]), pack_bf16(o[4], o[5]), pack_bf16(o[6], o[7]));
}
// x rounded to T and back (what storing it in a T tensor keeps).
template <typename T> __device__ __forceinline__ float round_to(float x) { return to_f(from_f<T>(x)); }

// RMSNorm of one row per block. Row `i` of x starts at (i / xin) * xso + (i % xin) * xsi (two
// levels of row strides: a [L, heads, d] view of a fused projection works in place); the same
// for r. With a residual r: sum = x + r rounded to T (what an add op would store) is written out
// (contiguous) and normed. y (contiguous) = v * rsqrt(mean(v^2) + eps) * w.
// vec (h % 8 == 0, rows and w 16-byte aligned, h <= 8 * NORM_CH * blockDim): each thread keeps
// up to NORM_CH chunks of 8 values in registers, all loads issued up front; else one value per
// step, in the same order. Thread t owns the chunks t, t + blockDim, ... of 8 values and adds
// their squares in index order, then a fixed butterfly per warp and the
// warps in order; the host picks the block size from h alone, so a row's bits do not depend on
// how many rows the call has.
#define NORM_CH 4
struct NormRows {
    long xin, xsi, xso, rin, rsi, rso;
    int h, vec;
    float eps;
};

template <typename T>
__device__ void add_rms_norm(const T* __restrict__ x, const T* __restrict__ r,
                             const T* __restrict__ w, T* __restrict__ sum, T* __restrict__ y,
                             NormRows a) {
    __shared__ float part[32];
    const long row = blockIdx.x;
    const int h = a.h;
    const T* xr = x + (row / a.xin) * a.xso + (row % a.xin) * a.xsi;
    const T* rr = r ? r + (row / a.rin) * a.rso + (row % a.rin) * a.rsi : nullptr;
    T* sr = sum ? sum + row * h : nullptr;
    T* yr = y + row * h;
    float acc = 0.f;
    float v[NORM_CH][8];
    // the norm weights are written only at load: read before the PDL wait, off the dependent path
    float wv[NORM_CH][8];
    if (a.vec) {
#pragma unroll
        for (int j = 0; j < NORM_CH; ++j) {
            const int c0 = (j * blockDim.x + threadIdx.x) * 8;
            if (c0 < h) load8f(w + c0, wv[j]);
        }
    }
    pdl_enter();
    if (a.vec) {
#pragma unroll
        for (int j = 0; j < NORM_CH; ++j) {
            const int c0 = (j * blockDim.x + threadIdx.x) * 8;
            if (c0 < h) {
                load8f(xr + c0, v[j]);
                if (rr) {
                    float rv[8];
                    load8f(rr + c0, rv);
#pragma unroll
                    for (int e = 0; e < 8; ++e) v[j][e] = round_to<T>(v[j][e] + rv[e]);
                    store8f(sr + c0, v[j]);
                }
            }
        }
#pragma unroll
        for (int j = 0; j < NORM_CH; ++j)
            if ((j * blockDim.x + threadIdx.x) * 8 < h)
#pragma unroll
                for (int e = 0; e < 8; ++e) acc = fmaf(v[j][e], v[j][e], acc);
    } else {  // the same values in the same order, one at a time
        for (int c0 = threadIdx.x * 8; c0 < h; c0 += blockDim.x * 8)
            for (int c = c0; c < min(c0 + 8, h); ++c) {
                float u = to_f(xr[c]);
                if (rr) {
                    const T s = from_f<T>(u + to_f(rr[c]));
                    sr[c] = s;
                    u = to_f(s);
                }
                acc = fmaf(u, u, acc);
            }
    }
    acc = warp_sum(acc);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = acc;
    __syncthreads();
    float tot = 0.f;
    for (int i = 0; i < (int)blockDim.x / 32; ++i) tot += part[i];
    const float inv = rsqrtf(tot / (float)h + a.eps);
    if (a.vec) {
#pragma unroll
        for (int j = 0; j < NORM_CH; ++j) {
            const int c0 = (j * blockDim.x + threadIdx.x) * 8;
            if (c0 < h) {
                float o[8];
#pragma unroll
                for (int e = 0; e < 8; ++e) o[e] = v[j][e] * inv * wv[j][e];
                store8f(yr + c0, o);
            }
        }
    } else {
        for (int c = threadIdx.x; c < h; c += blockDim.x) {
            const float u = rr ? to_f(sr[c]) : to_f(xr[c]);
            yr[c] = from_f<T>(u * inv * to_f(w[c]));
        }
    }
}
extern "C" __global__ void add_rms_norm_f32(const float* x, const float* r, const float* w,
                                            float* sum, float* y, NormRows a) {
    add_rms_norm<float>(x, r, w, sum, y, a);
}
extern "C" __global__ void add_rms_norm_bf16(const __nv_bfloat16* x, const __nv_bfloat16* r,
                                             const __nv_bfloat16* w, __nv_bfloat16* sum,
                                             __nv_bfloat16* y, NormRows a) {
    add_rms_norm<__nv_bfloat16>(x, r, w, sum, y, a);
}
