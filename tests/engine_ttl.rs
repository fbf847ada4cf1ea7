//! `docs/contract.md` §2 in the engine: the matrix, the boundary, default changes, finality,
//! time high-water.

mod common;

use std::time::Duration;

use common::{clock, opts, T0};
use ebbdb::{DefaultTtl, Expiry, Keyspace, Store, Ttl};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Writes `k` with `own` under a keyspace whose default is `default`, then reports whether it
/// is live just before and at `at` seconds after the write.
fn live_before_and_at(
    default: DefaultTtl,
    own: Option<Ttl>,
    at: u64,
) -> ebbdb::Result<(bool, bool)> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    let store = Store::open_with(dir.path(), opts(&c))?;
    let ks = store.create_keyspace("m", default)?;
    match own {
        Some(t) => ks.put_with_ttl("k", "v", t)?,
        None => ks.put("k", "v")?,
    }
    c.advance(secs(at - 1));
    let before = ks.get("k")?.is_some();
    c.advance(secs(1));
    let after = ks.get("k")?.is_some();
    Ok((before, after))
}

const FAR: u64 = 10_000_000;

#[test]
fn matrix_absent_off_never_expires() -> ebbdb::Result<()> {
    assert_eq!(
        live_before_and_at(DefaultTtl::Off, None, FAR)?,
        (true, true)
    );
    Ok(())
}

#[test]
fn matrix_absent_never_expire_never_expires() -> ebbdb::Result<()> {
    assert_eq!(
        live_before_and_at(DefaultTtl::NeverExpire, None, FAR)?,
        (true, true)
    );
    Ok(())
}

#[test]
fn matrix_absent_seconds_expires_n_after_write() -> ebbdb::Result<()> {
    assert_eq!(
        live_before_and_at(DefaultTtl::Seconds(7), None, 7)?,
        (true, false)
    );
    Ok(())
}

#[test]
fn matrix_never_off_never_expires() -> ebbdb::Result<()> {
    assert_eq!(
        live_before_and_at(DefaultTtl::Off, Some(Ttl::Never), FAR)?,
        (true, true)
    );
    Ok(())
}

#[test]
fn matrix_never_never_expire_never_expires() -> ebbdb::Result<()> {
    assert_eq!(
        live_before_and_at(DefaultTtl::NeverExpire, Some(Ttl::Never), FAR)?,
        (true, true)
    );
    Ok(())
}

#[test]
fn matrix_never_seconds_never_expires() -> ebbdb::Result<()> {
    assert_eq!(
        live_before_and_at(DefaultTtl::Seconds(3), Some(Ttl::Never), FAR)?,
        (true, true)
    );
    Ok(())
}

#[test]
fn matrix_own_off_is_ignored() -> ebbdb::Result<()> {
    assert_eq!(
        live_before_and_at(DefaultTtl::Off, Some(Ttl::Seconds(3)), FAR)?,
        (true, true)
    );
    Ok(())
}

#[test]
fn matrix_own_never_expire_expires_m_after_write() -> ebbdb::Result<()> {
    assert_eq!(
        live_before_and_at(DefaultTtl::NeverExpire, Some(Ttl::Seconds(4)), 4)?,
        (true, false)
    );
    Ok(())
}

#[test]
fn matrix_own_seconds_may_exceed_default() -> ebbdb::Result<()> {
    assert_eq!(
        live_before_and_at(DefaultTtl::Seconds(3), Some(Ttl::Seconds(9)), 9)?,
        (true, false)
    );
    Ok(())
}

fn setup(
    default: DefaultTtl,
) -> ebbdb::Result<(
    tempfile::TempDir,
    ebbdb::clock::ManualClock,
    Store,
    Keyspace,
)> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    let store = Store::open_with(dir.path(), opts(&c))?;
    let ks = store.create_keyspace("ks", default)?;
    Ok((dir, c, store, ks))
}

