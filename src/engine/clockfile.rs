//! `CLOCK`: the engine's durable notion of time, and how much of the active segment is known
//! to be durable.
//!
//! ```text
//!  0  8  magic "EBBDBCLK"
//!  8  4  format version
//! 12  4  active segment id the durable length is about (0: none)
//! 16  8  high-water second: no call has used a `now` later than this
//! 24  8  reaped-up-to second: expiry events for deadlines <= this were delivered
//! 32  8  durable length: that segment's first bytes known fsynced when this was written
//! 40  4  crc32 of bytes [0, 40)
//! ```
//! Written in place with one 44-byte `pwrite` (within one sector) whenever a call sees a new
//! second, after every `sync`, and at close; fsynced with the log. A torn or missing file
//! falls back to the newest write time found in the log and the manifest's high-water mark
//! (time), and to "nothing known" (durable length): never to a claim that is too high.
//!
//! The durable length only ever names bytes whose fsync had *completed* before the `pwrite`
//! was issued, so whichever version of the file survives a crash, its claim is true. Recovery
//! uses it to tell damage (a bad record below it: `Error::Corruption`) from a torn tail (a bad
//! record after it, with nothing that decodes behind it, is cut).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::Ordering;

/// The clock file's name in the database directory.
pub(crate) const FILE_NAME: &str = "CLOCK";

use byteorder::{ByteOrder, LittleEndian as LE};

use crate::format::FORMAT_VERSION;

const MAGIC: [u8; 8] = *b"EBBDBCLK";
const LEN: usize = 44;

/// The open `CLOCK` file. Writes go through the owner (under a mutex, one short `pwrite`);
/// [`ClockFile::syncer`] gives a second handle so an fsync never holds that mutex.
#[derive(Debug)]
pub struct ClockFile {
    file: File,
}

/// How much of one segment is known to be on stable storage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DurablePoint {
    /// Segment id (0: no claim).
    pub segment: u32,
    /// Length of its prefix known fsynced (header included).
    pub len: u64,
}

/// What `CLOCK` says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClockState {
    /// High-water second.
    pub high_water: u64,
    /// Expiry events for deadlines up to this second have been delivered.
    pub reaped_upto: u64,
    /// The active segment's durable prefix, as last recorded.
    pub durable: DurablePoint,
}

impl ClockFile {
    /// Opens (creating) `dir/CLOCK` and reads it; a bad or missing file reads as zeros.
    ///
    /// # Errors
    /// OS errors opening the file.
    pub fn open(dir: &Path) -> io::Result<(Self, ClockState)> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(dir.join(FILE_NAME))?;
        let mut b = [0u8; LEN];
        let state = match file.read_exact_at(&mut b, 0) {
            Ok(())
                if b[0..8] == MAGIC
                    && LE::read_u32(&b[8..12]) == FORMAT_VERSION
                    && LE::read_u32(&b[40..44]) == crc32fast::hash(&b[..40]) =>
            {
                ClockState {
                    high_water: LE::read_u64(&b[16..24]),
                    reaped_upto: LE::read_u64(&b[24..32]),
                    durable: DurablePoint {
                        segment: LE::read_u32(&b[12..16]),
                        len: LE::read_u64(&b[32..40]),
                    },
                }
            }
            _ => ClockState::default(),
        };
        Ok((Self { file }, state))
    }

    /// Writes `state` in place (no fsync).
    ///
    /// # Errors
    /// The OS error from `pwrite`.
    pub fn write(&self, state: ClockState) -> io::Result<()> {
        let mut b = [0u8; LEN];
        b[0..8].copy_from_slice(&MAGIC);
        LE::write_u32(&mut b[8..12], FORMAT_VERSION);
        LE::write_u32(&mut b[12..16], state.durable.segment);
        LE::write_u64(&mut b[16..24], state.high_water);
        LE::write_u64(&mut b[24..32], state.reaped_upto);
        LE::write_u64(&mut b[32..40], state.durable.len);
        let crc = crc32fast::hash(&b[..40]);
        LE::write_u32(&mut b[40..44], crc);
        self.file.write_all_at(&b, 0)
    }

    /// A second handle to the same file, for fsyncing without the write mutex.
    ///
    /// # Errors
    /// The OS error from `dup`.
    pub fn syncer(&self) -> io::Result<File> {
        self.file.try_clone()
    }
}

impl ClockState {
    /// Takes a newer durable point if one is known.
    pub fn note_durable(&mut self, point: Option<DurablePoint>) {
        if let Some(p) = point {
            self.durable = p;
        }
    }
}

impl super::Inner {
    /// The active segment's durable prefix now. `try_read`: this runs on paths that may already
    /// hold locks, so it never waits; `None` (a rotation holds the set) keeps the old claim,
    /// which is still true.
    ///
    /// No claim either for an active file still under its staging name (a rotation not
    /// committed): no manifest on disk lists it, so a crash now deletes it and frees its id,
    /// and a claim recorded for it would later be taken as one about the next file of that id
    /// (which may hold fewer bytes: opening would then refuse the store). The old claim is
    /// about a file the manifest on disk lists, and it stays true.
    pub(super) fn durable_point(&self) -> Option<DurablePoint> {
        let set = self.segments.try_read()?;
        if set.active.is_staged() {
            return None;
        }
        Some(DurablePoint {
            segment: set.active.id,
            len: set.active.durable.load(Ordering::Acquire),
        })
    }

    /// Writes the current durable point to `CLOCK` (no fsync): called after the log was
    /// fsynced and before `CLOCK` is, so `sync()` and close leave a claim covering every
    /// acknowledged write.
    pub(super) fn record_durable_point(&self) {
        let durable = self.durable_point();
        let mut guard = self.clockfile.lock();
        let (file, state) = &mut *guard;
        state.note_durable(durable);
        let _ = file.write(*state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bad_file_reads_as_zero() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (f, s) = ClockFile::open(dir.path()).expect("open");
        assert_eq!(s, ClockState::default());
        let want = ClockState {
            high_water: 77,
            reaped_upto: 70,
            durable: DurablePoint {
                segment: 3,
                len: 4242,
            },
        };
        f.write(want).expect("write");
        drop(f);
        let (_, s) = ClockFile::open(dir.path()).expect("open");
        assert_eq!(s, want);
        std::fs::write(dir.path().join("CLOCK"), [1u8; LEN]).expect("write");
        let (_, s) = ClockFile::open(dir.path()).expect("open");
        assert_eq!(s, ClockState::default());
    }
}
