//! bf16 matmul on AMX tiles (`--matmul bf16`): `y[m, n] = x[m, k] · W[n, k]ᵀ` with the weights
//! held as bf16 and each call's activations rounded to bf16 (to nearest, ties to even), the
//! products summed in f32 by `tdpbf16ps`: PyTorch's "medium" float32 matmul precision, and
//! what its bf16 CPU inference runs.
//!
//! Why: an f32 decode step streams the weights once and is bound by memory, but every extra
//! row of a verify block costs the f32 multiply-adds of a whole step again (on the 2-core Xeon
//! an 8-row verify costs 1.4 dense or 2.5 exactly packed decode steps). One tile multiply
//! takes 16 rows x 16 columns x 32 weights, so up to 16 rows read the weights once and cost
//! about what one row does: verify blocks become nearly free, which is what speculation
//! needs, and the weights take half the bytes of f32.
//!
//! Batch invariance: each output `(row, column)` is its own chain of tile multiplies over the
//! k chunks in order, whatever the number of rows in the call, the column grouping or the
//! task split (a tile multiply's element depends on its own row of A and column of B only).
//! So a verify block gives the bits of one-row decode steps, and greedy speculation equals
//! the baseline by construction.
//!
//! Layout ([`Bf16Tiles`]): panels of 16 columns; in panel `p`, chunk `c` of 32 weights is one
//! B tile of 1 KiB (row `r` holds, for each of the 16 columns, the weights `32c + 2r` and
//! `32c + 2r + 1`), chunks in k order, so each panel is one sequential stream. Weights past
//! `k` and columns past `n` are zeros.

use super::Columns;

/// Columns per panel (a tile row's 16 f32 lanes).
pub(super) const PANEL: usize = 16;
/// Weights per chunk: one tile row of 64 bytes.
pub(super) const KC: usize = 32;
/// Rows per tile pass (the A and C tiles' height).
const ROWS: usize = 16;
/// Panels multiplied per pass over the chunks (C tiles held at once).
const GROUP: usize = 4;

/// The element offset from the start of `v` to its first 64-byte boundary (buffers here are
/// allocated 64 bytes long and used from there, so tiles and tile rows never split a line).
pub(super) fn line_start<T>(v: &[T]) -> usize {
    (64 - v.as_ptr() as usize % 64) % 64 / std::mem::size_of::<T>()
}

/// Where weight `i` of column `j` lies in tiles of `chunks` chunks a panel (module docs).
fn tile_at(chunks: usize, j: usize, i: usize) -> usize {
    let (p, col, c, kk) = (j / PANEL, j % PANEL, i / KC, i % KC);
    ((p * chunks + c) * (KC / 2) + kk / 2) * 2 * PANEL + 2 * col + kk % 2
}

/// Whether the bf16 tiles run here: by AMX-BF16 tile multiplies where the CPU has them and
/// Linux granted the tile state ([`amx`]), else by AVX-512 BF16 dot products
/// ([`super::bf16_dot`]).
pub fn available() -> bool {
    amx() || dot()
}

/// Whether the tile multiplies run on AMX.
pub fn amx() -> bool {
    super::amx::granted(super::amx::Unit::Bf16)
}

/// What runs the tile multiplies here, as the load report names it.
pub fn unit() -> &'static str {
    if amx() {
        "AMX tiles"
    } else {
        "tiles by AVX-512 BF16 dot products"
    }
}

/// Whether `vdpbf16ps` runs them (no AMX here, AVX-512 BF16 there); read once.
fn dot() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static DOT: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| {
            std::env::var("DSPARK_BF16_DOT").map_or(true, |v| v != "0")
                && super::bf16_dot::available()
        });
        *DOT
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// A `[n, k]` weight as bf16 B tiles (see the module docs).
pub struct Bf16Tiles {
    pub n: usize,
    pub k: usize,
    chunks: usize,
    /// The tiles, 64-byte aligned from `start`.
    data: Vec<u16>,
    start: usize,
}

