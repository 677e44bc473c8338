//! A global allocator that puts large buffers (weights, KV caches, the logits of long
//! prompts) on transparent huge pages where the OS offers them.
//!
//! Decode streams every weight once per token. On 4 KiB pages that is one TLB entry per 4 KiB
//! read, and the page walks sit on the critical path of the stream; on 2 MiB pages they all but
//! vanish. Most Linux distributions ship THP in `madvise` mode, where only ranges marked with
//! `MADV_HUGEPAGE` get huge pages, so a plain `malloc` never does. Measured on the demo model
//! (f32, 2-core AVX2 machine, same binary through glibc's own `glibc.malloc.hugetlb=1`): decode
//! 42.6 -> 47.4 tok/s (three runs each, interleaved). This allocator covers the buffers of
//! 2 MiB and more (about 360 of the demo's 540 MB of f32 weights; glibc's tunable also covers
//! the heap): decode 36.8 -> 39.2 tok/s, four interleaved runs each.
//!
//! How: an allocation of at least [`HUGE`] bytes is taken from the system allocator aligned to
//! [`HUGE`], and its whole 2 MiB extents are marked `MADV_HUGEPAGE` before we touch them, so
//! the kernel backs them with huge pages at their first write; the tail past the last whole
//! extent stays on small pages (no memory is wasted on rounding). A zeroed allocation (a KV
//! cache, `Tensor::zeros`, `vec![0; n]`) is mapped from the kernel instead (see `mapped`): its
//! pages are zero and stay off the resident set until written, so the unused capacity of a
//! cache costs nothing (a first version cleared it itself to get huge pages, which made all of
//! it resident). Pages the system allocator hands back from an earlier, already written block
//! keep the size they had: this is advice for fresh memory (most of a model's weights at load),
//! not a guarantee. Smaller allocations and every other OS go straight to the system allocator.
//! `madvise` only gives advice: where THP is off (`never`) or the call fails, the memory is
//! ordinary memory and nothing else changes. `DSPARK_HUGE_PAGES=0` turns all of this off (for
//! side-by-side runs).
//!
//! Declared by the binaries (`dspark`, the app) with `#[global_allocator]`.

use std::alloc::{GlobalAlloc, Layout, System};
#[cfg(target_os = "linux")]
use std::sync::atomic::{AtomicU8, Ordering};

/// Huge page size on x86-64 and most aarch64 Linux kernels; also the alignment and the size
/// from which an allocation is advised.
pub const HUGE: usize = 2 << 20;

/// The allocator (a unit struct: `#[global_allocator] static A: HugePageAlloc = HugePageAlloc;`).
pub struct HugePageAlloc;

/// For a layout this allocator advises (Linux, at least [`HUGE`] bytes, alignment within
/// [`HUGE`], advice on), the layout the system allocator is asked for: the same size, aligned
/// to a huge page. `None`: the layout goes to the system allocator as it is. Alloc and dealloc
/// of one block get the same answer (the on/off state is read once).
#[inline]
fn huge_layout(layout: Layout) -> Option<Layout> {
    let advised =
        cfg!(target_os = "linux") && layout.size() >= HUGE && layout.align() <= HUGE && enabled();
    // SAFETY: HUGE is a power of two and >= the requested alignment; the size, valid for the
    // caller's layout, rounded up to HUGE stays far below isize::MAX on 64-bit targets.
    advised.then(|| unsafe { Layout::from_size_align_unchecked(layout.size(), HUGE) })
}

#[cfg(target_os = "linux")]
fn enabled() -> bool {
    // 0 = not read yet, 1 = on, 2 = off. Read with getenv (no allocation: this runs inside
    // the allocator).
    static STATE: AtomicU8 = AtomicU8::new(0);
    match STATE.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            // SAFETY: a NUL-terminated name; the result is only compared, never kept.
            let v = unsafe { libc::getenv(c"DSPARK_HUGE_PAGES".as_ptr()) };
            // SAFETY: getenv returns NULL or a NUL-terminated string.
            let off = !v.is_null() && unsafe { std::ffi::CStr::from_ptr(v) }.to_bytes() == b"0";
            STATE.store(if off { 2 } else { 1 }, Ordering::Relaxed);
            !off
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn enabled() -> bool {
    false
}

/// Marks the whole huge-page extents inside `[ptr, ptr + size)`.
#[cfg(target_os = "linux")]
fn advise(ptr: *mut u8, size: usize) {
    if ptr.is_null() {
        return;
    }
    let lo = (ptr as usize).next_multiple_of(HUGE);
    let hi = (ptr as usize + size) / HUGE * HUGE;
    if hi > lo {
        // SAFETY: the range lies inside an allocation we own; MADV_HUGEPAGE changes no
        // contents and its failure (THP off, old kernel) is harmless.
        unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_HUGEPAGE) };
    }
}

