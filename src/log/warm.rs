//! Warming the page cache after open: the sealed segments are read into the OS page cache in
//! the background, newest first, when they fit well within the memory the OS has to spare.
//!
//! Sealed segments are mapped with `MADV_RANDOM` (point reads are random, and read-around of
//! a store larger than memory multiplies the disk reads: DESIGN.md §9, "Read-ahead"), so right
//! after a restart each first read of a page is a 4 KiB disk read. Asking for the whole file
//! up front turns those into large sequential reads. The ask is `MADV_WILLNEED` over ranges of
//! [`STEP`]: the kernel starts the reads and returns, and caps one call at its read-ahead
//! window, so the whole file takes one call per window.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::segment::Segment;

/// Bytes asked for per call: the kernel reads at most its read-ahead window (128 KiB by
/// default) per `MADV_WILLNEED`, whatever the length asked.
pub(crate) const STEP: usize = 128 << 10;

/// The share of the spare memory that warming may fill: half, so that warming never pushes
/// out much of what is already cached, and a store that only just fits is left alone.
const SHARE_DIVISOR: u64 = 2;

/// How many of `lens` (segment lengths, newest first) to warm: the longest prefix whose total
/// stays within `room / 2`. Nothing when `room` is unknown.
#[must_use]
pub(crate) fn plan(lens: &[u64], room: Option<u64>) -> usize {
    let Some(room) = room else { return 0 };
    let budget = room / SHARE_DIVISOR;
    let mut total = 0u64;
    lens.iter()
        .take_while(|&&len| {
            total = total.saturating_add(len);
            total <= budget
        })
        .count()
}

/// The bytes the OS reports available (`MemAvailable` of `/proc/meminfo`), lowered to what
/// the process's memory cgroup has left below its limit, if it has one. `None` where this
/// cannot be read (other systems): then nothing is warmed.
#[must_use]
pub(crate) fn room() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let available = mem_available(&meminfo)?;
    let cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|text| cgroup_room(&text, |path| std::fs::read_to_string(path).ok()));
    Some(cgroup.map_or(available, |c| c.min(available)))
}

/// `MemAvailable` from the text of `/proc/meminfo`, in bytes.
fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?;
    let kib: u64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    kib.checked_mul(1024)
}

/// What the memory cgroups named in `proc_self_cgroup` (the text of `/proc/self/cgroup`)
/// have left below their limits: the least, over the process's cgroup and every cgroup above
/// it (a limit set on a parent binds its children), of cgroup v2's `memory.max` −
/// `memory.current` or v1's `memory.limit_in_bytes` − `memory.usage_in_bytes`. The levels
/// are looked for under the cgroup file system's mount; inside a container that mount is
/// the container's own cgroup and the path the kernel names does not exist there, so the
/// mount's top level counts too. `None` where no level has a limit (v2's "max" does not
/// parse). `read` reads a file (a parameter so that tests need no cgroup).
fn cgroup_room(proc_self_cgroup: &str, read: impl Fn(&str) -> Option<String>) -> Option<u64> {
    let number = |path: String| -> Option<u64> { read(&path)?.trim().parse().ok() };
    let mut least: Option<u64> = None;
    for line in proc_self_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let (mount, limit_file, usage_file) = if id == "0" && controllers.is_empty() {
            ("/sys/fs/cgroup", "memory.max", "memory.current")
        } else if controllers.split(',').any(|c| c == "memory") {
            (
                "/sys/fs/cgroup/memory",
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
            )
        } else {
            continue;
        };
        // The cgroup itself, then each parent, up to the mount's top level.
        let mut level = path.trim_end_matches('/');
        loop {
            let dir = format!("{mount}{level}");
            let limit = number(format!("{dir}/{limit_file}"));
            let usage = number(format!("{dir}/{usage_file}"));
            if let (Some(limit), Some(usage)) = (limit, usage) {
                let room = limit.saturating_sub(usage);
                least = Some(least.map_or(room, |l| l.min(room)));
            }
            if level.is_empty() {
                break;
            }
            level = level.rsplit_once('/').map_or("", |(parent, _)| parent);
        }
    }
    least
}

