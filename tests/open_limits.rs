//! Options that cannot work are refused at open with a typed error. Issue 9, finding 11.

mod common;

use common::{clock, opts};
use ebbdb::{Error, Store};

#[test]
fn segment_size_above_32_bit_offsets_is_refused() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    match Store::open_with(dir.path(), opts(&c).segment_size(5 << 30)) {
        Err(Error::InvalidOptions(msg)) => assert!(msg.contains("segment_size"), "{msg}"),
        other => panic!("expected InvalidOptions, got {other:?}"),
    }
    assert!(Store::open_with(dir.path(), opts(&c).segment_size(u64::from(u32::MAX))).is_ok());
    Ok(())
}
