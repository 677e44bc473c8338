//! Tests of [`super`]: the layout, the arithmetic against an f64 reference over the same bf16
//! inputs, and batch invariance across row counts, column groupings and task splits.

use super::*;
use crate::backend::cpu::qpack::testing::rand_vec;

fn bf(v: f32) -> f64 {
    half::bf16::from_f32(v).to_f64()
}

/// `Σ bf16(x) · bf16(w)` in f64.
fn reference(x: &[f32], m: usize, k: usize, w: &[f32], n: usize) -> Vec<f64> {
    let mut y = vec![0f64; m * n];
    for r in 0..m {
        for j in 0..n {
            y[r * n + j] = (0..k).map(|i| bf(x[r * k + i]) * bf(w[j * k + i])).sum();
        }
    }
    y
}

/// The rows' rounding (vectorized where the CPU has AVX-512) gives `half`'s bits for every
/// value, specials and subnormals included, and zeros past `k`.
#[test]
fn rounded_rows_are_halfs() {
    let mut seed = 5u64;
    let (m, k) = (3usize, 77usize);
    let chunks = k.div_ceil(KC);
    let mut x = rand_vec(m * k, &mut seed);
    let specials = [
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        1e-40,
        -3e-39,
    ];
    for (i, v) in specials.iter().enumerate() {
        x[7 * i + 1] = *v;
    }
    x[100] = f32::from_bits(0x7f80_0001); // a signalling NaN's payload
    x[101] = 1.0 + 1.0 / 256.0; // a tie, to even
    let mut rows = Rows {
        bits: vec![0xffff; 8],
        start: 0,
        stride: 0,
    };
    round_rows(&x, m, k, chunks, &mut rows);
    for r in 0..m {
        let row = &rows.bits[rows.start + r * rows.stride..][..rows.stride];
        for (i, b) in row.iter().enumerate() {
            let want = if i < k {
                half::bf16::from_f32(x[r * k + i]).to_bits()
            } else {
                0
            };
            assert_eq!(*b, want, "row {r} value {i}");
        }
    }
}

#[test]
fn activation_rounding_is_halfs() {
    let mut seed = 1u64;
    let mut vals = rand_vec(10_000, &mut seed);
    vals.extend([
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MAX,
        f32::MIN,
    ]);
    vals.extend([
        1e-40,
        -3e-39,
        1.0 + f32::EPSILON * 128.0,
        1.0 + 1.0 / 256.0,
        1.0 + 3.0 / 256.0,
    ]);
    for v in vals {
        assert_eq!(to_bf16(v), half::bf16::from_f32(v).to_bits(), "{v:e}");
    }
}

#[test]
fn layout_holds_each_weight_rounded_to_bf16() {
    let mut seed = 5;
    let (n, k) = (37, 77);
    let w = rand_vec(n * k, &mut seed);
    let t = Bf16Tiles::from_f32(&w, n, k);
    let wb: Vec<half::bf16> = w.iter().map(|&v| half::bf16::from_f32(v)).collect();
    let tb = Bf16Tiles::from_bf16(&wb, n, k);
    assert!(t.tiles() == tb.tiles(), "from_f32 and from_bf16 differ");
    assert_eq!(
        (t.data.as_ptr() as usize + 2 * t.start) % 64,
        0,
        "tiles not aligned"
    );
    for j in 0..n {
        for i in 0..k {
            assert_eq!(t.get(j, i) as f64, bf(w[j * k + i]), "({j}, {i})");
        }
    }
}

/// Every output within f32 summation error of the f64 sum of the bf16-rounded products, and
/// each row of an m-row call bit-equal to that row alone (so to a decode step), for row
/// counts across the 16-row passes, k with and without a partial chunk, n with partial panels
/// and groups, and matrices large enough to split across the pool's threads.
#[test]
fn tiles_sum_the_bf16_products_and_rows_are_invariant() {
    if !available() {
        eprintln!("skipped: this CPU lacks AMX-BF16 (or the tile state was refused)");
        return;
    }
    let mut seed = 9;
    for &(k, n) in &[
        (576, 1536),
        (77, 33),
        (64, 100),
        (1536, 576),
        (40, 16),
        (96, 4099),
    ] {
        let w = rand_vec(n * k, &mut seed);
        let t = Bf16Tiles::from_f32(&w, n, k);
        for m in [1, 2, 3, 8, 9, 15, 16, 17, 19] {
            let x = rand_vec(m * k, &mut seed);
            let mut y = vec![f32::NAN; m * n];
            gemm(&x, m, &t, &mut y);
            let want = reference(&x, m, k, &w, n);
            // |products| <= 1/4: f32 rounding of k terms stays below k * 2^-24 * k/4
            let bound = 1e-6 + (k * k) as f64 * 2f64.powi(-26);
            for (i, (a, b)) in y.iter().zip(&want).enumerate() {
                assert!(
                    (*a as f64 - b).abs() <= bound,
                    "k{k} n{n} m{m} at {i}: {a} vs {b}"
                );
            }
            for r in 0..m {
                let mut one = vec![f32::NAN; n];
                gemm(&x[r * k..(r + 1) * k], 1, &t, &mut one);
                assert_eq!(
                    one[..],
                    y[r * n..(r + 1) * n],
                    "k{k} n{n}: row {r} of {m} differs from alone"
                );
            }
        }
    }
}

