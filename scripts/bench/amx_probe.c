/* Two probes of the bf16 AMX path (backend/cpu/bf16_tiles.rs, bf16_rebuild.rs) on this CPU,
 * written for wave 2 session 39's question: could a one-row bf16 decode step skip the tiles?
 *
 *  1. bits: do `vdpbf16ps` (AVX512-BF16) sums equal `tdpbf16ps` (AMX) sums over the same bf16
 *     pairs? 48,000 column sums of 576 products, three value ranges (one with subnormals),
 *     against AMX: vdpbf16ps as is (odd element first), with each pair's halves swapped (even
 *     first, AMX's order on paper), and two scalar models (two rounded adds per pair; the pair
 *     summed exactly and added with one rounding).
 *  2. time: a Q4_1 rebuild's vector work for one B tile (16 rows: widen, mask, shift, two
 *     converts, two multiply-adds, one bf16 pack, one store) alone, the AMX part of a one-row
 *     call alone (one B tile load and one `tdpbf16ps` a tile, four C tiles), and both together.
 *
 *   gcc -O2 -mamx-tile -mamx-bf16 -mavx512f -mavx512bw -mavx512bf16 -o /tmp/amx_probe \
 *       scripts/bench/amx_probe.c -lm && /tmp/amx_probe
 * Results on the 2-core Xeon: bench-results/amx-probe-xeon.json. Linux only (asks the kernel
 * for the tile state with arch_prctl).
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    uint8_t palette, start, res[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed)) tilecfg;

static uint64_t seed = 88172645463325252ull;
static uint64_t rnd(void) { seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17; return seed; }
static uint16_t to_bf16(float f) { uint32_t b; memcpy(&b, &f, 4); return (uint16_t)((b + 0x7fff + ((b >> 16) & 1)) >> 16); }
static float from_bf16(uint16_t h) { uint32_t b = (uint32_t)h << 16; float f; memcpy(&f, &b, 4); return f; }
static float flush(float t) { return fabsf(t) < 1.17549435e-38f ? copysignf(0.0f, t) : t; }
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static float value(int range) {
    float m = (float)((int64_t)(rnd() % 2000001) - 1000000) / 1000000.0f;
    if (range == 2 && rnd() % 50 == 0) return ldexpf(m, -130); /* subnormal */
    return ldexpf(m, range == 0 ? (int)(rnd() % 8) - 4 : (int)(rnd() % 60) - 30);
}

#define K 576
static void bits(void) {
    static uint16_t x[K], w[16][K], B[K / 32][16][32] __attribute__((aligned(64)));
    int differ[4] = {0, 0, 0, 0}, total = 0, swapped_vs_seq = 0;
    for (int trial = 0; trial < 3000; trial++) {
        for (int i = 0; i < K; i++) x[i] = to_bf16(value(trial % 3));
        for (int n = 0; n < 16; n++)
            for (int i = 0; i < K; i++) w[n][i] = to_bf16(value(trial % 3));
        for (int c = 0; c < K / 32; c++)
            for (int r = 0; r < 16; r++)
                for (int n = 0; n < 16; n++) {
                    B[c][r][2 * n] = w[n][32 * c + 2 * r];
                    B[c][r][2 * n + 1] = w[n][32 * c + 2 * r + 1];
                }
        float amx[16] __attribute__((aligned(64))), as_is[16], swapped[16];
        _tile_zero(0);
        for (int c = 0; c < K / 32; c++) {
            _tile_loadd(4, &x[32 * c], 64);
            _tile_loadd(5, &B[c][0][0], 64);
            _tile_dpbf16ps(0, 4, 5);
        }
        _tile_stored(0, amx, 64);
        __m512 a = _mm512_setzero_ps(), s = _mm512_setzero_ps();
        for (int c = 0; c < K / 32; c++)
            for (int r = 0; r < 16; r++) {
                __m512i row = _mm512_load_si512(&B[c][r][0]);
                uint32_t p = (uint32_t)x[32 * c + 2 * r] | (uint32_t)x[32 * c + 2 * r + 1] << 16;
                a = _mm512_dpbf16_ps(a, (__m512bh)row, (__m512bh)_mm512_set1_epi32((int)p));
                s = _mm512_dpbf16_ps(s, (__m512bh)_mm512_rol_epi32(row, 16),
                                     (__m512bh)_mm512_set1_epi32((int)(p >> 16 | p << 16)));
            }
        _mm512_storeu_ps(as_is, a);
        _mm512_storeu_ps(swapped, s);
        for (int n = 0; n < 16; n++) {
            float seq = 0, pair = 0;
            for (int i = 0; i < K; i += 2) {
                float p0 = from_bf16(x[i]) * from_bf16(w[n][i]), p1 = from_bf16(x[i + 1]) * from_bf16(w[n][i + 1]);
                seq = flush(flush(seq + p0) + p1);
                pair = flush((float)((double)pair + ((double)p0 + (double)p1)));
            }
            total++;
            differ[0] += memcmp(&amx[n], &as_is[n], 4) != 0;
            differ[1] += memcmp(&amx[n], &swapped[n], 4) != 0;
            differ[2] += memcmp(&amx[n], &seq, 4) != 0;
            differ[3] += memcmp(&amx[n], &pair, 4) != 0;
            swapped_vs_seq += memcmp(&swapped[n], &seq, 4) != 0;
        }
    }
    printf("bits: %d column sums; differ from tdpbf16ps: vdpbf16ps as is %d, pairs swapped %d, "
           "scalar even-first two roundings %d, scalar pair exact one rounding %d; vdpbf16ps "
           "swapped against the scalar even-first model: %d differ\n",
           total, differ[0], differ[1], differ[2], differ[3], swapped_vs_seq);
}

