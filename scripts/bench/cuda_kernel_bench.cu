// Micro-benchmark and self-check of dspark's CUDA kernels (crates/dspark-engine/src/backend/
// cuda/kernels.cu, included as is) at Qwen3-8B's shapes, for tuning on the GPU machine without
// a Rust build: built by scripts/bench/cuda-kernel-bench.sh with the toolkit wheels' nvcc
// (static cudart), run there with no arguments. Prints JSON lines:
//   - read bandwidth of a streaming kernel and cudaMemcpy's copy rate (the references);
//   - the few-row GEMM per projection shape and configuration (columns per block, warps,
//     K split), over 36 layers' distinct weights, m = 1 and 16: time and GB/s;
//   - attention (one row per block vs the tensor-core GQA tile) at 1024 / 8192 keys, 1 and 16
//     query rows, and whether a 16-row verify equals 16 decode steps bit for bit;
//   - the GEMM configurations' batch invariance (m = 16 rows == 16 calls of one row);
//   - the row kernels (fused add + RMSNorm, per-head norm + rope) per call.
#include "../../crates/dspark-engine/src/backend/cuda/kernels.cu"
#include "cuda_bench_util.cuh"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

__global__ void read_sum(const uint4* p, long n, unsigned* out) {
    unsigned acc = 0;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        const uint4 v = __ldcs(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678u) out[0] = acc;
}

static void rnd(bf* p, long n, unsigned seed, float scale = 1.f) {
    fill_rand<<<1024, 256>>>(p, n, seed, scale);
    CK(cudaGetLastError());
}

struct Timer {
    cudaEvent_t a, b;
    Timer() { cudaEventCreate(&a); cudaEventCreate(&b); }
    void start() { cudaEventRecord(a); }
    float stop_ms() { cudaEventRecord(b); cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms, a, b); return ms; }
};

typedef void (*GemmFn)(const bf*, const bf*, bf*, int, int, int, int, int, int, float*, unsigned*);
struct GemmCfg { const char* name; GemmFn f; int nt, w; };
static GemmCfg CFGS[] = {
    {"nt1_w8", gemm_rows_bf16_nt1_w8, 1, 8}, {"nt2_w8", gemm_rows_bf16_nt2_w8, 2, 8},
    {"nt4_w8", gemm_rows_bf16_nt4_w8, 4, 8}, {"nt1_w4", gemm_rows_bf16_nt1_w4, 1, 4},
    {"nt2_w4", gemm_rows_bf16_nt2_w4, 2, 4}, {"nt4_w4", gemm_rows_bf16_nt4_w4, 4, 4},
};

static float* g_partial;
static unsigned* g_counters;

static void gemm(const GemmCfg& c, const bf* x, const bf* w, bf* y, int m, int n, int k, int splits) {
    dim3 grid((n + 8 * c.nt - 1) / (8 * c.nt), splits);
    c.f<<<grid, c.w * 32>>>(x, w, y, m, n, k, k, 1, splits, g_partial, g_counters);
}

