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
//! extent stays on small pages (no memory is wasted on rounding). Pages the system allocator
//! hands back from an earlier, already written block keep the size they had: this is advice
//! for fresh memory (most of a model's weights at load), not a guarantee. Smaller allocations and
//! every other OS go straight to the system allocator. `madvise` only gives advice: where THP is
//! off (`never`) or the call fails, the memory is ordinary memory and nothing else changes.
//! `DSPARK_HUGE_PAGES=0` turns the advice off (for side-by-side runs).
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

/// Marks the whole huge-page extents of `[ptr, ptr + size)` (`ptr` aligned to [`HUGE`]).
#[cfg(target_os = "linux")]
fn advise(ptr: *mut u8, size: usize) {
    let len = size / HUGE * HUGE;
    if !ptr.is_null() && len > 0 {
        // SAFETY: the range lies inside an allocation we own; MADV_HUGEPAGE changes no
        // contents and its failure (THP off, old kernel) is harmless.
        unsafe { libc::madvise(ptr.cast(), len, libc::MADV_HUGEPAGE) };
    }
}

#[cfg(not(target_os = "linux"))]
fn advise(_ptr: *mut u8, _size: usize) {}

// SAFETY: every call is forwarded to `System` with a layout that depends only on the caller's
// layout, so alloc and dealloc of one block always agree; madvise never changes contents.
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
            Some(huge) => {
                // advise before zeroing, so that the zeroing writes fault in huge pages
                let p = System.alloc(huge);
                advise(p, layout.size());
                if !p.is_null() {
                    std::ptr::write_bytes(p, 0, layout.size());
                }
                p
            }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, huge_layout(layout).unwrap_or(layout))
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
        // a block under the threshold is left alone
        // SAFETY: as above.
        unsafe {
            let small = layout(HUGE / 2);
            let p = a.alloc(small);
            assert!(!p.is_null());
            a.dealloc(p, small);
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
