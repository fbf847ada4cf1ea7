//! Rotation: sealing the active segment and moving the writers to the next one, with every
//! fsync off the log mutex (DESIGN.md §5, "Rotation").
//!
//! A rotation happens in two parts:
//! 1. Under the log mutex, [`Inner::rotate`] writes the old file's buffered tail, cuts its
//!    preallocated space, maps it as a sealed segment, creates the next file under its staging
//!    name (`.seg.tmp`, header written) and moves the writers to it. No fsync, no manifest
//!    write. The rotation is queued in `LogState::pending`.
//! 2. [`Inner::commit_rotations`], on the sync thread (or on any caller that needs bytes after
//!    the rotation durable), fsyncs each sealed file and the new active one, stores the
//!    manifest that lists them, then gives the successors their `.seg` names.
//!
//! Until its manifest is stored, a rotation does not exist on disk: the manifest names the old
//! file active, and opening deletes the successors as unlisted `.seg.tmp` files, with whatever
//! was appended to them. That is a prefix of the log (every record in a successor came after
//! every record in the file before it), and none of it was acknowledged as durable: `sync`,
//! `SyncPolicy::Always`, merges and catalogue changes commit pending rotations before they
//! count anything after them as durable. Writers also commit them once more than
//! [`MAX_PENDING_ROTATIONS`] wait (backpressure on a disk slower than they are).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{next_id, Inner, LogState, PendingSeal};
use crate::error::{IoContext, Result};
use crate::expiry::worker::Message;
use crate::log::active::ActiveWriter;
use crate::log::manifest::SealedSegment;
use crate::log::segment::Segment;

/// Rotations that may wait for their commit before a writer commits them itself
/// ([`Inner::commit_if_far_behind`]). At the default 64 MiB segments that is half a GiB
/// written and not yet fsynced; the sync thread commits each rotation within milliseconds on
/// a healthy disk, so writers only meet this bound on a disk slower than they are.
pub(crate) const MAX_PENDING_ROTATIONS: u64 = 8;

impl Inner {
    /// Seals the active segment and moves the writers to the next one (caller holds the log
    /// mutex). Any failure poisons the store: the buffered tail may be half written.
    pub(crate) fn rotate(&self, log: &mut LogState) -> Result<()> {
        self.rotate_inner(log).inspect_err(|_| self.poison())
    }

    fn rotate_inner(&self, log: &mut LogState) -> Result<()> {
        let sealed_id = log.active.id();
        let path = log.active.shared.current_path();
        log.active.flush().at(&path)?;
        let trimmed = log.active.trim().at(&path)?;
        let segment = Arc::new(Segment::from_file(
            &self.dir,
            sealed_id,
            &log.active.shared.file,
        )?);
        // The successor: created under its staging name, its header written but not fsynced
        // (the commit fsyncs it before any manifest names it).
        let new_id = log.manifest.next_file_id;
        log.manifest.next_file_id = next_id(new_id)?;
        let fresh = ActiveWriter::create(
            &self.dir,
            new_id,
            log.next_seq,
            self.opts.segment_size,
            true,
        )
        .at(crate::log::segment_tmp_path(&self.dir, new_id))?;
        let fresh = if self.opts.sync.preallocates() {
            fresh
        } else {
            fresh.without_preallocation()
        };
        log.manifest.next_seq = log.next_seq;
        log.manifest.sealed.push(SealedSegment {
            id: sealed_id,
            len: segment.len(),
        });
        log.manifest.active = Some(fresh.id());
        let number = self.rotations_started.fetch_add(1, Ordering::AcqRel) + 1;
        log.pending.push(PendingSeal {
            sealed: Arc::clone(&log.active.shared),
            trimmed,
            successor: Arc::clone(&fresh.shared),
            number,
        });
        log.segstats.entry(fresh.id()).or_default();
        {
            let mut set = self.segments.write();
            set.sealed.insert(sealed_id, segment);
            set.active = Arc::clone(&fresh.shared);
        }
        log.active = fresh;
        self.send(Message::Rotated);
        Ok(())
    }

    fn check_not_poisoned(&self) -> Result<()> {
        if self.poisoned.load(Ordering::Acquire) {
            return Err(crate::error::Error::Poisoned);
        }
        Ok(())
    }

    /// Backpressure for a disk slower than the writers: once more than
    /// [`MAX_PENDING_ROTATIONS`] rotations wait for their commit, the writer commits them
    /// itself (after letting the log mutex go) instead of letting uncommitted files, each a
    /// segment of data at risk, pile up.
    ///
    /// # Errors
    /// As [`Inner::commit_rotations`].
    pub(crate) fn commit_if_far_behind(&self) -> Result<()> {
        // Closing commits through `sync_to`; after a (simulated) crash nothing may reach
        // the disk.
        if self.is_closed() {
            return Ok(());
        }
        let started = self.rotations_started.load(Ordering::Acquire);
        let durable = self.rotations_durable.load(Ordering::Acquire);
        if started.saturating_sub(durable) > MAX_PENDING_ROTATIONS {
            self.commit_rotations()?;
        }
        Ok(())
    }