/// Asks for `segs` (newest first) to be read into the page cache, as many as [`plan`] allows
/// for `room`; stops early once `stop` is set. The segments past the plan are let go at once,
/// each planned one as soon as it is done, and one that a merge retires meanwhile is dropped
/// where it is: holding it would keep its file on disk. Returns the bytes asked for.
pub(crate) fn warm(mut segs: Vec<Arc<Segment>>, room: Option<u64>, stop: &AtomicBool) -> u64 {
    let lens: Vec<u64> = segs.iter().map(|s| s.len()).collect();
    segs.truncate(plan(&lens, room));
    let mut asked = 0u64;
    for seg in segs {
        let len = seg.bytes().len();
        let mut at = 0;
        while at < len && !seg.is_obsolete() {
            if stop.load(Ordering::Relaxed) {
                return asked;
            }
            let n = STEP.min(len - at);
            seg.will_need(at, n);
            asked += n as u64;
            at += n;
        }
    }
    asked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_takes_the_newest_that_fit_in_half_the_room() {
        assert_eq!(plan(&[10, 10, 10], None), 0);
        assert_eq!(plan(&[10, 10, 10], Some(60)), 3);
        assert_eq!(plan(&[10, 10, 10], Some(59)), 2);
        assert_eq!(plan(&[10, 10, 10], Some(40)), 2);
        assert_eq!(plan(&[10, 10, 10], Some(39)), 1);
        assert_eq!(
            plan(&[30, 1], Some(40)),
            0,
            "a prefix only: a too-big newest stops it"
        );
        assert_eq!(plan(&[], Some(100)), 0);
        assert_eq!(plan(&[u64::MAX, 1], Some(u64::MAX)), 0);
    }

    #[test]
    fn mem_available_reads_kib() {
        let text = "MemTotal:       24598124 kB\nMemFree:  100 kB\nMemAvailable:   24234940 kB\n";
        assert_eq!(mem_available(text), Some(24_234_940 * 1024));
        assert_eq!(mem_available("MemTotal: 5 kB\n"), None);
        assert_eq!(mem_available("MemAvailable: lots\n"), None);
    }

    fn files(entries: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: std::collections::HashMap<String, String> = entries
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        move |path| map.get(path).cloned()
    }

    /// A case: the text of `/proc/self/cgroup`, the cgroup files there are, the room.
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], Option<u64>);

    #[test]
    fn cgroup_room_takes_the_least_over_the_cgroup_and_its_parents() {
        let cases: &[Case] = &[
            // v2, a limit on the process's own cgroup.
            (
                "0::/app\n",
                &[
                    ("/sys/fs/cgroup/app/memory.max", "1000\n"),
                    ("/sys/fs/cgroup/app/memory.current", "300\n"),
                ],
                Some(700),
            ),
            // "max": no limit.
            (
                "0::/app\n",
                &[
                    ("/sys/fs/cgroup/app/memory.max", "max\n"),
                    ("/sys/fs/cgroup/app/memory.current", "300\n"),
                ],
                None,
            ),
            // Over the limit: no room.
            (
                "0::/\n",
                &[
                    ("/sys/fs/cgroup/memory.max", "500\n"),
                    ("/sys/fs/cgroup/memory.current", "800\n"),
                ],
                Some(0),
            ),
            // v2, the limit on the parent slice, none on the process's own cgroup.
            (
                "0::/limited.slice/app.scope\n",
                &[
                    ("/sys/fs/cgroup/limited.slice/memory.max", "157286400\n"),
                    ("/sys/fs/cgroup/limited.slice/memory.current", "100\n"),
                    ("/sys/fs/cgroup/limited.slice/app.scope/memory.max", "max\n"),
                    (
                        "/sys/fs/cgroup/limited.slice/app.scope/memory.current",
                        "50\n",
                    ),
                ],
                Some(157_286_300),
            ),
            // Both limited: the tighter one, wherever it is.
            (
                "0::/a/b\n",
                &[
                    ("/sys/fs/cgroup/a/memory.max", "1000"),
                    ("/sys/fs/cgroup/a/memory.current", "100"),
                    ("/sys/fs/cgroup/a/b/memory.max", "500"),
                    ("/sys/fs/cgroup/a/b/memory.current", "100"),
                ],
                Some(400),
            ),
            // v1, among other controllers' lines.
            (
                "9:name=systemd:/\n4:memory:/box\n1:cpu,cpuacct:/\n0::/\n",
                &[
                    ("/sys/fs/cgroup/memory/box/memory.limit_in_bytes", "4096"),
                    ("/sys/fs/cgroup/memory/box/memory.usage_in_bytes", "1024"),
                ],
                Some(3072),
            ),
            // v1 inside a container: the kernel names the host's path, but the container's
            // limit sits at the top of the mount.
            (
                "4:memory:/docker/0123abcd\n",
                &[
                    ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "268435456"),
                    ("/sys/fs/cgroup/memory/memory.usage_in_bytes", "68435456"),
                ],
                Some(200_000_000),
            ),
            // No memory controller, or nothing readable.
            (
                "4:cpu:/box\n",
                &[("/sys/fs/cgroup/memory/box/memory.limit_in_bytes", "4096")],
                None,
            ),
            ("garbage\n", &[], None),
        ];
        for (text, present, want) in cases {
            assert_eq!(cgroup_room(text, files(present)), *want, "{text:?}");
        }
    }

    #[test]
    fn warm_asks_for_whole_files_and_stops_when_told() -> crate::Result<()> {
        let dir = tempfile::tempdir()?;
        let opts = crate::Options::default()
            .sync(crate::SyncPolicy::Never)
            .segment_size(64 << 10);
        let store = crate::Store::open_with(dir.path(), opts)?;
        let ks = store.create_keyspace("k", crate::DefaultTtl::Off)?;
        for i in 0..2000u32 {
            ks.put(i.to_be_bytes(), [1u8; 100])?;
        }
        drop(ks);
        drop(store);
        let mut ids = Vec::new();
        for e in std::fs::read_dir(dir.path())? {
            let name = e?.file_name().to_string_lossy().into_owned();
            if let Some(id) = name
                .strip_suffix(".seg")
                .and_then(|n| n.parse::<u32>().ok())
            {
                ids.push(id);
            }
        }
        ids.sort_unstable_by(|a, b| b.cmp(a));
        let mut segs = Vec::new();
        for id in ids {
            segs.push(Arc::new(Segment::open(dir.path(), id)?));
        }
        assert!(segs.len() >= 2, "the puts filled more than one segment");
        let total: u64 = segs.iter().map(|s| s.len()).sum();
        let stop = AtomicBool::new(false);
        assert_eq!(warm(segs.clone(), Some(2 * total), &stop), total);
        let first = segs[0].len();
        assert_eq!(
            warm(segs.clone(), Some(2 * first), &stop),
            first,
            "the newest only"
        );
        assert_eq!(warm(segs.clone(), Some(0), &stop), 0);
        assert_eq!(warm(segs.clone(), None, &stop), 0);
        // A segment retired by a merge is skipped, and let go.
        segs[0].mark_obsolete();
        let weak = Arc::downgrade(&segs[0]);
        let retired = segs.remove(0);
        let rest: u64 = segs.iter().map(|s| s.len()).sum();
        let mut with_retired = vec![retired];
        with_retired.extend(segs.iter().cloned());
        assert_eq!(warm(with_retired, Some(2 * total), &stop), rest);
        assert!(weak.upgrade().is_none(), "the retired segment was let go");
        stop.store(true, Ordering::Relaxed);
        assert_eq!(warm(segs, Some(2 * total), &stop), 0);
        Ok(())
    }
}