impl Bf16Tiles {
    /// Packs `w` (`[n, k]` row-major), rounding each value to bf16 (to nearest, ties to even).
    pub fn from_f32(w: &[f32], n: usize, k: usize) -> Bf16Tiles {
        Self::pack(n, k, |i| half::bf16::from_f32(w[i]).to_bits())
    }

    /// Packs `w` (`[n, k]` row-major bf16) as it is.
    pub fn from_bf16(w: &[half::bf16], n: usize, k: usize) -> Bf16Tiles {
        Self::pack(n, k, |i| w[i].to_bits())
    }

    fn pack(n: usize, k: usize, bits: impl Fn(usize) -> u16) -> Bf16Tiles {
        let (panels, chunks) = (n.div_ceil(PANEL), k.div_ceil(KC));
        let len = panels * chunks * PANEL * KC;
        let mut data = vec![0u16; len + 32];
        let start = line_start(&data);
        let tiles = &mut data[start..start + len];
        for j in 0..n {
            for i in 0..k {
                tiles[tile_at(chunks, j, i)] = bits(j * k + i);
            }
        }
        Bf16Tiles {
            n,
            k,
            chunks,
            data,
            start,
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.data.len() * 2
    }

    /// The tiles themselves, without the alignment slack (tests).
    #[cfg(test)]
    fn tiles(&self) -> &[u16] {
        let len = self.n.div_ceil(PANEL) * self.chunks * PANEL * KC;
        &self.data[self.start..self.start + len]
    }

    /// Weight `(j, i)` as f32.
    fn get(&self, j: usize, i: usize) -> f32 {
        half::bf16::from_bits(self.data[self.start + tile_at(self.chunks, j, i)]).to_f32()
    }

    /// Row `j` (output feature `j`'s `k` weights) as f32.
    pub fn row(&self, j: usize) -> Vec<f32> {
        (0..self.k).map(|i| self.get(j, i)).collect()
    }
}

/// Activations rounded to bf16, rows `stride` values apart (zeros past `k`).
pub(super) struct Rows {
    pub(super) bits: Vec<u16>,
    pub(super) start: usize,
    pub(super) stride: usize,
}

fn round_rows(x: &[f32], m: usize, k: usize, chunks: usize, into: &mut Rows) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512bw") {
        // SAFETY: AVX-512F and BW were detected.
        return unsafe { round_rows_avx512(x, m, k, chunks, into) };
    }
    round_rows_body(x, m, k, chunks, into)
}

/// [`round_rows_body`] compiled for AVX-512: `to_bf16` on 16 lanes (integer adds, shifts and
/// a select; the same bits). Built for the base x86-64 level, the loop ran about 1 ns a value,
/// which every verify row paid in every call (0.1 ms a row a step on the demo).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn round_rows_avx512(x: &[f32], m: usize, k: usize, chunks: usize, into: &mut Rows) {
    round_rows_body(x, m, k, chunks, into)
}

#[inline(always)]
fn round_rows_body(x: &[f32], m: usize, k: usize, chunks: usize, into: &mut Rows) {
    into.stride = chunks * KC;
    // every value below is written, so the buffer is only grown, not cleared
    into.bits
        .resize(into.bits.len().max(m * into.stride + 32), 0);
    // rows start on cache lines (stride is 64 bytes a chunk): a tile row never splits
    into.start = line_start(&into.bits);
    for (r, row) in x.chunks_exact(k).take(m).enumerate() {
        let at = into.start + r * into.stride;
        let (out, pad) = into.bits[at..at + into.stride].split_at_mut(k);
        for (o, v) in out.iter_mut().zip(row) {
            *o = to_bf16(*v);
        }
        pad.fill(0);
    }
}

/// `half::bf16::from_f32(v).to_bits()` (to nearest, ties to even; NaN stays NaN) in a form
/// the compiler vectorizes.
#[inline(always)]
fn to_bf16(v: f32) -> u16 {
    let b = v.to_bits();
    let rounded = (b.wrapping_add(0x7fff + (b >> 16 & 1)) >> 16) as u16;
    if b & 0x7fff_ffff > 0x7f80_0000 {
        (b >> 16) as u16 | 0x40
    } else {
        rounded
    }
}

