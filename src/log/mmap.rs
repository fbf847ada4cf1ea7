//! The crate's only `unsafe`: mapping sealed segment files read-only, prefetch hints over
//! mapped records ([`prefetch`]), key-directory entries ([`prefetch_ref`]) and the addresses
//! where a key's index bucket is expected to lie ([`prefetch_addr`], which may be given a
//! stale address), lowering a background thread's CPU priority
//! ([`lower_thread_priority`]), giving the C allocator's free memory back
//! ([`release_free_memory`]), and advising how large temporaries are backed (huge pages and
//! prefaulting: [`reserve_temporary`], [`prefault_temporary`]), which changes no byte, and
//! [`MappedVec`], a vector of fixed capacity in an anonymous mapping of its own (the key
//! directory's slab pages, on huge pages where the process's policy asks: `set_huge_pages`).
//!
//! Soundness argument (also in DESIGN.md, "mmap"): a mapping is undefined behaviour in Rust only
//! if the bytes change while a `&[u8]` over them is alive. We map a file only once it is
//! *sealed*: fully written, fsynced, and never opened for writing again by ebbdb. Files are
//! deleted (unlinked) only when the last `Arc<Segment>` holding the mapping is dropped, and an
//! unlinked file's pages stay valid for existing mappings anyway. Other processes are kept out
//! of the directory by the exclusive `LOCK`; a user who edits segment files by hand while the
//! database is open is outside the contract (the CRC on every read still turns most such edits
//! into `Error::Corruption` rather than a wrong answer).
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use memmap2::Mmap;

/// Maps a sealed segment file read-only. An empty file gets no mapping (mmap of length 0 fails).
///
/// # Errors
/// The OS error from `mmap`.
pub fn map_sealed(file: &File) -> io::Result<Option<Mmap>> {
    if file.metadata()?.len() == 0 {
        return Ok(None);
    }
    // SAFETY: `file` is a sealed segment: ebbdb never writes to it again and deletes it only
    // after the last holder of this mapping is gone; the directory LOCK keeps other ebbdb
    // processes out. See the module docs and DESIGN.md for the full argument.
    let map = unsafe { Mmap::map(file)? };
    #[cfg(unix)]
    {
        // Point reads are random; tell the kernel not to read ahead.
        let _ = map.advise(memmap2::Advice::Random);
    }
    Ok(Some(map))
}

/// Maps a whole file read-only with its pages mapped in now (`MAP_POPULATE`), for a hint that
/// open reads through once or twice and lets go before it returns. An empty file gets no
/// mapping.
///
/// # Errors
/// The OS error from `mmap`.
pub fn map_whole(file: &File) -> io::Result<Option<Mmap>> {
    if file.metadata()?.len() == 0 {
        return Ok(None);
    }
    // SAFETY: a hint file is written whole to a temporary name, fsynced and renamed into
    // place, and never written again (a rename or delete would not touch this mapping anyway);
    // the directory LOCK keeps other ebbdb processes from writing it. As for the sealed
    // segments' mappings, what is left is outside ebbdb's control: another program truncating
    // or writing the file in place, or a read error of the medium, which a mapping turns into
    // SIGBUS where `read` would have returned an error (DESIGN.md §2.3, "Hints read in place").
    let map = unsafe { memmap2::MmapOptions::new().populate().map(file)? };
    Ok(Some(map))
}

/// A read-only mapping of the *active* segment, of a fixed length that may run past the end of
/// the file. Only the flushed prefix is ever turned into a slice.
#[derive(Debug)]
pub struct ActiveMap {
    raw: memmap2::MmapRaw,
}

/// Maps `len` bytes of the active segment `file` read-only (no slice is created here).
///
/// # Errors
/// The OS error from `mmap`.
pub fn map_active(file: &File, len: u64) -> io::Result<ActiveMap> {
    let len = usize::try_from(len).map_err(|_| io::Error::other("mapping too large"))?;
    let raw = memmap2::MmapOptions::new()
        .len(len)
        .map_raw_read_only(file)?;
    Ok(ActiveMap { raw })
}

