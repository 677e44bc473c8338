// Shared by the stand-alone CUDA benches (cuda_kernel_bench.cu, cuda_chain_bench.cu,
// cuda_gemm_sweep.cu): the error check, a deterministic bf16 fill from a seed (hashed index,
// uniform in [-scale/2, scale/2)), a kernel launch with or without programmatic dependent
// launch, as the engine's launch.rs puts its kernels on the stream, and the engine's GEMM plan.
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

// `cluster_x` > 1: thread-block clusters of that many blocks along x (as launch.rs `cluster`).
template <typename... K, typename... A>
static void launch_on(cudaStream_t s, bool pdl, void (*k)(K...), dim3 grid, dim3 block, A... args) {
    launch_cl(s, pdl, 1, k, grid, block, args...);
}
template <typename... K, typename... A>
static void launch_cl(cudaStream_t s, bool pdl, unsigned cluster_x, void (*k)(K...), dim3 grid, dim3 block,
                      A... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.stream = s;
    cudaLaunchAttribute at[2];
    int n = 0;
    if (pdl) {
        at[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[n].val.programmaticStreamSerializationAllowed = 1;
        ++n;
    }
    if (cluster_x > 1) {
        at[n].id = cudaLaunchAttributeClusterDimension;
        at[n].val.clusterDim.x = cluster_x;
        at[n].val.clusterDim.y = 1;
        at[n].val.clusterDim.z = 1;
        ++n;
    }
    cfg.attrs = at;
    cfg.numAttrs = n;
    CK(cudaLaunchKernelEx(&cfg, k, args...));
}

// The engine's few-row bf16 GEMM plan for an [n, k] weight (backend/cuda_shapes.rs gemm_plan):
// 8-column tiles per block, warps, K ranges.
static void engine_gemm_plan(int n, int k, int& nt, int& warps, int& splits) {
    if (n >= 16384) { nt = 4; warps = 4; splits = 1; }
    else if (n >= 6144) { nt = 2; warps = 8; splits = 1; }
    else if (k >= 2048) { nt = 2; warps = 4; splits = 4; }
    else { nt = 1; warps = 8; splits = 1; }
}

// The kernel `P_nt{NT}_w{W}` of a family instantiated for NT in {1, 2, 4} and W in {4, 8}.
#define PICK_NT_W(P, NT, W)                                                                    \
    ((NT) == 4 ? ((W) == 4 ? P##_nt4_w4 : P##_nt4_w8)                                          \
     : (NT) == 2 ? ((W) == 4 ? P##_nt2_w4 : P##_nt2_w8)                                        \
                 : ((W) == 4 ? P##_nt1_w4 : P##_nt1_w8))
