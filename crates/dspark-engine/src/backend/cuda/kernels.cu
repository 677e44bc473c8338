// dspark's own CUDA kernels, compiled to one PTX module by crates/dspark-engine/build.rs; one
// header per kernel family.
//
// Every kernel here is batch-invariant: the value written for one row (one token) depends only
// on that row's inputs, never on how many rows the call carries, so a verify row gives exactly
// the bits of a decode step at the same position. That is what keeps greedy speculation equal
// to greedy decoding on the GPU.
//   - gemm.cuh: y = x W^T for up to 16 rows on bf16 tensor cores (m16n8k16, f32 accumulate),
//     with an optional fixed split of K over blocks; an f32 variant on CUDA cores.
//   - attention.cuh: attention over the KV cache in place, one (row, head) per block, keys in
//     fixed 128-key splits counted from cache row 0, and the combine of the splits.
//   - attention_mma.cuh: the same splits on tensor cores for bf16, every query head and row of
//     a kv head in one tile, so each K/V row is read once per kv head.
//   - rows.cuh: argmax (the host's rule), SwiGLU over strided halves, RMSNorm with the
//     residual add fused in front.
//   - rope.cuh: per-head RMSNorm and rotary embedding in one pass, strided in, [b, h, L, d] out.
//   - cache.cuh: the KV cache write, a strided source straight into the cache rows.
//   - markov.cuh: DSpark's greedy draft chain (Markov bias, add and argmax), a launch per row.
#include "common.cuh"
#include "gemm.cuh"
#include "attention.cuh"
#include "attention_mma.cuh"
#include "rows.cuh"
#include "rope.cuh"
#include "cache.cuh"
#include "markov.cuh"