impl ActiveMap {
    /// The `len` bytes at `offset`, if they lie entirely below `flushed` (the part of the file
    /// that has been written and is never written again) and inside the mapping.
    #[must_use]
    pub fn slice(&self, offset: u64, len: u64, flushed: u64) -> Option<&[u8]> {
        let end = offset.checked_add(len)?;
        if end > flushed || end > self.raw.len() as u64 {
            return None;
        }
        let offset = usize::try_from(offset).ok()?;
        let len = usize::try_from(len).ok()?;
        // SAFETY: [offset, offset + len) lies inside the mapping (checked above) and below
        // `flushed`, which the writer publishes with Release after `pwrite` returned, so these
        // bytes are in the file (no SIGBUS: the file is at least `flushed` long; it is only ever
        // truncated at open, before it is mapped) and, the log being append-only, they are never
        // written again while this mapping exists. MAP_SHARED mappings and `pwrite` share the
        // page cache, so the mapping shows the written bytes. The slice borrows `self`, which
        // keeps the mapping alive.
        let bytes = unsafe { std::slice::from_raw_parts(self.raw.as_ptr().add(offset), len) };
        Some(bytes)
    }
}

/// Asks the processor to start loading `bytes` into its caches, without waiting for them: a
/// scan calls it for a record a few items ahead of the one it decodes, so the misses of
/// records scattered over the log overlap instead of coming one after another. A hint only:
/// it reads nothing and cannot fault (a prefetch of an unmapped address is dropped). Only
/// the first [`PREFETCH_MAX`] bytes: a record's first lines are what stall the decoding, and
/// a large value prefetched whole would push the record being read out of the caches. Does
/// nothing on targets other than x86-64 with SSE.
#[inline]
pub fn prefetch(bytes: &[u8]) {
    let bytes = &bytes[..bytes.len().min(PREFETCH_MAX)];
    // Every 64th byte, and the last: a record need not start on a cache line.
    for b in bytes.iter().step_by(64).chain(bytes.last()) {
        prefetch_ref(b);
    }
}

/// Asks the processor to bring the cache line holding the start of `value` closer, without
/// waiting for it: a batch of lookups that knows where its next entries are issues their
/// loads together instead of one cache miss after the other. Does nothing on targets other
/// than x86-64 with SSE.
#[inline]
pub fn prefetch_ref<T>(value: &T) {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse"))]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: `_mm_prefetch` needs SSE, which this build targets (the `cfg` above), and a
        // prefetch neither reads into the program nor faults, whatever the address; `value`
        // is a live reference anyway.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(value).cast()) };
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse")))]
    let _ = value;
}

/// As [`prefetch_ref`], for an address that may not hold a value of the program's (where a
/// hash table's bucket is expected to lie, say): nothing is read, and no address faults.
#[inline]
pub fn prefetch_addr(addr: usize) {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse"))]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: as in `prefetch_ref`; a prefetch of any address, valid or not, has no effect
        // on the program but the cache.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(std::ptr::without_provenance(addr)) };
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse")))]
    let _ = addr;
}

/// Lowers the calling thread's CPU priority by `steps` nice steps, best effort (a failure
/// leaves it as it was). On Linux a thread has a nice value of its own, and `nice` changes the
/// caller's only. Elsewhere it does nothing. The upkeep and reaper threads call it, so that a
/// writer competing with them for a core is scheduled first (DESIGN.md §11, "Background
/// priority").
pub fn lower_thread_priority(steps: i32) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `nice` takes an integer, touches no memory of the program's, and only
        // changes the scheduling weight of the calling thread.
        let _ = unsafe { libc::nice(steps) };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = steps;
}

/// Bytes from which [`reserve_temporary`] asks for huge pages.
const LARGE_TEMPORARY: usize = 8 << 20;

/// Bytes a large temporary is given at least: above glibc's dynamic mmap threshold (which
/// stops at 32 MiB on 64-bit targets), so unless a free block that large is at hand the
/// allocator maps the room on its own, and the advice goes with it when it is freed.
const OWN_MAPPING: usize = 32 << 20;

/// This system's transparent huge pages as [`reserve_temporary`] may ask for them.
#[derive(Clone, Copy)]
struct ThpSystem {
    /// A huge page's bytes.
    huge: usize,
    /// A base page's bytes.
    base: usize,
    /// The kernel can fault a range in on request (`MADV_POPULATE_WRITE`, Linux 5.14 on).
    populate: bool,
}

