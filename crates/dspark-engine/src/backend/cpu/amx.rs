//! The AMX tile unit, shared by the kernels that use it ([`super::qpanel_amx`] for 8-bit codes,
//! [`super::bf16_tiles`] for bf16): whether this CPU has the tiles and Linux granted this process
//! their state, and the tile configuration each thread has loaded. A thread holds one
//! configuration at a time, so every kernel loads its own through [`configure`], which
//! reloads only when the shapes differ from the thread's last ones: two kernels on one thread
//! (a kept-quantized drafter beside a bf16 target) never run on each other's shapes.

/// A tile configuration (`ldtilecfg`'s 64-byte operand): palette 1, then per tile its rows and
/// bytes per row.
#[repr(C, align(64))]
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Config([u8; 64]);

impl Config {
    /// Palette 1 with every tile unused.
    pub fn new() -> Config {
        let mut c = [0u8; 64];
        c[0] = 1;
        Config(c)
    }

    /// Tile `t` (0..8) as `rows` rows of `bytes` bytes.
    pub fn tile(mut self, t: usize, rows: usize, bytes: u16) -> Config {
        self.0[48 + t] = rows as u8;
        self.0[16 + 2 * t..18 + 2 * t].copy_from_slice(&bytes.to_le_bytes());
        self
    }
}

/// Makes `cfg` the calling thread's tile configuration (a no-op when it already is).
///
/// # Safety
/// The CPU must have the AMX tiles and this process their state ([`granted`]).
#[cfg(target_arch = "x86_64")]
#[inline]
pub(crate) unsafe fn configure(cfg: &Config) {
    thread_local! {
        static LOADED: std::cell::Cell<Option<Config>> = const { std::cell::Cell::new(None) };
    }
    if LOADED.get() != Some(*cfg) {
        std::arch::asm!("ldtilecfg [{0}]", in(reg) cfg.0.as_ptr(), options(nostack, readonly));
        LOADED.set(Some(*cfg));
    }
}

/// CPUID.(7, 0):EDX bits: 22 AMX-BF16, 24 AMX-TILE, 25 AMX-INT8.
#[derive(Clone, Copy)]
pub(crate) enum Unit {
    Int8 = 25,
    Bf16 = 22,
}

/// Whether the tiles with `unit`'s dot products run here: the CPU has them (with AVX-512, which
/// every AMX CPU has and the kernels around the tiles use), Linux granted this process the tile
/// state, and `DSPARK_AMX` is not `0`. Read once.
pub(crate) fn granted(unit: Unit) -> bool {
    static TILES: std::sync::LazyLock<Option<u32>> = std::sync::LazyLock::new(|| {
        (std::env::var("DSPARK_AMX").map_or(true, |v| v != "0") && avx512())
            .then(request)
            .flatten()
    });
    TILES.is_some_and(|edx| edx >> unit as u32 & 1 == 1)
}

#[cfg(target_arch = "x86_64")]
fn avx512() -> bool {
    std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("avx512bw")
        && std::is_x86_feature_detected!("f16c")
}

#[cfg(not(target_arch = "x86_64"))]
fn avx512() -> bool {
    false
}

/// The tile feature bits, once Linux has granted the tile state; `None` without AMX-TILE or
/// the grant.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn request() -> Option<u32> {
    // leaf 7 exists wherever AVX-512 does
    let edx = std::arch::x86_64::__cpuid_count(7, 0).edx;
    if edx >> 24 & 1 == 0 {
        return None;
    }
    // ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA: the kernel enables the tile data state for
    // this process (every thread), or refuses when it cannot
    // SAFETY: a plain syscall with integer arguments.
    (unsafe { libc::syscall(libc::SYS_arch_prctl, 0x1023, 18) } == 0).then_some(edx)
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn request() -> Option<u32> {
    None
}
