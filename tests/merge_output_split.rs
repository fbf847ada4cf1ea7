//! Where a merge ends its outputs (DESIGN.md §7, "Output size"): copies due within
//! `merge::SPLIT_HORIZON_SECS` go to small outputs of their own, which die whole; copies due
//! later, lasting copies and markers are written together as before. Two cases a review found
//! with the first version, which split at every copy that expires and before every marker.

mod common;

use std::time::Duration;

use common::{clock, opts};
use ebbdb::{DefaultTtl, Store, Ttl};

/// Lasting keys overwritten, so that merges come often, beside two keys a round with a TTL of
/// a day: each merge copies a few of those. Written apart from the lasting records, they made
/// one small file per merge that no rule takes until its day is over.
#[test]
fn copies_due_in_a_day_stay_with_the_lasting_records() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    let store = Store::open_with(dir.path(), opts(&c).segment_size(256 * 1024))?;
    let a = store.create_keyspace("a", DefaultTtl::Off)?;
    let b = store.create_keyspace("b", DefaultTtl::NeverExpire)?;
    let mut x = 0x2545_F491_4F6C_DD1D_u64;
    let mut merging = 0;
    let rounds = 150u32;
    for round in 0..rounds {
        for _ in 0..500 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            a.put(((x % 3_000) as u32).to_be_bytes(), vec![round as u8; 200])?;
        }
        for j in 0..2u32 {
            let k = [round.to_be_bytes(), j.to_be_bytes()].concat();
            b.put_with_ttl(k, vec![5u8; 100], Ttl::Seconds(86_400))?;
        }
        c.advance(Duration::from_secs(1));
        if store.compact()?.segments_merged > 0 {
            merging += 1;
        }
    }
    assert!(merging > 30, "{merging} compactions merged");
    let s = store.stats();
    let small = s
        .per_segment
        .iter()
        .filter(|p| !p.active && p.bytes < 4096)
        .count();
    assert!(small <= 2, "{small} sealed segments under 4 KiB: {s:?}");
    for round in 0..rounds {
        for j in 0..2u32 {
            let k = [round.to_be_bytes(), j.to_be_bytes()].concat();
            assert_eq!(b.get(k)?, Some(vec![5u8; 100]), "round {round}");
        }
    }
    Ok(())
}

/// A merge that keeps markers and copies due much later, with nothing due soon: the markers go
/// with those copies. Written alone, an output of markers is all dead, and the usual share
/// merged it again at every drop of a segment that died whole (a reclaim), rewriting every
/// marker each time.
#[test]
fn markers_are_not_written_alone_and_rewritten_at_every_reclaim() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    let store = Store::open_with(dir.path(), opts(&c).segment_size(64 * 1024))?;
    let base = store.create_keyspace("base", DefaultTtl::Off)?;
    for i in 0..100u32 {
        base.put(i.to_be_bytes(), vec![9u8; 100])?;
    }
    store.compact_full()?;
    let ks = store.create_keyspace("ks", DefaultTtl::NeverExpire)?;
    for i in 0..300u32 {
        let k = [b"t".as_slice(), &i.to_be_bytes()].concat();
        ks.put_with_ttl(k, vec![1u8; 100], Ttl::Seconds(1_000_000))?;
    }
    let long = |i: u32| {
        let mut k = vec![b'd'; 100];
        k.extend_from_slice(&i.to_be_bytes());
        k
    };
    for i in 0..180 {
        ks.put(long(i), [2u8; 8])?;
    }
    for i in 0..180 {
        ks.delete(long(i))?;
    }
    let first = store.compact()?;
    assert!(first.markers_written <= 180, "{first:?}");
    let churn = store.create_keyspace("churn", DefaultTtl::NeverExpire)?;
    let (mut markers, mut dropped) = (0, 0);
    for round in 0..30u32 {
        for j in 0..600u32 {
            let k = [round.to_be_bytes(), j.to_be_bytes()].concat();
            churn.put_with_ttl(k, vec![3u8; 100], Ttl::Seconds(5))?;
        }
        c.advance(Duration::from_secs(10));
        let r = store.compact()?;
        markers += r.markers_written;
        dropped += r.segments_dropped;
    }
    assert!(dropped >= 30, "{dropped} segments dropped whole");
    assert!(
        markers < 180,
        "{markers} markers rewritten over 30 rounds of drops"
    );
    for i in 0..180 {
        assert_eq!(ks.get(long(i))?, None);
    }
    for i in 0..300u32 {
        let k = [b"t".as_slice(), &i.to_be_bytes()].concat();
        assert_eq!(ks.get(k)?, Some(vec![1u8; 100]));
    }
    Ok(())
}