/// Where this process asks for huge pages (`crate::set_huge_pages`), a `HugePages` as its
/// discriminant (DESIGN.md §3.1, "Huge pages for large maps only").
static HUGE_POLICY: AtomicU8 = AtomicU8::new(crate::HugePages::LargeMaps as u8);

/// Bytes of every [`MappedVec`] alive in the process: its slab pages.
static MAPPED_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Sets where this process asks for huge pages from now on.
pub fn set_huge_pages(policy: crate::HugePages) {
    HUGE_POLICY.store(policy as u8, Ordering::Relaxed);
}

/// Whether this process asks for huge pages for its large temporaries.
fn temporaries_ask() -> bool {
    HUGE_POLICY.load(Ordering::Relaxed) == crate::HugePages::All as u8
}

/// Whether a new slab page asks for huge pages under `policy`, with `mapped` bytes of slab
/// pages alive already.
fn slab_page_asks(policy: u8, mapped: usize) -> bool {
    policy == crate::HugePages::All as u8
        || (policy == crate::HugePages::LargeMaps as u8 && mapped >= crate::HUGE_PAGES_FROM_BYTES)
}

/// Read once: the huge pages a program gets by asking (`MADV_HUGEPAGE`), if the setting for
/// the PMD-sized pages is `madvise` (the per-size setting of Linux 6.8 on, unless it defers to
/// the global one, else the global one), the huge page is at most a quarter of
/// [`OWN_MAPPING`] (64 KiB base pages on arm64 make it 512 MiB), and this is 64-bit Linux.
/// `None` otherwise, `always` included: there the pages are huge without asking, and asking
/// would only make a fault in the range compact memory to find one.
fn huge_pages() -> Option<ThpSystem> {
    #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
    {
        static PAGES: std::sync::OnceLock<Option<ThpSystem>> = std::sync::OnceLock::new();
        *PAGES.get_or_init(|| {
            let sys = "/sys/kernel/mm/transparent_hugepage";
            let huge: usize = std::fs::read_to_string(format!("{sys}/hpage_pmd_size"))
                .ok()?
                .trim()
                .parse()
                .ok()?;
            let global = std::fs::read_to_string(format!("{sys}/enabled")).ok()?;
            let mode = std::fs::read_to_string(format!("{sys}/hugepages-{}kB/enabled", huge >> 10))
                .ok()
                .filter(|own| !own.contains("[inherit]"))
                .unwrap_or(global);
            if !mode.contains("[madvise]") {
                return None;
            }
            let base = base_page()?;
            let fits = |n: usize| n.is_power_of_two() && n >= 4096;
            if !(fits(huge) && fits(base) && base < huge && huge <= OWN_MAPPING / 4) {
                return None;
            }
            // A kernel that knows the advice accepts it for no bytes; one that does not
            // refuses it (EINVAL) before looking at the length.
            // SAFETY: a range of no bytes at a page-aligned address: nothing is read,
            // written or faulted in.
            let populate = unsafe {
                libc::madvise(
                    std::ptr::without_provenance_mut(base),
                    0,
                    libc::MADV_POPULATE_WRITE,
                )
            } == 0;
            Some(ThpSystem {
                huge,
                base,
                populate,
            })
        })
    }
    #[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
    None
}

/// The page cache's unit for a file's bytes: the base page where it can be read (64-bit
/// Linux), 4 KiB elsewhere. A power of two.
#[must_use]
pub fn page_bytes() -> u64 {
    #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
    if let Some(base) = base_page() {
        return base as u64;
    }
    4096
}

/// The size of a base page, a power of two (`sysconf`, read once).
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
fn base_page() -> Option<usize> {
    static BASE: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *BASE.get_or_init(|| {
        // SAFETY: `sysconf` takes an integer and reads no memory of the program's.
        let base = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()?;
        base.is_power_of_two().then_some(base)
    })
}

/// `advice` for the base pages from `from` to `to` (rounded out to whole base pages),
/// best effort; whether the kernel took it.
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
fn advise(from: usize, to: usize, base: usize, advice: libc::c_int) -> bool {
    let (from, to) = (from / base * base, to.next_multiple_of(base));
    // SAFETY: callers pass a range of one of their vectors' allocations; rounded out to base
    // pages it may take in bytes of the neighbouring blocks, but MADV_HUGEPAGE,
    // MADV_NOHUGEPAGE and MADV_POPULATE_WRITE change how pages are backed (and fault them in),
    // never what any byte holds. A refusal changes nothing.
    to > from
        && unsafe { libc::madvise(std::ptr::without_provenance_mut(from), to - from, advice) } == 0
}