#[test]
fn boundary_ts_plus_ttl_is_expired_and_counts_are_exact() -> ebbdb::Result<()> {
    let (_d, c, _s, ks) = setup(DefaultTtl::Seconds(10))?;
    // Written at T0 + 0.999 s: _ts is T0, so it expires at T0 + 10 exactly.
    c.advance(Duration::from_millis(999));
    ks.put("a", "1")?;
    ks.put_with_ttl("b", "2", Ttl::Seconds(20))?;
    c.set_unix_millis((T0 + 10) * 1000 - 1);
    assert_eq!(ks.len()?, 2);
    c.set_unix_millis((T0 + 10) * 1000);
    assert_eq!(ks.get("a")?, None);
    assert_eq!(ks.len()?, 1);
    assert_eq!(ks.iter().count(), 1);
    Ok(())
}

#[test]
fn every_write_restarts_the_countdown() -> ebbdb::Result<()> {
    let (_d, c, _s, ks) = setup(DefaultTtl::Seconds(10))?;
    ks.put("a", "1")?;
    c.advance(secs(8));
    ks.put("a", "2")?;
    c.advance(secs(8));
    assert_eq!(ks.get("a")?, Some(b"2".to_vec()));
    c.advance(secs(2));
    assert_eq!(ks.get("a")?, None);
    Ok(())
}

#[test]
fn off_to_n_expires_old_items_at_once() -> ebbdb::Result<()> {
    let (_d, c, _s, ks) = setup(DefaultTtl::Off)?;
    ks.put("old", "1")?;
    c.advance(secs(100));
    ks.put("new", "2")?;
    ks.set_default_ttl(DefaultTtl::Seconds(50))?;
    assert_eq!(
        ks.get("old")?,
        None,
        "written 100 s ago, 50 s TTL: expired at the change"
    );
    assert_eq!(ks.get("new")?, Some(b"2".to_vec()));
    c.advance(secs(50));
    assert_eq!(ks.get("new")?, None);
    Ok(())
}

#[test]
fn n_to_m_retimes_items_not_yet_expired() -> ebbdb::Result<()> {
    let (_d, c, _s, ks) = setup(DefaultTtl::Seconds(10))?;
    ks.put("a", "1")?;
    c.advance(secs(5));
    ks.set_default_ttl(DefaultTtl::Seconds(30))?;
    c.advance(secs(10));
    assert_eq!(
        ks.get("a")?,
        Some(b"1".to_vec()),
        "lengthened before expiry"
    );
    c.advance(secs(15));
    assert_eq!(ks.get("a")?, None, "30 s after the write");
    Ok(())
}

#[test]
fn turning_ttl_off_stops_future_expiry_even_for_own_ttl() -> ebbdb::Result<()> {
    let (_d, c, _s, ks) = setup(DefaultTtl::NeverExpire)?;
    ks.put_with_ttl("own", "1", Ttl::Seconds(10))?;
    ks.set_default_ttl(DefaultTtl::Off)?;
    c.advance(secs(1000));
    assert_eq!(ks.get("own")?, Some(b"1".to_vec()));
    Ok(())
}

#[test]
fn expiry_is_final_when_ttl_turned_off_or_lengthened_and_across_reopen() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    {
        let store = Store::open_with(dir.path(), opts(&c))?;
        let ks = store.create_keyspace("ks", DefaultTtl::Seconds(10))?;
        ks.put("a", "1")?;
        ks.put("b", "1")?;
        c.advance(secs(10));
        assert_eq!(ks.len()?, 0);
        ks.set_default_ttl(DefaultTtl::Off)?;
        assert_eq!(ks.get("a")?, None, "turning TTL off revives nothing");
        ks.set_default_ttl(DefaultTtl::Seconds(1_000_000))?;
        assert_eq!(ks.get("b")?, None, "lengthening revives nothing");
    }
    let store = Store::open_with(dir.path(), opts(&c))?;
    let ks = store.keyspace("ks")?;
    assert_eq!(ks.default_ttl(), DefaultTtl::Seconds(1_000_000));
    assert_eq!(ks.get("a")?, None);
    assert_eq!(ks.len()?, 0);
    store.compact_full()?;
    assert_eq!(ks.get("b")?, None);
    Ok(())
}

