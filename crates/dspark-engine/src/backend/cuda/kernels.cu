// dspark's own CUDA kernels (compiled to PTX by crates/dspark-engine/build.rs).
//
// Every kernel here is batch-invariant: the value written for one row (one token) depends only
// on that row's inputs, never on how many rows the call carries, so a verify row gives exactly
// the bits of a decode step at the same position. That is what keeps greedy speculation equal
// to greedy decoding on the GPU.
//   - gemm_rows_bf16_nt*: y = x W^T for up to 16 rows on bf16 tensor cores (m16n8k16, f32
//     accumulate); absent rows are zeros in the MMA, which never mix into a present row.
//   - gemm_rows_f32: the same contract on CUDA cores for f32 (the goldens' dtype).
//   - attn_split_* / attn_combine_*: attention over the KV cache in place, keys in fixed
//     128-key splits counted from cache row 0, so a row's reduction order depends only on the
//     keys it sees.
//   - argmax_rows_*: first index of the largest value per row (NaN never chosen), the host's rule.
//   - swiglu_*: silu(gate) * up over strided rows (a fused gate/up projection's two halves).
#include <cuda_bf16.h>
#include <stdint.h>

#define ROWS_MAX 16
#define WARPS 8
#define SPLIT 128
#define KEYS_PER_WARP 32
#define ATT_WARPS 4
#define HEAD_MAX 256

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) {
    return __float2bfloat16(x);
}

// ---------------------------------------------------------------------------------------------
// Few-row GEMM on bf16 tensor cores. A block owns 8 output columns; its 8 warps split K into
// 32-wide chunks (warp w takes chunks w, w + 8, ...). Thread (g = lane / 4, t = lane % 4) loads
// 8 consecutive k of weight row n0 + g (16 bytes) and the same 8 k of x rows g and g + 8; two
// m16n8k16 MMAs consume them under one fixed permutation of k (the same for A and B, so the
// product is the dot product over a reordered but fixed k sequence). Partial tiles of the 8
// warps are summed in warp order through shared memory.
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

__device__ __forceinline__ void mma_bf16(float c[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// NT n-tiles of 8 columns per block share each x fragment (fewer x reloads from L2 when a
// verify block has 16 rows); NT is chosen from n alone, and a column's arithmetic is the same
// whatever NT is, so results do not depend on it either.
template <int NT>
__device__ void gemm_rows(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                          __nv_bfloat16* __restrict__ y, int m, int n, int k, int ldx, int vec) {
    __shared__ float part[WARPS][16][8 * NT];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const long n0 = (long)blockIdx.x * 8 * NT;
    const __nv_bfloat16* xa = x + (long)g * ldx;
    const __nv_bfloat16* xb = x + (long)(g + 8) * ldx;
    const bool alive = g < m, blive = g + 8 < m;
    float c[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.f;
    const long chunks = (k + 31) / 32;
    // UNROLL chunks' loads are issued before their MMAs (bytes in flight); the MMAs still run
    // in chunk order w, w + 8, w + 16, ...
    constexpr int UNROLL = 4 / NT;
    for (long ch0 = warp; ch0 < chunks; ch0 += (long)WARPS * UNROLL) {
        uint32_t wr[UNROLL][NT][4], ar[UNROLL][4], br[UNROLL][4];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const long ch = ch0 + (long)u * WARPS;
            const bool in = ch < chunks;
            const long k0 = ch * 32 + 8 * t;
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const long col = n0 + 8 * j + g;
                load8_bf16<true>(w + col * (long)k, k0, k, vec, in && col < n, wr[u][j]);
            }
            load8_bf16<false>(xa, k0, k, vec, alive && in, ar[u]);
            load8_bf16<false>(xb, k0, k, vec, blive && in, br[u]);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            if (ch0 + (long)u * WARPS >= chunks) break;
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                mma_bf16(c[j], ar[u][0], br[u][0], ar[u][1], br[u][1], wr[u][j][0], wr[u][j][1]);
                mma_bf16(c[j], ar[u][2], br[u][2], ar[u][3], br[u][3], wr[u][j][2], wr[u][j][3]);
            }
        }
    }
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        part[warp][g][8 * j + 2 * t] = c[j][0];
        part[warp][g][8 * j + 2 * t + 1] = c[j][1];
        part[warp][g + 8][8 * j + 2 * t] = c[j][2];
        part[warp][g + 8][8 * j + 2 * t + 1] = c[j][3];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < 16 * 8 * NT; e += blockDim.x) {
        const int row = e / (8 * NT), col = e % (8 * NT);
        if (row < m && n0 + col < n) {
            float s = 0.f;
            for (int v = 0; v < WARPS; ++v) s += part[v][row][col];
            y[(long)row * n + n0 + col] = __float2bfloat16(s);
        }
    }
}

