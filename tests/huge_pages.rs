//! `set_huge_pages`: by default (`HugePages::LargeMaps`) the key directory of a store of
//! 100,000 keys (a few slab pages, far below the threshold) is not advised to huge pages, nor
//! with `Off`; with `All` its slab pages are (where the system's setting is `madvise`), and
//! every read still returns what was written. (The threshold rule has a unit test in
//! `log::mmap`; a store past it would take two million keys.) One test, because the setting is the
//! process's and a test binary is one process.

use ebbdb::{set_huge_pages, DefaultTtl, HugePages, Options, Store, SyncPolicy, WriteBatch};

/// Mappings of this process of one slab page's size (2 MiB) advised to huge pages (`hg` in
/// their `VmFlags`).
#[cfg(target_os = "linux")]
fn advised_mappings() -> usize {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
    let mut size = 0u64;
    let mut count = 0;
    for line in smaps.lines() {
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or_default();
        if let Some((from, to)) = first.split_once('-') {
            if let (Ok(from), Ok(to)) = (u64::from_str_radix(from, 16), u64::from_str_radix(to, 16))
            {
                size = to - from;
            }
        } else if first == "VmFlags:" && size == 2 << 20 && words.any(|f| f == "hg") {
            count += 1;
        }
    }
    count
}

/// Whether asking gets huge pages here, as the library reads it: 64-bit Linux, huge pages of
/// 2 MiB, and the setting `madvise` (the 2 MiB size's own, unless it defers to the global one).
#[cfg(target_os = "linux")]
fn asking_counts() -> bool {
    let read = |file: &str| {
        std::fs::read_to_string(format!("/sys/kernel/mm/transparent_hugepage/{file}"))
            .unwrap_or_default()
    };
    let own = read("hugepages-2048kB/enabled");
    let mode = if own.is_empty() || own.contains("[inherit]") {
        read("enabled")
    } else {
        own
    };
    cfg!(target_pointer_width = "64")
        && read("hpage_pmd_size").trim() == "2097152"
        && mode.contains("[madvise]")
}

fn key(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes());
    k[8..].copy_from_slice(&i.to_be_bytes());
    k
}

/// Fills a store with `n` keys (more than two slab pages), walks it in key order (an
/// ordering's copy), reopens it (open's temporaries) and checks every value both times;
/// `while_open` runs after each check, the store still open.
fn fill_walk_reopen(opts: impl Fn() -> Options, n: u64, while_open: impl Fn()) {
    let dir = tempfile::tempdir().expect("temp dir");
    let check = |ks: &ebbdb::Keyspace| {
        for i in (0..n).step_by(97) {
            assert_eq!(
                ks.get(key(i)).expect("get").as_deref(),
                Some(&i.to_le_bytes()[..])
            );
        }
        let mut seen = 0u64;
        let mut last: Option<Vec<u8>> = None;
        for item in ks.iter() {
            let (k, v) = item.expect("walk");
            assert!(last.as_deref() < Some(&k[..]), "key order");
            let i = u64::from_be_bytes(k[8..].try_into().expect("16-byte key"));
            assert_eq!(v, i.to_le_bytes());
            last = Some(k.to_vec());
            seen += 1;
        }
        assert_eq!(seen, n);
    };
    {
        let store = Store::open_with(dir.path(), opts()).expect("open");
        let ks = store
            .keyspace_or_create("k", DefaultTtl::NeverExpire)
            .expect("keyspace");
        for start in (0..n).step_by(1000) {
            let mut b = WriteBatch::new();
            for i in start..(start + 1000).min(n) {
                b.put(&ks, key(i), i.to_le_bytes());
            }
            store.write_batch(b).expect("write");
        }
        check(&ks);
        while_open();
    }
    let store = Store::open_with(dir.path(), opts()).expect("open");
    check(&store.keyspace("k").expect("keyspace after reopen"));
    while_open();
}

#[test]
fn huge_pages_only_where_asked() {
    let opts = || Options::default().sync(SyncPolicy::Never);
    let n = 100_000;
    let none_advised = || {
        #[cfg(target_os = "linux")]
        assert_eq!(advised_mappings(), 0, "nothing advised");
    };
    set_huge_pages(HugePages::Off);
    fill_walk_reopen(opts, n, none_advised);
    set_huge_pages(HugePages::default());
    fill_walk_reopen(opts, n, none_advised);
    set_huge_pages(HugePages::All);
    fill_walk_reopen(opts, n, || {
        #[cfg(target_os = "linux")]
        if asking_counts() {
            assert!(
                advised_mappings() > 0,
                "with HugePages::All the slab pages are advised to huge pages"
            );
        }
    });
}