    /// Makes every rotation so far durable: fsyncs, manifest, names. Any failure poisons the
    /// store.
    ///
    /// # Errors
    /// The failed fsync, manifest write or rename.
    pub(crate) fn commit_rotations(&self) -> Result<()> {
        let _manifest = self.manifest_lock.lock();
        // After a failure nothing more is made durable: a failed fsync may have dropped pages
        // that a second fsync would then report clean, and a manifest stored now could list
        // a sealed file missing data.
        self.check_not_poisoned()?;
        let (manifest, pending) = {
            let mut log = self.log.lock();
            if log.pending.is_empty() {
                return Ok(());
            }
            let mut manifest = log.manifest.clone();
            manifest.next_seq = log.next_seq;
            (manifest, std::mem::take(&mut log.pending))
        };
        self.store_listing(&manifest, &pending)
            .inspect_err(|_| self.poison())
    }

    /// Stores `manifest`, built from `log.manifest` (so listing every rotation so far) while
    /// `taken`, the rotations not stored yet, were taken from `log.pending`: refuses after a
    /// poison, fsyncs their files (a failure poisons), stores the manifest, then names their
    /// successors. Errors as [`Inner::store_manifest_unless_unchanged`]; the caller decides
    /// what a failure means for `taken`.
    fn store_listing(
        &self,
        manifest: &crate::log::manifest::Manifest,
        taken: &[PendingSeal],
    ) -> Result<()> {
        self.check_not_poisoned()?;
        sync_sealed(taken).inspect_err(|_| self.poison())?;
        self.store_manifest_unless_unchanged(manifest)?;
        self.rotations_stored(taken)
    }

    /// [`Inner::store_listing`] for a merge publish, a default-TTL change or a keyspace's
    /// creation, which hold the manifest lock but not the log mutex: if the manifest is not
    /// stored, `taken` goes back to `log.pending`.
    pub(crate) fn store_manifest_with(
        &self,
        manifest: &crate::log::manifest::Manifest,
        taken: Vec<PendingSeal>,
    ) -> Result<()> {
        self.store_listing(manifest, &taken)
            .inspect_err(|_| self.rotations_not_stored(&mut self.log.lock(), taken))
    }

    /// [`Inner::store_listing`] for a keyspace's deletion, which holds the manifest lock and
    /// the log mutex (see [`Inner::lock_for_manifest`]): the rotations not stored yet are
    /// fsynced under the log mutex, which is rare (`lock_for_manifest` committed them just
    /// before).
    pub(crate) fn replace_manifest(
        &self,
        log: &mut LogState,
        manifest: &crate::log::manifest::Manifest,
    ) -> Result<()> {
        let taken = std::mem::take(&mut log.pending);
        self.store_listing(manifest, &taken)
            .inspect_err(|_| self.rotations_not_stored(log, taken))
    }

    /// Puts back rotations whose manifest failed to be stored (the store stays writable
    /// unless the failure poisoned it: the manifest on disk is the old one).
    fn rotations_not_stored(&self, log: &mut LogState, mut taken: Vec<PendingSeal>) {
        taken.append(&mut log.pending);
        log.pending = taken;
    }

    /// Once a manifest listing `stored` is durable: names their successors `.seg` and asks
    /// for the sealed files' hints. A failed rename poisons (the store goes on under names
    /// opening would fix, so it stops instead).
    fn rotations_stored(&self, stored: &[PendingSeal]) -> Result<()> {
        for p in stored {
            let from = p.successor.current_path();
            p.successor
                .publish_name()
                .at(from)
                .inspect_err(|_| self.poison())?;
        }
        if let Some(last) = stored.last() {
            self.rotations_durable
                .fetch_max(last.number, Ordering::AcqRel);
        }
        for p in stored {
            self.send(Message::WriteHint(p.sealed.id));
        }
        Ok(())
    }
}

/// fsyncs every sealed file of `pending` (with metadata if its length was cut), and the last
/// successor (the others are sealed files of later rotations), whose header must be durable
/// before a manifest names it.
fn sync_sealed(pending: &[PendingSeal]) -> Result<()> {
    for p in pending {
        p.sealed.sync(!p.trimmed).at(p.sealed.current_path())?;
    }
    if let Some(last) = pending.last() {
        last.successor
            .sync(true)
            .at(last.successor.current_path())?;
    }
    Ok(())
}
