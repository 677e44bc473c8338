// Sweep of the few-row GEMM's launch shape at Qwen3-8B's projection shapes, launched as the
// engine launches it (programmatic dependent launch, back to back over 36 layers' distinct
// weights): columns per block (NT), warps (W), loads in flight per lane (U) and the fixed K
// split (weights preloaded before the PDL wait, as the engine's kernels), with a check that U
// leaves the bits alone. Built by scripts/bench/cuda-kernel-bench.sh;
// run on the GPU machine with no arguments; JSON lines.
#include "../../crates/dspark-engine/src/backend/cuda/kernels.cu"
#include "cuda_gemm_balanced.cuh"
#include "cuda_bench_util.cuh"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

template <int NT, int W, int U>
__global__ void __launch_bounds__(W * 32)
    sweep_gemm(const bf* x, const bf* w, bf* y, int m, int n, int k, int ldx, int vec, int splits,
               float* partial, unsigned* counters) {
    gemm_rows<NT, W, U, false, true>(x, w, y, m, n, k, ldx, vec, splits, partial, counters);
}

typedef void (*GemmFn)(const bf*, const bf*, bf*, int, int, int, int, int, int, float*, unsigned*);
struct Cfg { const char* name; GemmFn f; int nt, w, u; };
#define C(NT, W, U) {"nt" #NT "_w" #W "_u" #U, sweep_gemm<NT, W, U>, NT, W, U}
static Cfg CFGS[] = {C(1, 4, 4), C(1, 4, 8), C(1, 4, 16), C(1, 8, 4), C(1, 8, 8), C(1, 8, 16),
                     C(2, 4, 4), C(2, 4, 8), C(2, 4, 16), C(2, 8, 4), C(2, 8, 8), C(2, 8, 16),
                     C(4, 4, 4), C(4, 4, 8), C(4, 4, 16), C(4, 8, 4), C(4, 8, 8), C(4, 8, 16)};

static cudaStream_t g_s;
template <typename... K, typename... A>
static void go(void (*k)(K...), dim3 grid, dim3 block, A... args) {
    launch_on(g_s, true, k, grid, block, args...);
}

static float* g_partial;
static unsigned* g_counters;

// the balanced trial's kernels as cuda_gemm_balanced.cuh instantiates them (U = 4)
typedef void (*BalFn)(const bf*, const bf*, bf*, int, int, int, int, int, float*, unsigned*);
struct Bal { const char* name; BalFn f; int nt, w; };
#define B(NT, W) {"bal_nt" #NT "_w" #W, gemm_bal_bf16_nt##NT##_w##W, NT, W}
static Bal BALS[] = {B(1, 4), B(2, 4), B(4, 4), B(1, 8), B(2, 8), B(4, 8)};
static void bal(const Bal& c, const bf* x, const bf* w, bf* y, int m, int n, int k, int blocks, int ldx) {
    go(c.f, dim3(blocks), dim3(c.w * 32), x, w, y, m, n, k, ldx, 1, g_partial, g_counters);
}

static void gemm(const Cfg& c, const bf* x, const bf* w, bf* y, int m, int n, int k, int splits) {
    dim3 grid((n + 8 * c.nt - 1) / (8 * c.nt), splits);
    go(c.f, grid, dim3(c.w * 32), x, w, y, m, n, k, k, 1, splits, g_partial, g_counters);
}

struct Timer {
    cudaEvent_t a, b;
    Timer() { cudaEventCreate(&a); cudaEventCreate(&b); }
    void start() { cudaEventRecord(a, g_s); }
    float stop_ms() { cudaEventRecord(b, g_s); cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms, a, b); return ms; }
};

static std::vector<unsigned short> host(const bf* p, long n) {
    std::vector<unsigned short> h(n);
    CK(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost));
    return h;
}

static int balanced_sweep();

// Qwen3-8B's projection shapes (36 layers' distinct weights each, the LM head once)
struct Shape { const char* name; int n, k, layers; };
static const Shape shapes[] = {{"qkv", 6144, 4096, 36}, {"o", 4096, 4096, 36}, {"gate_up", 24576, 4096, 36},
                               {"down", 4096, 12288, 36}, {"lm_head", 151936, 4096, 1}};