/// Weights that give bf16 B tiles chunk by chunk: held as tiles ([`Bf16Tiles`]), or rebuilt
/// from quantized blocks for each call ([`super::bf16_rebuild::QTiles`]).
pub trait TileSource: Sync {
    /// Whether the tiles are rebuilt for each call (else read where they lie).
    const REBUILT: bool;
    /// Output columns `n`, inputs `k`, and chunks of 32 weights per column (B tiles a panel).
    fn dims(&self) -> (usize, usize, usize);
    /// The B tiles of chunk `c` of panels `p..p + g`: where panel `p`'s lies and how many u16
    /// on the next panel's is. A rebuilt source writes them into `buf` (room for `g` tiles).
    ///
    /// # Safety
    /// The CPU has what [`available`] checks; panels `p..p + g` and chunk `c` exist; `buf`
    /// is 64-byte aligned with room for `g` tiles.
    unsafe fn chunk(&self, p: usize, g: usize, c: usize, buf: *mut u16) -> (*const u16, usize);

    /// Whether the AVX-512 BF16 form's few-row calls go chunk by chunk through
    /// [`TileSource::dot_chunk`] (a rebuilt source that multiplies its tile rows in registers)
    /// rather than in passes over stored tiles. Either way gives the same bits.
    const FUSED: bool = false;

    /// Chunk `c` of panels `p..p + G` (`G` up to 4) times `R` rows of bf16 activations (row
    /// `q`'s chunk at `x[q]`), added into `acc` (row `q`, panel `i` at `acc[q][i]`). The
    /// default multiplies the tiles [`TileSource::chunk`] gives; a source that rebuilds its
    /// tile rows in registers overrides it.
    ///
    /// # Safety
    /// As [`TileSource::chunk`], with AVX-512 BF16.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn dot_chunk<const R: usize, const G: usize>(
        &self,
        p: usize,
        c: usize,
        x: &[*const u16; R],
        acc: &mut [[std::arch::x86_64::__m512; G]; R],
    ) {
        super::bf16_dot::dot_chunk_from_tiles(self, p, c, x, acc)
    }
}

/// u16 per B tile (1 KiB).
pub(super) const TILE: usize = PANEL * KC;

impl TileSource for Bf16Tiles {
    const REBUILT: bool = false;

    fn dims(&self) -> (usize, usize, usize) {
        (self.n, self.k, self.chunks)
    }

    unsafe fn chunk(&self, p: usize, _g: usize, c: usize, _buf: *mut u16) -> (*const u16, usize) {
        let at = self.start + (p * self.chunks + c) * TILE;
        (self.data.as_ptr().add(at), self.chunks * TILE)
    }
}

/// `y[m · n]` from `x[m · k]` and `w`. Panics where [`available`] is false or on inconsistent
/// lengths.
pub fn gemm(x: &[f32], m: usize, w: &impl TileSource, y: &mut [f32]) {
    let (n, k, chunks) = w.dims();
    assert!(
        available(),
        "bf16_tiles: neither AMX-BF16 nor AVX-512 BF16 here"
    );
    assert_eq!(x.len(), m * k, "bf16_tiles: x is not m*k");
    assert_eq!(y.len(), m * n, "bf16_tiles: y is not m*n");
    thread_local! {
        static SCRATCH: std::cell::RefCell<Rows> = const {
            std::cell::RefCell::new(Rows { bits: Vec::new(), start: 0, stride: 0 })
        };
    }
    let mut run = |a: &Rows| {
        super::column_tasks(y, n, n * k * m, |cols| {
            // SAFETY: `available` checked the tiles and their state (or AVX-512 BF16); task
            // windows start at multiples of 16 columns (TASK_ALIGN), so every panel is whole
            // inside one task.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                if amx() {
                    task(w, a, m, cols)
                } else {
                    super::bf16_dot::task(w, a, m, cols)
                }
            }
        })
    };
    let mut fill = |a: &mut Rows| {
        round_rows(x, m, k, chunks, a);
        run(a)
    };
    SCRATCH.with(|s| match s.try_borrow_mut() {
        Ok(mut a) => fill(&mut a),
        // a nested call on this thread (none today) rounds into a buffer of its own
        Err(_) => fill(&mut Rows {
            bits: Vec::new(),
            start: 0,
            stride: 0,
        }),
    });
}