/// Whether a temporary's values are written while others wait for a lock the writer holds
/// ([`reserve_temporary`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Filled {
    /// With no lock anyone waits for (open's temporaries).
    Freely,
    /// Under a lock others wait for (an ordering's copy): its room must be faulted in before
    /// the lock ([`prefault_temporary`]), so it gets huge pages only where the kernel can.
    UnderLock,
}

/// Makes room for at least `additional` more values in `v`, a large temporary that is filled
/// once and dropped (open's loaded records and hint files, an ordering's copy of a key
/// directory). From [`LARGE_TEMPORARY`] bytes on, where [`huge_pages`] says asking gets them
/// (and, for a temporary filled under a lock, the kernel can fault its room in beforehand),
/// the room is at least [`OWN_MAPPING`] bytes and the kernel is asked to back the whole
/// allocation with transparent huge pages (`MADV_HUGEPAGE`; the whole of it, so its mapping
/// is not split and growing it can still move pages rather than copy them): written for the
/// first time, each 4 KiB page cost a page fault, and at 1 M keys those were a third of an
/// open in a fresh process and half of an ordering's copy (DESIGN.md §3.1, "Huge pages for
/// large temporaries"). Room never touched costs address space only; a huge page partly
/// written costs its 2 MiB. Only under `HugePages::All` (DESIGN.md §3.1, "Huge pages for large
/// maps only"); a plain `reserve_exact` otherwise. Returns whether it asked for huge pages:
/// only then need the caller prefault ([`prefault_temporary`]).
pub fn reserve_temporary<T>(v: &mut Vec<T>, additional: usize, filled: Filled) -> bool {
    let size = std::mem::size_of::<T>();
    let want = v.len().saturating_add(additional);
    let Some(pages) = huge_pages().filter(|p| {
        temporaries_ask()
            && size > 0
            && want.saturating_mul(size) >= LARGE_TEMPORARY
            && (p.populate || filled == Filled::Freely)
    }) else {
        v.reserve_exact(additional);
        return false;
    };
    v.reserve_exact(want.max(OWN_MAPPING / size) - v.len());
    #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
    {
        let at = v.as_ptr() as usize;
        advise(
            at,
            at + v.capacity() * size,
            pages.base,
            libc::MADV_HUGEPAGE,
        );
    }
    #[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
    let _ = pages;
    true
}

/// Faults in the room for the next `count` values of `v` now (`MADV_POPULATE_WRITE`), for a
/// temporary [`reserve_temporary`] made huge (it said so; the policy is not read again here,
/// as it may have changed since) whose values are then written under a lock
/// others wait for: a huge page's first fault may have the kernel compact memory to find one,
/// which must not happen while writers wait. The end of the range is rounded up to a huge
/// page where one fits in the room, else to a base page; its start to the first whole base
/// page after the values (the part page before it is in use already). Returns false if the
/// kernel refused: the room is then advised back to ordinary pages (`MADV_NOHUGEPAGE`), whose
/// faults stay small, and the caller need not ask again. Nothing (true) for a vector whose
/// room is under [`OWN_MAPPING`] bytes or where huge pages are not asked for.
pub fn prefault_temporary<T>(v: &Vec<T>, count: usize) -> bool {
    let size = std::mem::size_of::<T>();
    let room = v.capacity().saturating_sub(v.len());
    let Some(pages) = huge_pages()
        .filter(|p| p.populate && size > 0 && v.capacity().saturating_mul(size) >= OWN_MAPPING)
    else {
        return true;
    };
    #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
    {
        let at = v.as_ptr() as usize;
        let limit = at + v.capacity() * size;
        let start = at + v.len() * size;
        let end = start + count.min(room) * size;
        let end = match end.next_multiple_of(pages.huge) {
            whole if whole <= limit => whole,
            _ => end
                .next_multiple_of(pages.base)
                .min(limit / pages.base * pages.base),
        };
        let start = start.next_multiple_of(pages.base);
        if end > start && !advise(start, end, pages.base, libc::MADV_POPULATE_WRITE) {
            advise(at, limit, pages.base, libc::MADV_NOHUGEPAGE);
            return false;
        }
    }
    #[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
    let _ = (pages, room, count);
    true
}