// The stream, the split GEMMs' partial sums and counters, 16 random rows of x and two outputs.
static void setup(bf*& x, bf*& y, bf*& y2) {
    CK(cudaStreamCreateWithFlags(&g_s, cudaStreamNonBlocking));
    CK(cudaMalloc(&g_partial, 8L * 16 * 160000 * 4));
    CK(cudaMalloc(&g_counters, 200000 * 4));
    CK(cudaMemset(g_counters, 0, 200000 * 4));
    CK(cudaMalloc(&x, 16L * 2 * 12288 * 2));
    CK(cudaMalloc(&y, 16L * 160000 * 2));
    CK(cudaMalloc(&y2, 16L * 160000 * 2));
    fill_rand<<<1024, 256, 0, g_s>>>(x, 16L * 2 * 12288, 7, 4.f);
}

// The shape's distinct random weights, one per layer.
static std::vector<bf*> weights(const Shape& s) {
    std::vector<bf*> ws(s.layers);
    for (int l = 0; l < s.layers; ++l) {
        CK(cudaMalloc(&ws[l], (long)s.n * s.k * 2));
        fill_rand<<<1024, 256, 0, g_s>>>(ws[l], (long)s.n * s.k, 100 + l, 0.05f);
    }
    return ws;
}

int main(int argc, char** argv) {
    if (argc > 1 && !strcmp(argv[1], "balanced")) return balanced_sweep();
    Timer tm;
    bf *x, *y, *y2;
    setup(x, y, y2);
    for (const Shape& s : shapes) {
        std::vector<bf*> ws = weights(s);
        const double bytes = (double)s.n * s.k * 2 * s.layers;
        std::vector<unsigned short> ref;
        for (auto& c : CFGS)
            for (int splits : {1, 2, 4}) {
                if (splits > 1 && s.n >= 16384) continue;
                for (int m : {1, 16}) {
                    float best = 1e9;
                    for (int rep = 0; rep < 7; ++rep) {
                        tm.start();
                        for (int l = 0; l < s.layers; ++l) gemm(c, x, ws[l], y, m, s.n, s.k, splits);
                        best = fminf(best, tm.stop_ms());
                    }
                    CK(cudaGetLastError());
                    printf("{\"gemm\": \"%s\", \"cfg\": \"%s\", \"splits\": %d, \"m\": %d, \"us_per_call\": %.2f, \"gbs\": %.0f}\n",
                           s.name, c.name, splits, m, best * 1e3 / s.layers, bytes / best / 1e6);
                }
                // the loads in flight must not change the bits: compare with U = 4 of the same
                // (NT, W, splits), 16 rows on layer 0
                gemm(c, x, ws[0], y, 16, s.n, s.k, splits);
                CK(cudaStreamSynchronize(g_s));
                auto got = host(y, 16L * s.n);
                for (auto& b : CFGS)
                    if (b.nt == c.nt && b.w == c.w && b.u == 4) {
                        gemm(b, x, ws[0], y2, 16, s.n, s.k, splits);
                        CK(cudaStreamSynchronize(g_s));
                        auto want = host(y2, 16L * s.n);
                        if (got != want)
                            printf("{\"gemm_bits_differ\": \"%s\", \"cfg\": \"%s\", \"splits\": %d}\n", s.name, c.name, splits);
                    }
            }
        for (auto p : ws) CK(cudaFree(p));
    }
    return 0;
}