#[cfg(not(target_os = "linux"))]
fn advise(_ptr: *mut u8, _size: usize) {}

/// Zeroed blocks mapped straight from the kernel (`mmap`): zero and untouched, so a block is
/// not resident until written (a KV cache's unused capacity costs nothing), and aligned to
/// [`HUGE`]. Their addresses are kept in a fixed table (no allocation inside the allocator),
/// which `dealloc` consults to know whether to unmap a block or hand it back to `System`.
/// (`calloc` would also leave fresh pages untouched, but mixing it with the 2 MiB-aligned
/// blocks fragmented glibc's heap: +65 MB resident on the demo at load.)
#[cfg(target_os = "linux")]
mod mapped {
    use super::HUGE;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Mapped blocks alive at once; past this, zeroed blocks are cleared by us instead.
    const SLOTS: usize = 4096;
    static SLOT: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
    /// Slots in use: a dealloc skips the table while it is empty.
    static LIVE: AtomicUsize = AtomicUsize::new(0);

    fn page_len(size: usize) -> usize {
        size.next_multiple_of(4096)
    }

    /// A fresh zeroed block of `size` bytes aligned to [`HUGE`], or null (no mapping or no slot).
    pub fn map(size: usize) -> *mut u8 {
        let len = page_len(size);
        let Some(span) = len.checked_add(HUGE) else {
            return std::ptr::null_mut();
        };
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                span,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return std::ptr::null_mut();
        }
        let raw = raw as usize;
        let start = raw.next_multiple_of(HUGE);
        // SAFETY: both trimmed ranges lie inside the mapping just made and outside the block.
        unsafe {
            if start > raw {
                libc::munmap(raw as *mut libc::c_void, start - raw);
            }
            let end = start + len;
            if raw + span > end {
                libc::munmap(end as *mut libc::c_void, raw + span - end);
            }
        }
        for slot in &SLOT {
            if slot
                .compare_exchange(0, start, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                LIVE.fetch_add(1, Ordering::AcqRel);
                return start as *mut u8;
            }
        }
        // SAFETY: the block was mapped above and never handed out.
        unsafe { libc::munmap(start as *mut libc::c_void, len) };
        std::ptr::null_mut()
    }

    /// Unmaps `ptr` if [`map`] made it (true), else leaves it alone (false).
    pub fn unmap(ptr: *mut u8, size: usize) -> bool {
        let addr = ptr as usize;
        if LIVE.load(Ordering::Acquire) == 0 {
            return false;
        }
        for slot in &SLOT {
            if slot.load(Ordering::Acquire) == addr
                && slot
                    .compare_exchange(addr, 0, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                LIVE.fetch_sub(1, Ordering::AcqRel);
                // SAFETY: the caller frees its own block, which `map` mapped with this length.
                unsafe { libc::munmap(ptr.cast(), page_len(size)) };
                return true;
            }
        }
        false
    }
}