#[test]
fn clock_stepping_back_across_reopen_revives_nothing() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    {
        let store = Store::open_with(dir.path(), opts(&c))?;
        let ks = store.create_keyspace("ks", DefaultTtl::Seconds(10))?;
        ks.put("a", "1")?;
        c.advance(secs(20));
        assert_eq!(ks.get("a")?, None);
        c.set_unix_millis(T0 * 1000);
        assert_eq!(ks.get("a")?, None, "the clock stepped back within one open");
    }
    // The clock is still stepped back when we reopen.
    let store = Store::open_with(dir.path(), opts(&c))?;
    let ks = store.keyspace("ks")?;
    assert_eq!(ks.get("a")?, None);
    assert!(store.now_unix_millis() >= (T0 + 20) * 1000);
    Ok(())
}

#[test]
fn remaining_ttl_reports_never_and_time_left() -> ebbdb::Result<()> {
    let (_d, c, _s, ks) = setup(DefaultTtl::Seconds(60))?;
    ks.put("a", "1")?;
    ks.put_with_ttl("b", "1", Ttl::Never)?;
    c.advance(secs(15));
    assert_eq!(
        ks.remaining_ttl("a")?,
        Some(Expiry::At {
            unix_secs: T0 + 60,
            remaining: secs(45)
        })
    );
    assert_eq!(ks.remaining_ttl("b")?, Some(Expiry::Never));
    assert_eq!(ks.remaining_ttl("zzz")?, None);
    Ok(())
}

#[test]
fn invalid_ttls_are_rejected_with_the_cosmos_message() -> ebbdb::Result<()> {
    let (_d, _c, store, ks) = setup(DefaultTtl::Off)?;
    let e = ks
        .put_with_ttl("a", "1", Ttl::Seconds(0))
        .expect_err("ttl 0");
    assert_eq!(e.status_code(), 400);
    assert!(
        e.to_string().contains("The input ttl '0' is invalid"),
        "{e}"
    );
    let e = ks
        .set_default_ttl(DefaultTtl::Seconds(0))
        .expect_err("default 0");
    assert!(
        e.to_string()
            .contains("The input defaultTtl '0' is invalid"),
        "{e}"
    );
    assert!(store
        .create_keyspace("x", DefaultTtl::Seconds(u32::MAX))
        .is_err());
    Ok(())
}

#[test]
fn oversized_keys_and_values_are_typed_errors() -> ebbdb::Result<()> {
    let (_d, _c, _s, ks) = setup(DefaultTtl::Off)?;
    let e = ks
        .put(vec![0u8; ebbdb::MAX_KEY_SIZE + 1], "v")
        .expect_err("big key");
    assert_eq!(e.status_code(), 400);
    let e = ks
        .put("k", vec![0u8; ebbdb::MAX_VALUE_SIZE + 1])
        .expect_err("big value");
    assert_eq!(e.status_code(), 413);
    assert_eq!(ks.len()?, 0);
    Ok(())
}

/// A merge drops a record expired by its own metadata without looking its key up, so it must
/// judge that expiry under the whole default-TTL history: records written under 10 s and
/// lengthened to 100 s before they expired are still live at 50 s, through a full compaction
/// and a reopen.
#[test]
fn a_merge_keeps_records_whose_default_was_lengthened() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    {
        let store = Store::open_with(dir.path(), opts(&c))?;
        let ks = store.create_keyspace("m", DefaultTtl::Seconds(10))?;
        for i in 0..200 {
            ks.put(format!("k{i:03}"), vec![b'v'; 100])?;
        }
        c.advance(secs(5));
        ks.set_default_ttl(DefaultTtl::Seconds(100))?;
        c.advance(secs(45));
        let report = store.compact_full()?;
        assert!(report.segments_merged > 0, "{report:?}");
        assert_eq!(report.records_copied, 200, "{report:?}");
        assert_eq!(ks.len()?, 200);
        assert!(ks.get("k000")?.is_some());
    }
    let store = Store::open_with(dir.path(), opts(&c))?;
    let ks = store.keyspace("m")?;
    assert_eq!(ks.len()?, 200);
    assert_eq!(ks.iter().count(), 200);
    Ok(())
}
