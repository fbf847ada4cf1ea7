//! `CLOCK`: the engine's durable notion of time.
//!
//! ```text
//!  0  8  magic "EBBDBCLK"
//!  8  8  high-water second: no call has used a `now` later than this
//! 16  8  reaped-up-to second: expiry events for deadlines <= this were delivered
//! 24  4  crc32 of bytes [0, 24)
//! ```
//! Written in place with one 28-byte `pwrite` (within one sector) whenever a call sees a new
//! second, and fsynced with the log. A torn or missing file falls back to the newest write time
//! found in the log, which is itself a high-water mark.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// The clock file's name in the database directory.
pub(crate) const FILE_NAME: &str = "CLOCK";

use byteorder::{ByteOrder, LittleEndian as LE};

const MAGIC: [u8; 8] = *b"EBBDBCLK";
const LEN: usize = 28;

/// The open `CLOCK` file. Writes go through the owner (under a mutex, one short `pwrite`);
/// [`ClockFile::syncer`] gives a second handle so an fsync never holds that mutex.
#[derive(Debug)]
pub struct ClockFile {
    file: File,
}

/// What `CLOCK` says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClockState {
    /// High-water second.
    pub high_water: u64,
    /// Expiry events for deadlines up to this second have been delivered.
    pub reaped_upto: u64,
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
            Ok(()) if b[0..8] == MAGIC && LE::read_u32(&b[24..28]) == crc32fast::hash(&b[..24]) => {
                ClockState {
                    high_water: LE::read_u64(&b[8..16]),
                    reaped_upto: LE::read_u64(&b[16..24]),
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
        LE::write_u64(&mut b[8..16], state.high_water);
        LE::write_u64(&mut b[16..24], state.reaped_upto);
        let crc = crc32fast::hash(&b[..24]);
        LE::write_u32(&mut b[24..28], crc);
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
        };
        f.write(want).expect("write");
        drop(f);
        let (_, s) = ClockFile::open(dir.path()).expect("open");
        assert_eq!(s, want);
        std::fs::write(dir.path().join("CLOCK"), [1u8; 28]).expect("write");
        let (_, s) = ClockFile::open(dir.path()).expect("open");
        assert_eq!(s, ClockState::default());
    }
}
