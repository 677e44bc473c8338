// Shared device helpers of dspark's CUDA kernels (included by kernels.cu).
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

#define ROWS_MAX 16

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) {
    return __float2bfloat16(x);
}

// SwiGLU of one gate and up value as stored (`T`-rounded): silu(g) * u in f32, rounded to `T`.
// The one formula of `swiglu_*` and of the GEMM's fused SwiGLU epilogue, so both give the bits.
template <typename T> __device__ __forceinline__ T silu_mul(T g, T u) {
    const float gv = to_f(g);
    const float sv = gv / (1.0f + expf(-gv));
    return from_f<T>(sv * to_f(u));
}

// Programmatic dependent launch (sm_90). The host launches our kernels with the
// programmatic-serialization attribute (`launch.rs`), so a kernel's blocks may start while the
// kernel before it on the stream is still running. Every kernel therefore calls `pdl_enter`
// before it reads anything an earlier kernel wrote and before it writes anything at all (a
// buffer it writes may be one the earlier kernel still reads: the memory pool reuses freed
// buffers in stream order). Reads of what only the load wrote (GEMM and norm weights, rope
// tables) may come before it: the kernel just before never writes them, and every earlier
// kernel has completed once that one passed its own wait and triggered this launch.
// `griddepcontrol.wait` returns once the earlier grid has completed and its writes are
// visible, so completion stays transitive along the stream. The trigger then lets the next
// kernel's blocks launch as this one's last wave runs. Without the attribute both are no-ops.
__device__ __forceinline__ void pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Eight consecutive bf16 at p[k0..k0 + 8) as four packed registers (zeros past k or when not
// live); one 16-byte load when `vec` (rows 16-byte aligned). STREAM: evict-first (weights).
template <bool STREAM>
__device__ __forceinline__ void load8_bf16(const __nv_bfloat16* p, long k0, long k, bool vec,
                                           bool live, uint32_t r[4]) {
    if (!live) {
        r[0] = r[1] = r[2] = r[3] = 0u;
        return;
    }
    if (vec && k0 + 8 <= k) {
        const uint4* q = reinterpret_cast<const uint4*>(p + k0);
        const uint4 v = STREAM ? __ldcs(q) : *q;
        r[0] = v.x; r[1] = v.y; r[2] = v.z; r[3] = v.w;
        return;
    }
    unsigned short h[8];
    for (int j = 0; j < 8; ++j) {
        __nv_bfloat16 e = k0 + j < k ? p[k0 + j] : __float2bfloat16(0.0f);
        h[j] = *reinterpret_cast<unsigned short*>(&e);
    }
    for (int j = 0; j < 4; ++j) r[j] = (uint32_t)h[2 * j] | ((uint32_t)h[2 * j + 1] << 16);
}

// c += A · B for one m16n8k16 tile (bf16 in, f32 accumulate). a0/a1: rows g / g + 8 at the
// k pair 2t; a2/a3: the same rows at 2t + 8; b0/b1: column g at 2t / 2t + 8 (PTX ISA layout).
__device__ __forceinline__ void mma_bf16(float c[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Two floats as one register of two bf16 (lo in the low half).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
}
