//! An expired item's event survives a merge that runs before the reaper reports it.
//!
//! A merge used to drop a put expired by its own metadata whatever the key directory said.
//! With an expiry subscriber, the item's entry was then still waiting for the reaper; if the
//! store closed before the reaper's next pass, the reopen found no record, so no entry and no
//! event: the item expired without ever being reported. A merge now copies an expired
//! version the key directory still names until its expiry has been reported
//! (DESIGN.md section 11).

mod common;

use std::time::Duration;

use common::{clock, opts};
use ebbdb::{DefaultTtl, Store, Ttl};

#[test]
fn an_item_merged_away_before_its_expiry_was_reported_is_reported_after_a_reopen(
) -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    {
        let store = Store::open_with(dir.path(), opts(&c))?;
        let _events = store.subscribe_expirations();
        let ks = store.create_keyspace("ks", DefaultTtl::NeverExpire)?;
        ks.put_with_ttl("short", vec![1u8; 100], Ttl::Seconds(5))?;
        // Rewrites make the segment holding "short" mostly dead, so the policy merges it.
        for round in 0..4u8 {
            for i in 0..30u32 {
                ks.put(format!("filler-{i:02}"), vec![round; 100])?;
            }
        }
        c.advance(Duration::from_secs(10));
        // A merge before any expiry pass (as the background worker may run one).
        let merged = store.run_compaction_policy()?;
        assert!(
            merged.segments_merged > 0,
            "the policy merged nothing: {merged:?}"
        );
        assert_eq!(ks.get("short")?, None);
        // Closed cleanly without a reaper pass.
    }
    let store = Store::open_with(dir.path(), opts(&c))?;
    let events = store.subscribe_expirations();
    store.maintain()?;
    let reported: Vec<Vec<u8>> = events.try_iter().map(|e| e.key).collect();
    assert_eq!(
        reported,
        vec![b"short".to_vec()],
        "the expiry was never reported"
    );
    Ok(())
}