int main() {
    const int L = 36;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("{\"device\": \"%s\", \"sms\": %d, \"l2_mb\": %.1f}\n", prop.name, prop.multiProcessorCount,
           prop.l2CacheSize / 1048576.0);
    Timer tm;
    // references: streaming read and copy over 4 GiB
    {
        const long bytes = 4L << 30;
        void *a, *b;
        unsigned* o;
        CK(cudaMalloc(&a, bytes)); CK(cudaMalloc(&b, bytes)); CK(cudaMalloc(&o, 4));
        CK(cudaMemset(a, 1, bytes));
        float best_r = 1e9, best_c = 1e9;
        for (int rep = 0; rep < 5; ++rep) {
            tm.start();
            read_sum<<<prop.multiProcessorCount * 8, 512>>>((const uint4*)a, bytes / 16, o);
            best_r = fminf(best_r, tm.stop_ms());
            tm.start();
            CK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
            best_c = fminf(best_c, tm.stop_ms());
        }
        printf("{\"ref\": \"read\", \"gbs\": %.0f}\n{\"ref\": \"copy (bytes copied / time)\", \"gbs\": %.0f}\n",
               bytes / best_r / 1e6, bytes / best_c / 1e6);
        CK(cudaFree(a)); CK(cudaFree(b)); CK(cudaFree(o));
    }
    CK(cudaMalloc(&g_partial, 8L * 16 * 160000 * 4));
    CK(cudaMalloc(&g_counters, 200000 * 4));
    CK(cudaMemset(g_counters, 0, 200000 * 4));
    // GEMM shapes of one Qwen3-8B layer (fused qkv, o, fused gate/up, down) and the LM head
    struct Shape { const char* name; int n, k, layers; } shapes[] = {
        {"qkv", 6144, 4096, L}, {"o", 4096, 4096, L}, {"gate_up", 24576, 4096, L},
        {"down", 4096, 12288, L}, {"lm_head", 151936, 4096, 1}};
    bf *x, *y;
    CK(cudaMalloc(&x, 16L * 12288 * 2)); CK(cudaMalloc(&y, 16L * 160000 * 2));
    rnd(x, 16L * 12288, 7);
    for (auto& s : shapes) {
        std::vector<bf*> ws(s.layers);
        for (int l = 0; l < s.layers; ++l) {
            CK(cudaMalloc(&ws[l], (long)s.n * s.k * 2));
            rnd(ws[l], (long)s.n * s.k, 100 + l, 0.05f);
        }
        const double bytes = (double)s.n * s.k * 2 * s.layers;
        for (auto& c : CFGS)
            for (int splits : {1, 2, 3, 4}) {
                if (splits > 1 && s.n >= 16384) continue;
                for (int m : {1, 16}) {
                    float best = 1e9;
                    for (int rep = 0; rep < 5; ++rep) {
                        tm.start();
                        for (int l = 0; l < s.layers; ++l) gemm(c, x, ws[l], y, m, s.n, s.k, splits);
                        best = fminf(best, tm.stop_ms());
                    }
                    CK(cudaGetLastError());
                    printf("{\"gemm\": \"%s\", \"cfg\": \"%s\", \"splits\": %d, \"m\": %d, \"us_per_call\": %.2f, \"gbs\": %.0f}\n",
                           s.name, c.name, splits, m, best * 1e3 / s.layers, bytes / best / 1e6);
                }
            }
        // batch invariance and agreement of the configurations on layer 0
        std::vector<unsigned short> ref, one(s.n), full((size_t)16 * s.n);
        for (auto& c : CFGS)
            for (int splits : {1, 2, 4}) {
                gemm(c, x, ws[0], y, 16, s.n, s.k, splits);
                CK(cudaMemcpy(full.data(), y, full.size() * 2, cudaMemcpyDeviceToHost));
                long diff = 0;
                for (int r = 0; r < 16; ++r) {
                    gemm(c, x + (long)r * s.k, ws[0], y, 1, s.n, s.k, splits);
                    CK(cudaMemcpy(one.data(), y, one.size() * 2, cudaMemcpyDeviceToHost));
                    diff += memcmp(one.data(), full.data() + (size_t)r * s.n, one.size() * 2) != 0;
                }
                double maxrel = 0;
                if (ref.empty()) ref = full;
                for (size_t i = 0; i < full.size(); ++i) {
                    unsigned a = (unsigned)ref[i] << 16, b = (unsigned)full[i] << 16;
                    float fa, fb;
                    memcpy(&fa, &a, 4); memcpy(&fb, &b, 4);
                    maxrel = fmax(maxrel, fabs(fa - fb) / (fabs(fa) + 1e-2));
                }
                printf("{\"gemm_check\": \"%s\", \"cfg\": \"%s\", \"splits\": %d, \"rows_differing_from_one_row_calls\": %ld, \"max_rel_vs_first\": %.3g}\n",
                       s.name, c.name, splits, diff, maxrel);
            }
        for (auto p : ws) CK(cudaFree(p));
    }
    // attention: Qwen3-8B heads (32 q, 8 kv, d 128), a cache of 8192 + 16 rows per layer
    const int HQ = 32, HKV = 8, D = 128, MAXL = 8192 + 16;
    std::vector<bf*> ks(L), vs(L);
    for (int l = 0; l < L; ++l) {
        CK(cudaMalloc(&ks[l], (long)HKV * MAXL * D * 2)); CK(cudaMalloc(&vs[l], (long)HKV * MAXL * D * 2));
        rnd(ks[l], (long)HKV * MAXL * D, 500 + l); rnd(vs[l], (long)HKV * MAXL * D, 900 + l);
    }
    bf *q, *o;
    float* scratch;
    CK(cudaMalloc(&q, 16L * HQ * D * 2)); CK(cudaMalloc(&o, 16L * HQ * D * 2));
    CK(cudaMalloc(&scratch, 16L * HQ * 80 * (D + 2) * 4));
    rnd(q, 16L * HQ * D, 77, 4.f);
    auto args = [&](int lq, int lk, int off) {
        AttnArgs a;
        a.step = nullptr;
        a.q_b = (long)lq * HQ * D; a.q_h = D; a.q_r = (long)HQ * D;  // q as [b, l, h, d] viewed [b, h, l, d]
        a.k_b = (long)HKV * MAXL * D; a.k_h = (long)MAXL * D; a.k_r = D;
        a.v_b = a.k_b; a.v_h = a.k_h; a.v_r = a.k_r;
        a.hq = HQ; a.hkv = HKV; a.lq = lq; a.lk = lk; a.d = D; a.kind = 1; a.off = off; a.window = 0;
        a.splits = (lk + SPLIT - 1) / SPLIT; a.vec = 1; a.scale = 0.088388f;
        return a;
    };
    auto run_attn = [&](bool mma, const bf* qq, const bf* k, const bf* v, bf* out, AttnArgs a) {
        if (mma) {
            const int tiles = (a.lq * (HQ / HKV) + 15) / 16;
            attn_mma_bf16_d128<<<dim3(a.splits, HKV, tiles), 128>>>(qq, k, v, scratch, out, a);
        } else {
            attn_split_bf16_l8<<<dim3(a.splits, HQ, a.lq), 128>>>(qq, k, v, scratch, a);
        }
        attn_combine_bf16<<<dim3(HQ, a.lq), 128>>>(scratch, out, a);
    };
    for (int lk0 : {1024, 8192})
        for (int lq : {1, 16})
            for (int mma : {0, 1}) {
                const AttnArgs a = args(lq, lk0 + lq, lk0);
                float best = 1e9;
                for (int rep = 0; rep < 5; ++rep) {
                    tm.start();
                    for (int l = 0; l < L; ++l) run_attn(mma, q, ks[l], vs[l], o, a);
                    best = fminf(best, tm.stop_ms());
                }
                CK(cudaGetLastError());
                const double bytes = 2.0 * HKV * (lk0 + lq) * D * 2 * L;
                printf("{\"attention\": \"%s\", \"keys\": %d, \"rows\": %d, \"us_per_layer\": %.2f, \"kv_gbs\": %.0f}\n",
                       mma ? "mma_gqa" : "split_row", lk0, lq, best * 1e3 / L, bytes / best / 1e6);
            }
    // exactness: verify rows (16 rows at off) == decode steps; mma vs split_row agreement
    for (int lk0 : {100, 1024, 8192}) {
        const int n = 16 * HQ * D;
        std::vector<unsigned short> full(n), one(HQ * D), other(n);
        for (int mma : {0, 1}) {
            run_attn(mma, q, ks[0], vs[0], o, args(16, lk0 + 16, lk0));
            CK(cudaMemcpy(full.data(), o, n * 2, cudaMemcpyDeviceToHost));
            long diff = 0;
            for (int i = 0; i < 16; ++i) {
                run_attn(mma, q + (long)i * HQ * D, ks[0], vs[0], o, args(1, lk0 + i + 1, lk0 + i));
                CK(cudaMemcpy(one.data(), o, HQ * D * 2, cudaMemcpyDeviceToHost));
                diff += memcmp(one.data(), full.data() + (size_t)i * HQ * D, HQ * D * 2) != 0;
            }
            double maxd = 0;
            if (mma) {
                for (int e = 0; e < n; ++e) {
                    unsigned a = (unsigned)full[e] << 16, b = (unsigned)other[e] << 16;
                    float fa, fb;
                    memcpy(&fa, &a, 4); memcpy(&fb, &b, 4);
                    maxd = fmax(maxd, fabs(fa - fb));
                }
            } else {
                other = full;
            }
            printf("{\"attention_check\": \"%s\", \"keys\": %d, \"verify_rows_differing_from_decode\": %ld, \"max_abs_vs_split_row\": %.3g}\n",
                   mma ? "mma_gqa" : "split_row", lk0, diff, maxd);
        }
    }
    // row kernels at decode / verify sizes: the fused residual add + RMSNorm over h = 4096 (8-value
    // vector path vs one value per step), and per-head norm + rope of 32 + 8 heads of 128
    {
        const int Hd = 4096;
        bf *xa, *ra, *wa, *outa;
        CK(cudaMalloc(&xa, 16L * 6144 * 2)); CK(cudaMalloc(&ra, 16L * Hd * 2));
        CK(cudaMalloc(&wa, Hd * 2)); CK(cudaMalloc(&outa, 2 * 16L * Hd * 2));
        rnd(xa, 16L * 6144, 1); rnd(ra, 16L * Hd, 2); rnd(wa, Hd, 3);
        for (int rows : {1, 16})
            for (int vec : {0, 1}) {
                NormRows na = {rows, Hd, 0, rows, Hd, 0, Hd, vec, 1e-6f};
                float best = 1e9;
                for (int rep = 0; rep < 5; ++rep) {
                    tm.start();
                    for (int it = 0; it < 100; ++it)
                        add_rms_norm_bf16<<<rows, 512>>>(xa, ra, wa, outa, outa + (long)rows * Hd, na);
                    best = fminf(best, tm.stop_ms());
                }
                CK(cudaGetLastError());
                printf("{\"add_rms_norm\": %d, \"rows\": %d, \"vec\": %d, \"us_per_call\": %.2f}\n", Hd, rows, vec,
                       best * 10.f);
            }
        bf *cosb, *sinb;
        CK(cudaMalloc(&cosb, 9000L * 64 * 2)); CK(cudaMalloc(&sinb, 9000L * 64 * 2));
        rnd(cosb, 9000L * 64, 4); rnd(sinb, 9000L * 64, 5);
        for (int rows : {1, 16}) {
            RopeArgs ra2 = {(long)rows * 6144, 6144, 128, 32, rows, 128, 1000, 0, 1, 1e-6f};
            float best = 1e9;
            for (int rep = 0; rep < 5; ++rep) {
                tm.start();
                for (int it = 0; it < 100; ++it)
                    norm_rope_bf16<<<rows * 32, 64>>>(xa, wa, cosb, sinb, outa, ra2);
                best = fminf(best, tm.stop_ms());
            }
            CK(cudaGetLastError());
            printf("{\"norm_rope\": \"32 heads x 128\", \"rows\": %d, \"us_per_call\": %.2f}\n", rows, best * 10.f);
        }
    }
    CK(cudaDeviceSynchronize());
    return 0;
}