/// Gives the free memory the C allocator holds back to the operating system, best effort
/// (glibc's `malloc_trim(0)`, which also releases whole free pages inside its heaps; nothing
/// with another C library or elsewhere). Freed blocks of the sizes the key directory uses stay
/// with glibc otherwise: its threshold for giving large blocks their own mapping rises with the
/// largest block freed, so a layout of 100 MB freed after an ordering, or open's temporaries,
/// stayed in the process's resident set (a review measured 170 bytes per key after the first
/// walk of a reopened store of 16-byte keys, 72 before open built hashed maps). Called where
/// such a layout was just dropped (DESIGN.md §3.1, "Open builds hashed maps"); it takes a few
/// milliseconds per hundred megabytes of heap.
pub fn release_free_memory() {
    // Whatever was asked for before this call is done by it.
    RELEASE_WANTED.store(false, std::sync::atomic::Ordering::Relaxed);
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `malloc_trim` takes an integer, is thread-safe, and only returns pages that
        // no allocation holds to the kernel; no memory of the program's changes.
        let _ = unsafe { libc::malloc_trim(0) };
    }
}

/// Set when [`release_free_memory_soon`] asked for a [`release_free_memory`] that has not run.
static RELEASE_WANTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Asks for [`release_free_memory`] from the upkeep thread's next tick
/// ([`release_free_memory_if_asked`]), rather than from the caller: an ordering's first walk
/// waited 9-15 ms for the call at 1 M keys before its first chunk. Several asks before the
/// tick make one call (it is for the whole process).
pub fn release_free_memory_soon() {
    RELEASE_WANTED.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Runs [`release_free_memory`] if [`release_free_memory_soon`] asked for it since the last
/// call.
pub fn release_free_memory_if_asked() {
    if RELEASE_WANTED.load(std::sync::atomic::Ordering::Relaxed) {
        release_free_memory();
    }
}

/// Where [`MappedVec`] aligns a mapping of at least this many bytes: a 2 MiB huge page, the
/// size x86-64 and arm64 with 4 KiB base pages use.
const HUGE_ALIGN: usize = 2 << 20;

/// A vector of fixed capacity in an anonymous mapping of its own (`mmap`), aligned to 2 MiB
/// when it is that large, and advised to huge pages (`MADV_HUGEPAGE`) where [`huge_pages`]
/// says asking gets them and the process's policy asks (`crate::set_huge_pages`: by default
/// once the vectors alive hold `crate::HUGE_PAGES_FROM_BYTES`): the key directory's slab pages
/// (DESIGN.md §3.1, "Huge slab pages", "Huge pages for large maps only").
/// From the C allocator, a block of 2 MiB lies across two huge-page frames and gets none;
/// and a mapping of its own goes back to the kernel when it is dropped instead of staying
/// in the allocator's heap. Values are pushed and popped at the end, never past the
/// capacity.
pub struct MappedVec<T> {
    /// The mapping's first byte, aligned for `T`.
    ptr: std::ptr::NonNull<T>,
    /// Values written, from the start.
    len: usize,
    /// Values the mapping has room for.
    cap: usize,
    /// The mapping's bytes.
    bytes: usize,
}

// SAFETY: a `MappedVec<T>` owns its values as a `Vec<T>` does; the mapping is private to it.
unsafe impl<T: Send> Send for MappedVec<T> {}
// SAFETY: shared access hands out `&T` only, as a `Vec<T>` does.
unsafe impl<T: Sync> Sync for MappedVec<T> {}

impl<T> std::fmt::Debug for MappedVec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedVec")
            .field("len", &self.len)
            .field("cap", &self.cap)
            .finish_non_exhaustive()
    }
}