/// A tile's element depends on its own row and column only: a row's bits do not move when the
/// other rows of its pass change, or when its columns fall in another group position.
#[test]
fn neighbours_do_not_change_a_rows_bits() {
    if !available() {
        eprintln!("skipped: this CPU lacks AMX-BF16");
        return;
    }
    let mut seed = 21;
    let (k, n, m) = (200, 80, 12);
    let w = rand_vec(n * k, &mut seed);
    let t = Bf16Tiles::from_f32(&w, n, k);
    let x = rand_vec(m * k, &mut seed);
    let mut y = vec![0f32; m * n];
    gemm(&x, m, &t, &mut y);
    let mut x2 = rand_vec(m * k, &mut seed);
    x2[5 * k..6 * k].copy_from_slice(&x[5 * k..6 * k]);
    let mut y2 = vec![0f32; m * n];
    gemm(&x2, m, &t, &mut y2);
    assert_eq!(y[5 * n..6 * n], y2[5 * n..6 * n]);
    // the last 16 columns alone (a group of one) against their place in a group of four
    let tail = Bf16Tiles::from_f32(&w[64 * k..], 16, k);
    let mut yt = vec![0f32; m * 16];
    gemm(&x, m, &tail, &mut yt);
    for r in 0..m {
        assert_eq!(
            yt[r * 16..(r + 1) * 16],
            y[r * n + 64..(r + 1) * n],
            "row {r}"
        );
    }
}

/// GGUF blocks rebuilt for each call give the bits of their dequantized values held as bf16
/// tiles, for every format with a rebuild, row counts across the 16-row passes and matrices
/// split across the threads; a row's dequantized values are the loader's.
#[test]
fn rebuilt_blocks_give_the_dequantized_tiles_bits() {
    use crate::backend::cpu::bf16_rebuild::QTiles;
    use crate::backend::cpu::qpack::{testing, QFormat, QPacked};

    if !available() {
        eprintln!("skipped: this CPU lacks AMX-BF16");
        return;
    }
    let mut seed = 17u64;
    for fmt in [QFormat::Q8_0, QFormat::Q4_0, QFormat::Q4_1, QFormat::Q4K] {
        for &(k, n) in &[(256, 40), (512, 1037)] {
            let bytes = testing::random_gguf(fmt, n, k, &mut seed);
            let q = QTiles::from_gguf(fmt, &bytes, n, k).unwrap();
            let reference = QPacked::from_gguf(fmt, &bytes, n, k).unwrap();
            let dense: Vec<f32> = (0..n).flat_map(|j| reference.dequantize_row(j)).collect();
            for j in [0, n / 2, n - 1] {
                assert_eq!(
                    q.dequantize_row(j),
                    dense[j * k..(j + 1) * k],
                    "{fmt:?} row {j}"
                );
            }
            let t = Bf16Tiles::from_f32(&dense, n, k);
            for m in [1, 2, 3, 4, 5, 6, 7, 16, 19] {
                let x = rand_vec(m * k, &mut seed);
                let (mut yq, mut yt) = (vec![0f32; m * n], vec![0f32; m * n]);
                gemm(&x, m, &q, &mut yq);
                gemm(&x, m, &t, &mut yt);
                assert_eq!(yq, yt, "{fmt:?} k{k} n{n} m{m}");
                assert!(yq.iter().any(|v| *v != 0.0), "{fmt:?}: all zero");
            }
        }
    }
}