// SAFETY: every call is forwarded to `System` with a layout that depends only on the caller's
// layout, so alloc and dealloc of one block always agree, except zeroed advised blocks that
// `mapped` made, which dealloc recognises by address and unmaps; madvise never changes contents.
unsafe impl GlobalAlloc for HugePageAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match huge_layout(layout) {
            None => System.alloc(layout),
            Some(huge) => {
                let p = System.alloc(huge);
                advise(p, layout.size());
                p
            }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match huge_layout(layout) {
            None => System.alloc_zeroed(layout),
            Some(_) => {
                #[cfg(target_os = "linux")]
                {
                    let p = mapped::map(layout.size());
                    if !p.is_null() {
                        advise(p, layout.size());
                        return p;
                    }
                }
                // no mapping: advise before zeroing, so that the zeroing faults in huge pages
                let p = self.alloc(layout);
                if !p.is_null() {
                    std::ptr::write_bytes(p, 0, layout.size());
                }
                p
            }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match huge_layout(layout) {
            None => System.dealloc(ptr, layout),
            #[cfg(target_os = "linux")]
            Some(_) if mapped::unmap(ptr, layout.size()) => {}
            Some(huge) => System.dealloc(ptr, huge),
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = Layout::from_size_align_unchecked(new_size, layout.align());
        if huge_layout(layout).is_none() && huge_layout(new).is_none() {
            return System.realloc(ptr, layout, new_size);
        }
        let p = self.alloc(new);
        if !p.is_null() {
            std::ptr::copy_nonoverlapping(ptr, p, layout.size().min(new_size));
            self.dealloc(ptr, layout);
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize) -> Layout {
        Layout::from_size_align(size, 8).unwrap()
    }

    #[test]
    fn large_blocks_are_huge_aligned_and_hold_their_data() {
        let a = HugePageAlloc;
        for size in [HUGE, HUGE + 4096 + 12, 3 * HUGE + 1] {
            // SAFETY: layouts are valid and non-zero; blocks are freed with their layouts.
            unsafe {
                let p = a.alloc(layout(size));
                assert!(!p.is_null());
                if cfg!(target_os = "linux") && enabled() {
                    assert_eq!(p as usize % HUGE, 0, "size {size}");
                }
                for i in (0..size).step_by(4093) {
                    *p.add(i) = (i % 251) as u8;
                }
                for i in (0..size).step_by(4093) {
                    assert_eq!(*p.add(i), (i % 251) as u8);
                }
                a.dealloc(p, layout(size));
            }
        }
    }

    #[test]
    fn zeroed_blocks_are_zero() {
        let a = HugePageAlloc;
        for size in [100, HUGE + 3] {
            // SAFETY: as above.
            unsafe {
                let p = a.alloc_zeroed(layout(size));
                assert!(std::slice::from_raw_parts(p, size).iter().all(|&b| b == 0));
                a.dealloc(p, layout(size));
            }
        }
    }

    #[test]
    fn mapped_and_plain_large_blocks_free_in_any_order() {
        let a = HugePageAlloc;
        let sizes = [HUGE, 3 * HUGE + 5, HUGE + 4097];
        // SAFETY: as above; each block is freed once with its own layout.
        unsafe {
            for round in 0..3u8 {
                let zeroed: Vec<_> = sizes.iter().map(|&s| a.alloc_zeroed(layout(s))).collect();
                let plain: Vec<_> = sizes.iter().map(|&s| a.alloc(layout(s))).collect();
                for (i, (&z, &p)) in zeroed.iter().zip(&plain).enumerate() {
                    assert!(!z.is_null() && !p.is_null());
                    assert_eq!(*z.add(sizes[i] - 1), 0, "round {round}");
                    std::ptr::write_bytes(z, round + 1, sizes[i]);
                    std::ptr::write_bytes(p, round + 2, sizes[i]);
                }
                for i in [1, 0, 2] {
                    assert_eq!(*zeroed[i].add(sizes[i] / 2), round + 1);
                    assert_eq!(*plain[i].add(sizes[i] / 2), round + 2);
                    a.dealloc(plain[i], layout(sizes[i]));
                    a.dealloc(zeroed[i], layout(sizes[i]));
                }
            }
        }
    }

    #[test]
    fn realloc_keeps_contents_across_the_threshold() {
        let a = HugePageAlloc;
        // small -> large -> larger -> small, contents kept up to the shorter length each time
        let sizes = [1000, HUGE + 10, 2 * HUGE + 77, 500];
        // SAFETY: each realloc gets the block's current layout.
        unsafe {
            let mut p = a.alloc(layout(sizes[0]));
            for i in 0..sizes[0] {
                *p.add(i) = (i % 7) as u8;
            }
            for w in sizes.windows(2) {
                p = a.realloc(p, layout(w[0]), w[1]);
                assert!(!p.is_null());
                for i in 0..w[0].min(w[1]).min(sizes[0]) {
                    assert_eq!(*p.add(i), (i % 7) as u8, "{} -> {}", w[0], w[1]);
                }
            }
            a.dealloc(p, layout(*sizes.last().unwrap()));
        }
    }

    /// Where THP is available (not `never`), a large block lies in a mapping advised for huge
    /// pages (`hg` in its VmFlags), from its first byte to its last. Whether its pages are huge
    /// then depends on whether they were touched before: memory the system allocator hands back
    /// from an earlier block keeps the pages it had, so that part is only reported.
    #[cfg(target_os = "linux")]
    #[test]
    fn large_blocks_are_advised_for_huge_pages_where_thp_is_on() {
        let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        if mode.is_empty() || mode.contains("[never]") || !enabled() {
            eprintln!("THP unavailable here ({mode:?}) or DSPARK_HUGE_PAGES=0; nothing to check");
            return;
        }
        let a = HugePageAlloc;
        let size = 8 * HUGE;
        // SAFETY: as above.
        unsafe {
            let p = a.alloc(layout(size));
            std::ptr::write_bytes(p, 1, size);
            let first = smaps_field(p as usize, "VmFlags:");
            let last = smaps_field(p as usize + size - 1, "VmFlags:");
            let huge = smaps_field(p as usize, "AnonHugePages:");
            a.dealloc(p, layout(size));
            for flags in [&first, &last] {
                let advised = flags
                    .as_deref()
                    .is_some_and(|f| f.split_whitespace().any(|w| w == "hg"));
                assert!(
                    advised,
                    "VmFlags {flags:?} of a 16 MiB block (THP {mode:?})"
                );
            }
            eprintln!("AnonHugePages of the block's mapping: {huge:?}");
        }
        // a zeroed block (mapped from the kernel) is advised over its whole extents too
        // SAFETY: as above.
        unsafe {
            let p = a.alloc_zeroed(layout(size));
            let inner = (p as usize).next_multiple_of(HUGE);
            let flags = smaps_field(inner, "VmFlags:");
            a.dealloc(p, layout(size));
            let advised = flags
                .as_deref()
                .is_some_and(|f| f.split_whitespace().any(|w| w == "hg"));
            assert!(advised, "VmFlags {flags:?} inside a zeroed 16 MiB block");
        }
        // a block under the threshold is left alone
        // SAFETY: as above.
        unsafe {
            let small = layout(HUGE / 2);
            let p = a.alloc(small);
            assert!(!p.is_null());
            a.dealloc(p, small);
        }
    }

    /// A large zeroed block (what a KV cache or `Tensor::zeros` asks for) is not made resident
    /// until it is written: the unused capacity of a cache costs no memory. Other tests run
    /// in this process at the same time, so the bound leaves them 128 MiB; a block the
    /// allocator clears itself adds all of its 512 MiB.
    #[cfg(target_os = "linux")]
    #[test]
    fn large_zeroed_blocks_stay_off_the_resident_set_until_written() {
        fn resident() -> usize {
            let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
            let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
            // SAFETY: sysconf has no preconditions.
            pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize
        }
        let a = HugePageAlloc;
        let size = 256 * HUGE;
        // SAFETY: as above.
        unsafe {
            let before = resident();
            let p = a.alloc_zeroed(layout(size));
            assert!(!p.is_null());
            let grew = resident().saturating_sub(before);
            for i in (0..size).step_by(HUGE + 4096) {
                assert_eq!(*p.add(i), 0);
            }
            a.dealloc(p, layout(size));
            assert!(
                grew < 64 * HUGE,
                "a 512 MiB zeroed block made {} MiB resident",
                grew >> 20
            );
        }
    }

    /// The value of `key` (e.g. `VmFlags:`) in the /proc/self/smaps entry of the mapping
    /// holding `addr`.
    #[cfg(target_os = "linux")]
    fn smaps_field(addr: usize, key: &str) -> Option<String> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            let range = line.split_once(' ').map_or(line, |(r, _)| r);
            if let Some((lo, hi)) = range.split_once('-') {
                if let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                {
                    inside = (lo..hi).contains(&addr);
                    continue;
                }
            }
            if inside {
                if let Some(v) = line.strip_prefix(key) {
                    return Some(v.trim().to_string());
                }
            }
        }
        None
    }
}