#define TILES 2000000L
static uint8_t codes[1 << 16] __attribute__((aligned(64)));
static uint16_t A[64] __attribute__((aligned(64))), fixed[4][512] __attribute__((aligned(64)));
static uint16_t ring[3][4][512] __attribute__((aligned(64)));

static inline void rebuild(const uint8_t *rec, uint16_t *out) {
    const __m512 dl = _mm512_set1_ps(0.01f), dh = _mm512_set1_ps(0.02f);
    const __m512 ml = _mm512_set1_ps(0.1f), mh = _mm512_set1_ps(0.2f);
    for (int r = 0; r < 16; r++) {
        __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(rec + 16 * r)));
        __m512 fa = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(15))), dl, ml);
        __m512 fb = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4)), dh, mh);
        _mm512_store_si512((__m512i *)(out + 32 * r), (__m512i)_mm512_cvtne2ps_pbh(fb, fa));
    }
}
static inline void multiply(uint16_t b[4][512]) {
    _tile_loadd(4, A, 64);
    _tile_loadd(5, b[0], 64); _tile_dpbf16ps(0, 4, 5);
    _tile_loadd(6, b[1], 64); _tile_dpbf16ps(1, 4, 6);
    _tile_loadd(7, b[2], 64); _tile_dpbf16ps(2, 4, 7);
    _tile_loadd(5, b[3], 64); _tile_dpbf16ps(3, 4, 5);
}
static void timing(void) {
    for (int i = 0; i < (1 << 16); i++) codes[i] = (uint8_t)(i * 37);
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now();
        for (long i = 0; i < TILES / 4; i++)
            for (int g = 0; g < 4; g++) rebuild(codes + ((i * 4 + g) & 255) * 256, ring[i % 3][g]);
        double t1 = now();
        for (long i = 0; i < TILES / 4; i++) multiply(fixed);
        double t2 = now();
        for (long i = 0; i < TILES / 4; i++) {
            for (int g = 0; g < 4; g++) rebuild(codes + ((i * 4 + g) & 255) * 256, ring[i % 3][g]);
            if (i >= 2) multiply(ring[(i - 2) % 3]); /* the tiles rebuilt two steps before */
        }
        double t3 = now();
        printf("time, ns per tile (one thread, one row): rebuild alone %.1f, tile load + tdpbf16ps "
               "alone %.1f, both %.1f\n", (t1 - t0) * 1e9 / TILES, (t2 - t1) * 1e9 / TILES,
               (t3 - t2) * 1e9 / TILES);
    }
}

int main(void) {
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */)) {
        printf("no AMX tile state here\n");
        return 1;
    }
    tilecfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 5; t++) { c.rows[t] = 1; c.colsb[t] = 64; }
    for (int t = 5; t < 8; t++) { c.rows[t] = 16; c.colsb[t] = 64; }
    _tile_loadconfig(&c);
    bits();
    timing();
    float out[16] __attribute__((aligned(64)));
    _tile_stored(0, out, 64);
    _tile_release();
    return out[0] == 12345.0f; /* keeps the multiplies */
}