/// Stored tiles taken chunk by chunk through the default [`TileSource::dot_chunk`] (the route
/// the AVX-512 BF16 form gives rebuilt sources' few-row calls) give the bits of the passes over
/// the same tiles, at every row count that route takes and past it. (On a CPU with AMX the
/// tiles multiply both alike, so this checks nothing new there.)
#[test]
fn tiles_dot_chunk_gives_the_passes_bits() {
    struct ByChunk<'a>(&'a Bf16Tiles);
    impl TileSource for ByChunk<'_> {
        const REBUILT: bool = false;
        const FUSED: bool = true;
        fn dims(&self) -> (usize, usize, usize) {
            self.0.dims()
        }
        unsafe fn chunk(&self, p: usize, g: usize, c: usize, buf: *mut u16) -> (*const u16, usize) {
            self.0.chunk(p, g, c, buf)
        }
    }
    if !available() {
        eprintln!("skipped: this CPU lacks AMX-BF16 and AVX-512 BF16");
        return;
    }
    let mut seed = 29u64;
    // 1037 columns: whole groups of 4 panels, then a last 1-3 panels one at a time
    for &(k, n) in &[(64, 16), (256, 40), (576, 1037)] {
        let t = Bf16Tiles::from_f32(&rand_vec(n * k, &mut seed), n, k);
        for m in 1..=8 {
            let x = rand_vec(m * k, &mut seed);
            let (mut yc, mut yt) = (vec![0f32; m * n], vec![0f32; m * n]);
            gemm(&x, m, &ByChunk(&t), &mut yc);
            gemm(&x, m, &t, &mut yt);
            assert_eq!(yc, yt, "k{k} n{n} m{m}");
            assert!(yc.iter().any(|v| *v != 0.0), "all zero");
        }
    }
}

/// One thread, the demo's widest matrix shape: ns per 16-column x 32-weight tile, by rows.
#[test]
#[ignore]
fn bf16_tiles_timing() {
    if !available() {
        return;
    }
    let mut seed = 3;
    for &(k, n) in &[
        (64, 256),
        (576, 256),
        (576, 1536),
        (1536, 576),
        (576, 49152),
    ] {
        let w = rand_vec(n * k, &mut seed);
        let t = Bf16Tiles::from_f32(&w, n, k);
        for m in [1, 4, 8, 16] {
            let x = rand_vec(m * k, &mut seed);
            let mut y = vec![0f32; m * n];
            let reps = if n * k < 1 << 20 { 2000 } else { 20 };
            gemm(&x, m, &t, &mut y);
            let t0 = std::time::Instant::now();
            for _ in 0..reps {
                gemm(&x, m, &t, &mut y);
            }
            let s = t0.elapsed().as_secs_f64() / reps as f64;
            let gbs = (n * k * 2) as f64 / s / 1e9;
            println!(
                "k{k} n{n} m{m}: {:.1} us, {:.2} ns/tile, {gbs:.1} GB/s",
                s * 1e6,
                s * 1e9 / ((n / 16) * k.div_ceil(32)) as f64
            );
        }
    }
}

/// Rebuilt Q4_1 blocks: the rebuild alone and whole calls, ns per tile (one thread for the
/// rebuild, the pool for calls).
#[test]
#[ignore]
fn bf16_rebuild_timing() {
    use crate::backend::cpu::bf16_rebuild::QTiles;
    use crate::backend::cpu::qpack::{testing, QFormat};
    if !available() {
        return;
    }
    let mut seed = 3;
    for &(k, n) in &[
        (576, 576),
        (576, 192),
        (576, 1536),
        (1536, 576),
        (576, 49152),
    ] {
        let bytes = testing::random_gguf(QFormat::Q4_1, n, k, &mut seed);
        let q = QTiles::from_gguf(QFormat::Q4_1, &bytes, n, k).unwrap();
        let tiles = ((n / 16) * (k / 32)) as f64;
        let reps = 20;
        #[repr(C, align(64))]
        struct Buf([u16; 4 * 512]);
        let mut buf = Buf([0; 4 * 512]);
        let t0 = std::time::Instant::now();
        for _ in 0..reps {
            for p in (0..n / 16).step_by(4) {
                for c in 0..k / 32 {
                    // SAFETY: available() checked; panels p..p+4 exist (n is a multiple of 64)
                    unsafe { std::hint::black_box(q.chunk(p, 4, c, buf.0.as_mut_ptr())) };
                }
            }
        }
        let s = t0.elapsed().as_secs_f64() / reps as f64;
        println!("k{k} n{n} rebuild alone: {:.2} ns/tile", s * 1e9 / tiles);
        for m in [1, 8, 16] {
            let x = rand_vec(m * k, &mut seed);
            let mut y = vec![0f32; m * n];
            gemm(&x, m, &q, &mut y);
            let t0 = std::time::Instant::now();
            for _ in 0..reps {
                gemm(&x, m, &q, &mut y);
            }
            let s = t0.elapsed().as_secs_f64() / reps as f64;
            println!(
                "k{k} n{n} m{m}: {:.1} us, {:.2} ns/tile",
                s * 1e6,
                s * 1e9 / tiles
            );
        }
    }
}