/// tmm0..tmm3: C (`rows` x 16 f32); tmm4: A (`rows` x 32 bf16); tmm5..tmm7: B (16 x 64 bytes).
fn config(rows: usize) -> super::amx::Config {
    let mut c = super::amx::Config::new();
    for t in 0..5 {
        c = c.tile(t, rows, 64);
    }
    for t in 5..8 {
        c = c.tile(t, KC / 2, 64);
    }
    c
}

/// Every chunk of panels `p..p + g` of a rebuilt source, rebuilt once into this thread's
/// scratch (chunk `c` at `c · g` tiles from the 64-byte aligned `base` that `f` gets), for the
/// several row passes of a call with more rows than one pass takes.
///
/// # Safety
/// As [`TileSource::chunk`] for each chunk.
pub(super) unsafe fn rebuilt_group<W: TileSource>(
    w: &W,
    p: usize,
    g: usize,
    f: impl FnOnce(*mut u16),
) {
    thread_local! {
        static SCRATCH: std::cell::RefCell<Vec<u16>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        let chunks = w.dims().2;
        let len = chunks * g * TILE;
        if s.len() < len + 32 {
            s.resize(len + 32, 0);
        }
        let base = s.as_mut_ptr().add(line_start(&s));
        for c in 0..chunks {
            w.chunk(p, g, c, base.add(c * g * TILE));
        }
        f(base)
    })
}

/// Chunks between a rebuilt tile's vector stores and its tile load (a tile load of bytes
/// just stored waits until those stores leave the core), and the ring of buffers they need.
const LAG: usize = 2;
const RING: usize = LAG + 1;

#[repr(C, align(64))]
struct Ring([[u16; GROUP * TILE]; RING]);

/// This task's panels in groups of up to 4. Up to 16 rows (decode, verify) rebuild each
/// chunk's tiles just ahead of their multiplies; more rows rebuild a group's tiles once into a
/// scratch that every 16-row pass reads.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn task<W: TileSource>(w: &W, a: &Rows, m: usize, cols: &Columns) {
    let panels = cols.j0 / PANEL..cols.j1.div_ceil(PANEL);
    let chunks = w.dims().2;
    // written by a rebuilt source before its tiles are loaded (not zeroed: 12 KiB a call)
    let mut ring = std::mem::MaybeUninit::<Ring>::uninit();
    let ring = ring.as_mut_ptr() as *mut u16;
    let mut p = panels.start;
    while p < panels.end {
        let g = (panels.end - p).min(GROUP);
        if !W::REBUILT || m <= ROWS {
            for r0 in (0..m).step_by(ROWS) {
                let rows = (m - r0).min(ROWS);
                super::amx::configure(&config(rows));
                group(chunks, a, r0, rows, p, g, cols, |c| {
                    w.chunk(p, g, c, ring.add(c % RING * GROUP * TILE))
                });
            }
        } else {
            rebuilt_group(w, p, g, |base| {
                for r0 in (0..m).step_by(ROWS) {
                    let rows = (m - r0).min(ROWS);
                    super::amx::configure(&config(rows));
                    group(chunks, a, r0, rows, p, g, cols, |c| {
                        (base.add(c * g * TILE) as *const u16, TILE)
                    });
                }
            });
        }
        p += g;
    }
}