// `cuda_gemm_sweep balanced`: the balanced grid (gemm_balanced.cuh) at blocks per SM 1..8 for
// each (NT, W), against the engine's current plan (gemm_plan) in the same run; checks that a row
// of a 16-row call has the bits of the same row alone (rows 0 and 13), and how far the sums are
// from the tile-per-block kernel's (only split tiles may differ, by f32 rounding).
static int balanced_sweep() {
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    Timer tm;
    bf *x, *y, *y2;
    setup(x, y, y2);
    printf("{\"sms\": %d}\n", sms);
    for (const Shape& s : shapes) {
        std::vector<bf*> ws = weights(s);
        const double bytes = (double)s.n * s.k * 2 * s.layers;
        auto time = [&](auto&& launch, int m) {
            float best = 1e9;
            for (int rep = 0; rep < 7; ++rep) {
                tm.start();
                for (int l = 0; l < s.layers; ++l) launch(ws[l], m);
                best = fminf(best, tm.stop_ms());
            }
            CK(cudaGetLastError());
            return best;
        };
        // the engine's plan today
        int nt, wp, sp;
        engine_gemm_plan(s.n, s.k, nt, wp, sp);
        const Cfg* plan = nullptr;
        for (auto& c : CFGS) if (c.nt == nt && c.w == wp && c.u == 4) plan = &c;
        for (int m : {1, 16}) {
            float ms = time([&](const bf* wl, int mm) { gemm(*plan, x, wl, y, mm, s.n, s.k, sp); }, m);
            printf("{\"gemm\": \"%s\", \"cfg\": \"plan_%s\", \"splits\": %d, \"m\": %d, \"us_per_call\": %.2f, \"gbs\": %.0f}\n",
                   s.name, plan->name, sp, m, ms * 1e3 / s.layers, bytes / ms / 1e6);
        }
        for (auto& c : BALS)
            for (int per : {1, 2, 3, 4, 6, 8}) {
                const int blocks = per * sms;
                const long units = (long)((s.n + 8 * c.nt - 1) / (8 * c.nt)) * ((s.k + 31) / 32);
                if (blocks > units || (long)blocks * 2 * 16 * 8 * c.nt > 8L * 16 * 160000) continue;
                for (int m : {1, 16}) {
                    float ms = time([&](const bf* wl, int mm) { bal(c, x, wl, y, mm, s.n, s.k, blocks, s.k); }, m);
                    printf("{\"gemm\": \"%s\", \"cfg\": \"%s\", \"per_sm\": %d, \"m\": %d, \"us_per_call\": %.2f, \"gbs\": %.0f}\n",
                           s.name, c.name, per, m, ms * 1e3 / s.layers, bytes / ms / 1e6);
                }
                // batch invariance: rows 0 and 13 of a 16-row call against each row alone
                bal(c, x, ws[0], y, 16, s.n, s.k, blocks, s.k);
                CK(cudaStreamSynchronize(g_s));
                auto all = host(y, 16L * s.n);
                bool same = true;
                for (int r : {0, 13}) {
                    bal(c, x + (long)r * s.k, ws[0], y2, 1, s.n, s.k, blocks, s.k);
                    CK(cudaStreamSynchronize(g_s));
                    auto one = host(y2, s.n);
                    for (int j = 0; j < s.n; ++j) same &= one[j] == all[(long)r * s.n + j];
                }
                // against the tile-per-block kernel of the same (NT, W), no K split
                const Cfg* ref = nullptr;
                for (auto& r : CFGS) if (r.nt == c.nt && r.w == c.w && r.u == 4) ref = &r;
                gemm(*ref, x, ws[0], y2, 16, s.n, s.k, 1);
                CK(cudaStreamSynchronize(g_s));
                auto want = host(y2, 16L * s.n);
                double worst = 0, big = 0;
                long equal = 0;
                for (long i = 0; i < 16L * s.n; ++i) {
                    unsigned a = (unsigned)all[i] << 16, b = (unsigned)want[i] << 16;
                    float fa, fb;
                    memcpy(&fa, &a, 4);
                    memcpy(&fb, &b, 4);
                    worst = fmax(worst, fabs((double)fa - fb));
                    big = fmax(big, fabs((double)fb));
                    equal += all[i] == want[i];
                }
                printf("{\"check\": \"%s\", \"cfg\": \"%s\", \"per_sm\": %d, \"rows_equal_alone\": %s, \"max_abs_diff\": %.3g, \"max_abs\": %.3g, \"equal_frac\": %.4f}\n",
                       s.name, c.name, per, same ? "true" : "false", worst, big, (double)equal / (16.0 * s.n));
            }
        for (auto p : ws) CK(cudaFree(p));
    }
    return 0;
}
