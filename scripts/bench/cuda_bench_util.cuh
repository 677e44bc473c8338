// Shared by the stand-alone CUDA benches (cuda_kernel_bench.cu, cuda_chain_bench.cu,
// cuda_gemm_sweep.cu): the error check, a deterministic bf16 fill from a seed (hashed index,
// uniform in [-scale/2, scale/2)) and a kernel launch with or without programmatic dependent
// launch, as the engine's launch.rs puts its kernels on the stream.
#pragma once
#include <cuda_bf16.h>

#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                          \
    do {                                                                               \
        cudaError_t e_ = (x);                                                          \
        if (e_ != cudaSuccess) {                                                       \
            fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

typedef __nv_bfloat16 bf;

__global__ void fill_rand(bf* p, long n, unsigned seed, float scale) {
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
        p[i] = __float2bfloat16(((h & 0xffffff) / 16777216.0f - 0.5f) * scale);
    }
}

template <typename... K, typename... A>
static void launch_on(cudaStream_t s, bool pdl, void (*k)(K...), dim3 grid, dim3 block, A... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 1 : 0;
    CK(cudaLaunchKernelEx(&cfg, k, args...));
}