impl<T> MappedVec<T> {
    /// Room for `cap` values, or `None` where there is no such mapping to be had: not 64-bit
    /// Linux, `T` zero-sized or aligned past a base page, `cap` zero, or `mmap` refused (the
    /// caller then uses the heap).
    #[must_use]
    pub fn with_capacity(cap: usize) -> Option<Self> {
        #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
        {
            let base = base_page()?;
            let size = std::mem::size_of::<T>();
            if size == 0 || cap == 0 || std::mem::align_of::<T>() > base {
                return None;
            }
            let bytes = cap.checked_mul(size)?.checked_next_multiple_of(base)?;
            let align = if bytes >= HUGE_ALIGN {
                HUGE_ALIGN.max(base)
            } else {
                base
            };
            let span = bytes.checked_add(align - base)?;
            // SAFETY: a new private anonymous mapping; no existing memory is named.
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
                return None;
            }
            let start = raw as usize;
            let head = start.next_multiple_of(align) - start;
            let tail = span - head - bytes;
            // Both computed while the whole span is mapped: `head + bytes <= span`.
            let first = raw.cast::<u8>().wrapping_add(head);
            let after = first.wrapping_add(bytes);
            // SAFETY: both ranges lie inside the mapping just made, at base-page boundaries
            // (`start`, `align`, `bytes` and `span` are multiples of a base page), and nothing
            // points into them; the part kept, `bytes` from `first`, stays mapped.
            unsafe {
                if head > 0 {
                    libc::munmap(raw, head);
                }
                if tail > 0 {
                    libc::munmap(after.cast(), tail);
                }
            }
            // Not null: `mmap` succeeded.
            let ptr = std::ptr::NonNull::new(first.cast::<T>())?;
            let before = MAPPED_BYTES.fetch_add(bytes, Ordering::Relaxed);
            if let Some(pages) = huge_pages() {
                if bytes.is_multiple_of(pages.huge)
                    && slab_page_asks(HUGE_POLICY.load(Ordering::Relaxed), before)
                {
                    let at = first as usize;
                    advise(at, at + bytes, pages.base, libc::MADV_HUGEPAGE);
                }
            }
            Some(Self {
                ptr,
                len: 0,
                cap,
                bytes,
            })
        }
        #[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
        {
            let _ = cap;
            None
        }
    }

    /// Faults in the whole mapping now, for a vector that will be written under a lock others
    /// wait for (DESIGN.md §3.1, "Huge slab pages"): `MADV_POPULATE_WRITE`, or where the
    /// kernel refuses it, a byte written in each base page of the room not yet used. Nothing
    /// for a vector holding values already (only an empty one is all room).
    pub fn prefault(&mut self) {
        if self.len > 0 {
            return;
        }
        #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
        {
            let at = self.ptr.as_ptr() as usize;
            let Some(base) = base_page() else {
                return;
            };
            if advise(at, at + self.bytes, base, libc::MADV_POPULATE_WRITE) {
                return;
            }
            let first = self.ptr.as_ptr().cast::<u8>();
            for off in (0..self.bytes).step_by(base) {
                // SAFETY: inside the mapping this owns, which holds no value (`len` is 0):
                // a byte written there is room no value occupies yet.
                unsafe { first.add(off).write_volatile(0) };
            }
        }
    }

    /// Appends `v`.
    ///
    /// # Panics
    /// If it is full: callers push at most the capacity they asked for.
    pub fn push(&mut self, v: T) {
        assert!(self.len < self.cap, "a MappedVec never grows");
        // SAFETY: `len < cap`: the slot is inside the mapping, aligned, and holds no value.
        unsafe { self.ptr.as_ptr().add(self.len).write(v) };
        self.len += 1;
    }
}

impl<T> std::ops::Deref for MappedVec<T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        // SAFETY: the first `len` slots hold values, inside the mapping this owns.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> std::ops::DerefMut for MappedVec<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as for `deref`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> Drop for MappedVec<T> {
    fn drop(&mut self) {
        /// Unmaps when dropped, so the mapping goes back also if a value's destructor panics.
        #[cfg_attr(
            not(all(target_os = "linux", target_pointer_width = "64")),
            allow(dead_code)
        )]
        struct Unmap(*mut u8, usize);
        impl Drop for Unmap {
            fn drop(&mut self) {
                // SAFETY: the mapping of a `MappedVec` being dropped, whose values are
                // dropped (or being unwound past) and which nothing points into any more.
                // On a target without the mapping no `MappedVec` is ever made.
                #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
                unsafe {
                    libc::munmap(self.0.cast(), self.1);
                }
            }
        }
        MAPPED_BYTES.fetch_sub(self.bytes, Ordering::Relaxed);
        let _unmap = Unmap(self.ptr.as_ptr().cast(), self.bytes);
        let held = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
        self.len = 0;
        // SAFETY: the first `len` slots hold values, dropped once here (`len` is zero first,
        // and `drop_in_place` of a slice goes on to the other values if one panics).
        unsafe { std::ptr::drop_in_place(held) };
    }
}