#define GEMM_ROWS(NT)                                                                         \
    extern "C" __global__ void gemm_rows_bf16_nt##NT(                                         \
        const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,             \
        __nv_bfloat16* __restrict__ y, int m, int n, int k, int ldx, int vec) {               \
        gemm_rows<NT>(x, w, y, m, n, k, ldx, vec);                                            \
    }
GEMM_ROWS(1)
GEMM_ROWS(2)
GEMM_ROWS(4)

// Few-row GEMM on CUDA cores (f32). A warp owns one output column; lane l takes k = l, l + 32,
// ...; each row's partial sums meet in a fixed butterfly.
extern "C" __global__ void gemm_rows_f32(const float* __restrict__ x, const float* __restrict__ w,
                                         float* __restrict__ y, int m, int n, int k, int ldx) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const long col = (long)blockIdx.x * WARPS + warp;
    if (col >= n) return;
    const float* wrow = w + col * (long)k;
    float acc[ROWS_MAX];
#pragma unroll
    for (int r = 0; r < ROWS_MAX; ++r) acc[r] = 0.f;
    for (long i = lane; i < k; i += 32) {
        const float wv = wrow[i];
#pragma unroll
        for (int r = 0; r < ROWS_MAX; ++r)
            if (r < m) acc[r] = fmaf(x[(long)r * ldx + i], wv, acc[r]);
    }
#pragma unroll
    for (int r = 0; r < ROWS_MAX; ++r) {
        if (r >= m) break;
        float s = acc[r];
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) y[(long)r * n + col] = s;
    }
}

// ---------------------------------------------------------------------------------------------
// Attention over the cache in place. Row i of the query block sits at cache row p = off + i and
// sees keys [lo, hi]: causal lo = 0, hi = p; sliding lo = p - window + 1; none: all lk keys.
// Split s covers keys [128 s, 128 s + 128); a block computes one (split, head, row): each of its
// 4 warps scores 32 keys, takes their max and sum of exponentials, and accumulates values key
// by key; the warps then merge in order. The combine kernel merges the splits in order.
struct AttnArgs {
    long q_b, q_h, q_r;  // strides (elements) of q over batch, head, row; inner stride 1
    long k_b, k_h, k_r;
    long v_b, v_h, v_r;
    int hq, hkv, lq, lk, d, kind, off, window, splits, vec;
    float scale;
};

