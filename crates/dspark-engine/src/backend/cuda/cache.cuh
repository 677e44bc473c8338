// The KV cache write: rows of a (possibly strided) [b = 1, heads, n, d] source copied into a
// contiguous [1, heads, cap, d] cache at row `at`, in one launch (candle needs a contiguous copy
// of a strided source and then its slice_set: two launches, neither of them PDL).
#pragma once
#include "common.cuh"

// Source row r (head r / n, position r % n) sits at (r / ni) * so + (r % ni) * si: the two
// levels of strides of `row_levels` in mod.rs. One row per block.
struct CacheWriteArgs {
    long ni, si, so;
    int n, cap, at, d;
};

template <typename T>
__device__ void cache_write(const T* __restrict__ src, T* __restrict__ cache, CacheWriteArgs a) {
    const long r = blockIdx.x;
    const long head = r / a.n, i = r % a.n;
    const T* s = src + (r / a.ni) * a.so + (r % a.ni) * a.si;
    T* o = cache + (head * a.cap + a.at + i) * a.d;
    for (int e = threadIdx.x; e < a.d; e += blockDim.x) o[e] = s[e];
}
extern "C" __global__ void cache_write_f32(const float* src, float* cache, CacheWriteArgs a) {
    pdl_enter();
    cache_write<float>(src, cache, a);
}
extern "C" __global__ void cache_write_bf16(const __nv_bfloat16* src, __nv_bfloat16* cache,
                                            CacheWriteArgs a) {
    pdl_enter();
    cache_write<__nv_bfloat16>(src, cache, a);
}