impl<T> IntoIterator for MappedVec<T> {
    type Item = T;
    type IntoIter = MappedIntoIter<T>;

    fn into_iter(mut self) -> MappedIntoIter<T> {
        let end = std::mem::take(&mut self.len);
        MappedIntoIter {
            vec: self,
            at: 0,
            end,
        }
    }
}

/// The values of a [`MappedVec`], moved out in order; the mapping goes back when it is
/// dropped, with the values not taken.
pub struct MappedIntoIter<T> {
    /// The mapping, its `len` zero: the values `at..end` are this iterator's.
    vec: MappedVec<T>,
    at: usize,
    end: usize,
}

impl<T> Iterator for MappedIntoIter<T> {
    type Item = T;

    #[inline]
    fn next(&mut self) -> Option<T> {
        if self.at == self.end {
            return None;
        }
        // SAFETY: slots `at..end` hold values not yet moved out; this one is moved out and
        // `at` passes it.
        let v = unsafe { self.vec.ptr.as_ptr().add(self.at).read() };
        self.at += 1;
        Some(v)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.end - self.at, Some(self.end - self.at))
    }
}

impl<T> Drop for MappedIntoIter<T> {
    fn drop(&mut self) {
        let left = self.end - self.at;
        self.end = self.at;
        // SAFETY: the values not moved out, dropped once (the range is emptied first); the
        // mapping goes back when `vec` (its `len` zero) is dropped after this.
        unsafe {
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(
                self.vec.ptr.as_ptr().add(self.at),
                left,
            ));
        }
    }
}

/// How much of a record [`prefetch`] asks for.
pub const PREFETCH_MAX: usize = 4096;

#[cfg(test)]
mod tests {
    use super::{
        prefault_temporary, prefetch, prefetch_addr, reserve_temporary, Filled, MappedVec,
        HUGE_ALIGN, LARGE_TEMPORARY, OWN_MAPPING,
    };

    /// A mapped vector holds what was pushed, in order, gives values back by value in order,
    /// and drops every value it still holds exactly once, whether it is
    /// dropped itself or its iterator is dropped half way; one of 2 MiB or more starts on a
    /// 2 MiB boundary.
    #[test]
    fn a_mapped_vec_keeps_and_drops_every_value_once() {
        use std::rc::Rc;
        let maps = cfg!(all(target_os = "linux", target_pointer_width = "64"));
        let made = MappedVec::<Rc<u32>>::with_capacity(1000);
        assert_eq!(made.is_some(), maps, "64-bit Linux maps, nothing else does");
        let Some(mut v) = made else {
            return;
        };
        let tracked = Rc::new(0u32);
        for _ in 0..1000 {
            v.push(Rc::clone(&tracked));
        }
        assert_eq!(v.len(), 1000);
        assert_eq!(Rc::strong_count(&tracked), 1001);
        let mut it = v.into_iter();
        for _ in 0..300 {
            assert!(it.next().is_some());
        }
        assert_eq!(it.size_hint(), (700, Some(700)));
        drop(it);
        assert_eq!(Rc::strong_count(&tracked), 1);

        let mut w = MappedVec::<u64>::with_capacity(1 << 18).expect("maps as the first did");
        assert_eq!(w.as_ptr() as usize % HUGE_ALIGN, 0, "2 MiB aligned");
        for i in 0..1 << 18 {
            w.push(i);
        }
        assert!(w.iter().copied().eq(0..1 << 18));
        w[7] = 70;
        assert_eq!(w.into_iter().nth(7), Some(70));
        let mut short = MappedVec::<String>::with_capacity(3).expect("maps");
        short.push("a".repeat(100));
        drop(short);
        assert!(
            MappedVec::<()>::with_capacity(8).is_none(),
            "zero-sized values"
        );
        assert!(MappedVec::<u8>::with_capacity(0).is_none(), "no room");
    }