/// Panels `p..p + g` (`g` = 4, or 1-3 at a task's end) for rows `r0..r0 + rows`; `tiles(c)`
/// gives chunk `c`'s B tiles (see [`TileSource::chunk`]), `LAG` chunks before their
/// multiplies.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn group(
    chunks: usize,
    a: &Rows,
    r0: usize,
    rows: usize,
    p: usize,
    g: usize,
    cols: &Columns,
    mut tiles: impl FnMut(usize) -> (*const u16, usize),
) {
    use std::arch::asm;
    let (lda, ldb) = (a.stride * 2, 64usize);
    let ap = a.bits.as_ptr().add(a.start + r0 * a.stride);
    asm!(
        "tilezero tmm0",
        "tilezero tmm1",
        "tilezero tmm2",
        "tilezero tmm3",
        options(nostack)
    );
    let mut inflight = [(std::ptr::null::<u16>(), 0usize); RING];
    for t in 0..chunks + LAG {
        if t < chunks {
            inflight[t % RING] = tiles(t);
        }
        if t < LAG {
            continue;
        }
        let c = t - LAG;
        let (b0, ps) = inflight[c % RING];
        let ap = ap.add(c * KC);
        let (b1, b2, b3) = (b0.add(ps), b0.add(2 * ps), b0.add(3 * ps));
        if g == GROUP {
            asm!(
                "tileloadd tmm4, [{a} + {lda}*1]",
                "tileloadd tmm5, [{b0} + {ldb}*1]",
                "tdpbf16ps tmm0, tmm4, tmm5",
                "tileloadd tmm6, [{b1} + {ldb}*1]",
                "tdpbf16ps tmm1, tmm4, tmm6",
                "tileloadd tmm7, [{b2} + {ldb}*1]",
                "tdpbf16ps tmm2, tmm4, tmm7",
                "tileloadd tmm5, [{b3} + {ldb}*1]",
                "tdpbf16ps tmm3, tmm4, tmm5",
                a = in(reg) ap, lda = in(reg) lda, ldb = in(reg) ldb,
                b0 = in(reg) b0, b1 = in(reg) b1, b2 = in(reg) b2, b3 = in(reg) b3,
                options(nostack)
            );
        } else {
            // a task's last panels, one at a time (each C tile's chain is the same)
            asm!(
                "tileloadd tmm4, [{a} + {lda}*1]",
                "tileloadd tmm5, [{b0} + {ldb}*1]",
                "tdpbf16ps tmm0, tmm4, tmm5",
                a = in(reg) ap, lda = in(reg) lda, ldb = in(reg) ldb, b0 = in(reg) b0,
                options(nostack)
            );
            if g > 1 {
                asm!(
                    "tileloadd tmm6, [{b1} + {ldb}*1]",
                    "tdpbf16ps tmm1, tmm4, tmm6",
                    ldb = in(reg) ldb, b1 = in(reg) b1, options(nostack)
                );
            }
            if g > 2 {
                asm!(
                    "tileloadd tmm7, [{b2} + {ldb}*1]",
                    "tdpbf16ps tmm2, tmm4, tmm7",
                    ldb = in(reg) ldb, b2 = in(reg) b2, options(nostack)
                );
            }
        }
    }
    #[repr(C, align(64))]
    struct Out([[f32; PANEL * ROWS]; GROUP]);
    let mut out = Out([[0f32; PANEL * ROWS]; GROUP]);
    let s = PANEL * 4;
    asm!(
        "tilestored [{c0} + {s}*1], tmm0",
        "tilestored [{c1} + {s}*1], tmm1",
        "tilestored [{c2} + {s}*1], tmm2",
        "tilestored [{c3} + {s}*1], tmm3",
        c0 = in(reg) out.0[0].as_mut_ptr(), c1 = in(reg) out.0[1].as_mut_ptr(),
        c2 = in(reg) out.0[2].as_mut_ptr(), c3 = in(reg) out.0[3].as_mut_ptr(),
        s = in(reg) s, options(nostack)
    );
    for (i, c) in out.0.iter().enumerate().take(g) {
        for r in 0..rows {
            cols.set_run(r0 + r, (p + i) * PANEL, &c[r * PANEL..(r + 1) * PANEL]);
        }
    }
}

#[cfg(test)]
#[path = "bf16_tiles_tests.rs"]
mod tests;