__device__ __forceinline__ void visible(const AttnArgs& a, int i, int& lo, int& hi) {
    if (a.kind == 0) { lo = 0; hi = a.lk - 1; return; }
    const int p = a.off + i;
    hi = min(p, a.lk - 1);
    lo = (a.kind == 2) ? max(0, p - a.window + 1) : 0;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
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

// out[b, i, h, :] (row-major [b, lq, hq, d]) from the splits of (row, head), merged in order.
template <typename T>
__device__ void attn_combine(const float* __restrict__ scratch, T* __restrict__ o, AttnArgs a) {
    const int h = blockIdx.x, bi = blockIdx.y / a.lq, i = blockIdx.y % a.lq;
    const long base = (((long)bi * a.lq + i) * a.hq + h) * a.splits;
    float mm = -INFINITY;
    for (int s = 0; s < a.splits; ++s) mm = fmaxf(mm, scratch[(base + s) * (a.d + 2)]);
    T* orow = o + (((long)bi * a.lq + i) * a.hq + h) * a.d;
    for (int dd = threadIdx.x; dd < a.d; dd += blockDim.x) {
        float num = 0.f, den = 0.f;
        for (int s = 0; s < a.splits; ++s) {
            const float* src = scratch + (base + s) * (a.d + 2);
            if (src[0] == -INFINITY) continue;
            const float f = expf(src[0] - mm);
            den += src[1] * f;
            num += src[2 + dd] * f;
        }
        orow[dd] = from_f<T>(den > 0.f ? num / den : 0.f);
    }
}

#define ATTN_SPLIT(NAME, T, LPK)                                                              \
    extern "C" __global__ void NAME(const T* q, const T* k, const T* v, float* scratch,        \
                                    AttnArgs a) {                                              \
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
    attn_combine<float>(scratch, o, a);
}
extern "C" __global__ void attn_combine_bf16(const float* scratch, __nv_bfloat16* o, AttnArgs a) {
    attn_combine<__nv_bfloat16>(scratch, o, a);
}

// ---------------------------------------------------------------------------------------------
// Row argmax: the first index of the largest value; NaN never chosen; a row of -inf / NaN
// gives 0 (sampling.rs `argmax`).
template <typename T>
__device__ void argmax_rows(const T* __restrict__ x, uint32_t* __restrict__ out, int n, long ld) {
    __shared__ float bv[256];
    __shared__ uint32_t bi[256];
    const T* row = x + (long)blockIdx.x * ld;
    float best = -INFINITY;
    uint32_t idx = 0xffffffffu;
    for (int c = threadIdx.x; c < n; c += blockDim.x) {
        const float v = to_f(row[c]);
        if (v > best) { best = v; idx = c; }
    }
    bv[threadIdx.x] = best;
    bi[threadIdx.x] = idx;
    __syncthreads();
    for (int step = blockDim.x / 2; step > 0; step >>= 1) {
        if (threadIdx.x < step) {
            const float ov = bv[threadIdx.x + step];
            const uint32_t oi = bi[threadIdx.x + step];
            if (ov > bv[threadIdx.x] || (ov == bv[threadIdx.x] && oi < bi[threadIdx.x])) {
                bv[threadIdx.x] = ov;
                bi[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = bi[0] == 0xffffffffu ? 0u : bi[0];
}
extern "C" __global__ void argmax_rows_f32(const float* x, uint32_t* out, int n, long ld) {
    argmax_rows<float>(x, out, n, ld);
}
extern "C" __global__ void argmax_rows_bf16(const __nv_bfloat16* x, uint32_t* out, int n, long ld) {
    argmax_rows<__nv_bfloat16>(x, out, n, ld);
}

// ---------------------------------------------------------------------------------------------
// silu(gate) * up, rows of `cols` values at row strides ldg / ldu, out contiguous.
template <typename T>
__device__ void swiglu_rows(const T* g, const T* u, T* o, long rows, int cols, long ldg, long ldu) {
    const long total = rows * cols;
    for (long e = (long)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (long)gridDim.x * blockDim.x) {
        const long r = e / cols, c = e % cols;
        const float gv = to_f(g[r * ldg + c]);
        const float sv = gv / (1.0f + expf(-gv));
        o[e] = from_f<T>(sv * to_f(u[r * ldu + c]));
    }
}
extern "C" __global__ void swiglu_f32(const float* g, const float* u, float* o, long rows,
                                      int cols, long ldg, long ldu) {
    swiglu_rows<float>(g, u, o, rows, cols, ldg, ldu);
}
extern "C" __global__ void swiglu_bf16(const __nv_bfloat16* g, const __nv_bfloat16* u,
                                       __nv_bfloat16* o, long rows, int cols, long ldg, long ldu) {
    swiglu_rows<__nv_bfloat16>(g, u, o, rows, cols, ldg, ldu);
}