    /// A temporary keeps its values and gets room for what was asked: exactly that below
    /// `LARGE_TEMPORARY` bytes, at least `OWN_MAPPING` bytes from it on where the system has
    /// huge pages to ask for (also when it grows past it from a smaller room, and for values
    /// of other sizes, and zero-sized ones); prefaulting changes no value, and the vector
    /// grows past its room afterwards as any other.
    #[test]
    fn a_temporary_gets_its_room_and_keeps_its_values() {
        // The asked-for path (`HugePages::All`, set back at the end); while it is set, other
        // tests' slab pages may be huge, which changes no result.
        super::set_huge_pages(crate::HugePages::All);
        let huge = super::huge_pages().is_some_and(|p| p.populate);
        let mut small: Vec<u64> = vec![1, 2, 3];
        reserve_temporary(&mut small, 100, Filled::Freely);
        assert_eq!(small, [1, 2, 3]);
        assert!(small.capacity() >= 103);
        assert!(small.capacity() * 8 < LARGE_TEMPORARY);

        let mut bytes: Vec<u8> = b"hint".to_vec();
        reserve_temporary(&mut bytes, LARGE_TEMPORARY, Filled::Freely);
        assert_eq!(bytes, b"hint");
        assert!(bytes.capacity() >= LARGE_TEMPORARY + 4);
        assert!(!huge || bytes.capacity() >= OWN_MAPPING);
        assert!(prefault_temporary(&bytes, LARGE_TEMPORARY));
        assert_eq!(bytes, b"hint");
        bytes.resize(LARGE_TEMPORARY + 4, 9);
        assert_eq!(&bytes[..5], b"hint\x09");
        assert_eq!(bytes[LARGE_TEMPORARY + 3], 9);

        let mut wide: Vec<[u64; 8]> = (0..1000u64).map(|i| [i; 8]).collect();
        let want = OWN_MAPPING / 64 + 7;
        let more = want - wide.len();
        reserve_temporary(&mut wide, more, Filled::UnderLock);
        assert!(wide.capacity() >= want);
        assert!(prefault_temporary(&wide, 5000));
        assert!(wide.iter().enumerate().all(|(i, v)| *v == [i as u64; 8]));
        let past = wide.capacity() + 3;
        wide.extend((1000..past as u64).map(|i| [i; 8]));
        assert!(wide.iter().enumerate().all(|(i, v)| *v == [i as u64; 8]));

        let mut nothing: Vec<()> = vec![(); 5];
        reserve_temporary(&mut nothing, usize::MAX - 5, Filled::Freely);
        assert!(prefault_temporary(&nothing, 10));
        assert_eq!(nothing.len(), 5);
        super::set_huge_pages(crate::HugePages::default());
    }

    /// A slab page asks for huge pages always with `All`, never with `Off`, and with
    /// `LargeMaps` once the pages alive reach the threshold.
    #[test]
    fn slab_pages_ask_by_policy_and_size() {
        use super::slab_page_asks;
        use crate::HugePages;
        let from = crate::HUGE_PAGES_FROM_BYTES;
        let [off, large, all] =
            [HugePages::Off, HugePages::LargeMaps, HugePages::All].map(|p| p as u8);
        for mapped in [0, 2 << 20, from - 1, from, from * 4] {
            assert!(slab_page_asks(all, mapped));
            assert!(!slab_page_asks(off, mapped));
            assert_eq!(slab_page_asks(large, mapped), mapped >= from, "{mapped}");
        }
    }

    /// A hint at any address, unmapped, null or the last one, neither faults nor panics.
    #[test]
    fn a_prefetch_of_any_address_does_not_fault() {
        let on_stack = 7u64;
        for addr in [
            0,
            1,
            4096,
            usize::MAX,
            usize::MAX - 63,
            1 << 47,
            std::ptr::from_ref(&on_stack).addr(),
        ] {
            prefetch_addr(addr);
        }
        assert_eq!(on_stack, 7);
    }

    /// A hint over any slice, empty, shorter than a line, unaligned or longer than
    /// `PREFETCH_MAX`, neither panics (slicing to the cap, the last byte of an empty slice)
    /// nor changes what it covers (the second can only fail if `prefetch` stopped taking
    /// `&[u8]`; the first is what this test is for).
    #[test]
    fn a_prefetch_of_any_slice_neither_panics_nor_writes() {
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        for (start, end) in [(0, 0), (0, 1), (3, 67), (64, 128), (1, 1000), (999, 10_000)] {
            prefetch(&bytes[start..end]);
        }
        assert!(bytes.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8));
    }
}
