//! The snapshot writer: one snapshot directory written as dispatches
//! arrive, shared by every connection of one run. Per dispatch its tensor
//! file (an unnamed file made ahead, written, then linked into place,
//! [`super::spare_files`]; else a named temporary file renamed into place;
//! not synced: atomic against a crash of the collector or the application,
//! not against losing power) and one journal line. The manifest, which
//! grows with every dispatch, is rewritten (and synced) at most every
//! [`MANIFEST_INTERVAL`] (less often as it grows), when a process says
//! Goodbye, and when the writer is dropped; [`super::Snapshot::load`] adds
//! what only the journal holds.
//!
//! Owns the order of those steps and the writer's record of what is
//! stored (one dispatch's file is written by [`super::dispatch_file`],
//! without the writer's lock); never talks to a socket or an HSA runtime, and never judges
//! values.

use super::atomic::{TEMPORARY_PREFIX, remove_leftovers, write_replacing_with};
use super::dir_handle::{self, DirHandle};
use super::dispatch_file::{CapturedBuffer, DispatchSlot, TensorToStore, WrittenDispatch};
use super::error::{StoreError, io_err};
use super::journal::{self, Journal};
use super::manifest::{
    CollectorRecord, DispatchRecord, DispatchedKernel, MANIFEST_FILE, Manifest, RunRecord,
    SNAPSHOT_FORMAT, Unaccounted, code_object_file_name, connection_order, dispatch_file_name,
    host_build_file_name, now_ms,
};
use super::missing::{self, MissingRecord};
use super::output_dir::{self, OutputDir};
use super::parts;
use super::room::{self, Room};
use super::spare_files::SpareFiles;
use super::writer_lock;
use ditto_protocol::{Dispatch, Goodbye, Hello};
use std::collections::HashSet;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How stale `manifest.json` may grow while dispatches arrive (the journal
/// always has them all).
pub const MANIFEST_INTERVAL: Duration = Duration::from_secs(1);
/// The manifest grows with every dispatch, and so does the time to rewrite
/// it: while dispatches arrive it is rewritten only once this many times
/// its last rewrite's duration has passed (at most 1/20 of the collector's
/// time goes to it, however long the capture), and never more often than
/// [`MANIFEST_INTERVAL`].
const MANIFEST_TIME_FACTOR: u32 = 20;

/// Writes one snapshot directory as dispatches arrive. Shared by every
/// connection of one run behind a mutex, which
/// [`SnapshotWriter::add_dispatch_shared`] holds only to reserve a
/// dispatch's file and to record it.
#[derive(Debug)]
pub struct SnapshotWriter {
    /// The directory, opened once: every file goes through it.
    dir: Arc<DirHandle>,
    /// Why the directory is no longer the one at its path, once found
    /// ([`DirHandle::displaced`]): nothing more is written.
    displaced: Option<String>,
    /// Blocks kept for the last manifest ([`room`]).
    room: Room,
    /// Why nothing more is stored, once a write found the file system
    /// full: each rank's dispatches from its first one refused on are
    /// recorded as not stored (its run's `unaccounted`), none of them
    /// written, and the manifest says so.
    full: Option<String>,
    /// About how large `manifest.json` would be now: its size when last
    /// written, and twice each journal line since (the manifest is the
    /// same records, indented).
    manifest_estimate: u64,
    /// Held while processes write here (from creation, and from each
    /// [`Self::add_run`] after [`Self::release_idle_resources`]): a second
    /// writer of `dir` is refused meanwhile.
    lock: Option<writer_lock::WriterLock>,
    manifest: Manifest,
    /// Whether an older snapshot was found in `dir` and replaced.
    replaced_previous: bool,
    journal: Journal,
    /// Unnamed tensor files made ahead; `None` where the file system has
    /// none (tensor files then go through a named temporary file).
    spares: Option<SpareFiles>,
    /// Whether spares work here: released ones ([`Self::release_spares`])
    /// start again at the next tensor file.
    spares_wanted: bool,
    /// (rank, index) of every stored dispatch.
    stored: HashSet<(u32, u64)>,
    /// (rank, index) of the dispatches whose tensor files are being
    /// written now ([`SnapshotWriter::add_dispatch_shared`]).
    writing: HashSet<(u32, u64)>,
    /// When `manifest.json` was last written, and whether it lacks
    /// dispatches the journal has.
    manifest_written: Instant,
    /// How long that last write took.
    manifest_write_time: Duration,
    manifest_stale: bool,
}

impl SnapshotWriter {
    /// Starts a snapshot in `dir` (created if missing). An older ditto
    /// snapshot there is replaced (its manifest and dispatch files removed);
    /// any other non-empty directory is refused.
    ///
    /// A collector killed while writing leaves `.ditto-tmp-*` files (never
    /// renamed into place, so never read: readers go by the manifest and
    /// journal only). They are removed here, when the directory is next
    /// written; a directory holding nothing but such leftovers and a
    /// journal (killed before its first manifest) counts as empty.
    pub fn create(dir: &Path, kernel_query: &str) -> Result<Self, StoreError> {
        Self::create_as(dir, kernel_query, None)
    }

    /// [`Self::create`] of a node's part of a run, by the collector
    /// `collector` running in job `job`, both recorded in its manifest. A
    /// part already there is replaced only when `parts::check_replacing`
    /// finds it of an earlier capture (or of this collector), never when
    /// another collector of this run wrote it.
    pub fn create_part(
        dir: &Path,
        kernel_query: &str,
        collector: CollectorRecord,
        job: Option<String>,
    ) -> Result<Self, StoreError> {
        Self::create_as(dir, kernel_query, Some((collector, job)))
    }

    fn create_as(
        dir: &Path,
        kernel_query: &str,
        part: Option<(CollectorRecord, Option<String>)>,
    ) -> Result<Self, StoreError> {
        if output_dir::check(dir)? == OutputDir::Missing {
            // 0755 whatever the umask: never writable by other users.
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(dir)
                .map_err(io_err(dir))?;
        }
        // From here on, the directory opened is the one written, whatever
        // is later put at its path; checked again as opened (whoever made
        // it between the check and here must be us).
        let handle = Arc::new(output_dir::open(dir)?);
        let place = output_dir::check_opened(&handle)?;
        // Before anything in it is removed or written.
        let lock = writer_lock::acquire(&handle)?;
        let mut replaced_previous = false;
        if place == OutputDir::Leftovers {
            remove_leftovers(&handle)?;
        }
        if place == OutputDir::Snapshot {
            if let Some((collector, job)) = &part {
                // Read under the lock: no other writer changes it meanwhile.
                let existing = parts::written_part(&handle)?;
                parts::check_replacing(dir, &existing, collector, job.as_deref())?;
            }
            replaced_previous = true;
            // Dispatch files first, the manifest last: an interrupted
            // replacement still leaves a directory recognised as a snapshot.
            for name in handle.names().map_err(io_err(dir))? {
                let name = name.to_string_lossy();
                if (name.starts_with("dispatch-") && name.ends_with(".safetensors"))
                    || (name.starts_with("code-object-") && name.ends_with(".co"))
                    || (name.starts_with("host-build-") && name.ends_with(".so"))
                    || name == journal::JOURNAL_FILE
                    || name.starts_with(TEMPORARY_PREFIX)
                {
                    handle
                        .remove_if_there(&name)
                        .map_err(io_err(&handle.shown(&name)))?;
                }
            }
            handle
                .remove(MANIFEST_FILE)
                .map_err(io_err(&handle.shown(MANIFEST_FILE)))?;
        }
        let mut writer = SnapshotWriter {
            lock: Some(lock),
            journal: Journal::create(&handle)?,
            spares: SpareFiles::start(&handle),
            room: Room::keep(&handle),
            full: None,
            manifest_estimate: 0,
            spares_wanted: true,
            stored: HashSet::new(),
            writing: HashSet::new(),
            manifest_written: Instant::now(),
            manifest_write_time: Duration::ZERO,
            manifest_stale: false,
            dir: handle,
            displaced: None,
            manifest: Manifest {
                format: SNAPSHOT_FORMAT,
                ditto_version: env!("CARGO_PKG_VERSION").to_string(),
                kernel_query: kernel_query.to_string(),
                runs: Vec::new(),
                kernel: None,
                dispatches: Vec::new(),
                dispatched_kernels: Vec::new(),
                missing: Vec::new(),
                job: None,
                collector: None,
            },
            replaced_previous,
        };
        if let Some((collector, job)) = part {
            writer.manifest.collector = Some(collector);
            writer.manifest.job = job;
        }
        writer.write_manifest()?;
        Ok(writer)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    pub fn replaced_previous(&self) -> bool {
        self.replaced_previous
    }

    /// Records the job of the collector writing this snapshot, a node's
    /// part of a run ([`Manifest::job`]); written with the next manifest.
    pub fn set_job(&mut self, job: Option<String>) {
        self.manifest.job = job;
        self.manifest_stale = true;
    }

    /// Records a connecting process; returns its rank: the launcher's
    /// (refused when another process of this snapshot already has it), else
    /// the lowest one not taken.
    pub fn add_run(&mut self, hello: &Hello) -> Result<u32, StoreError> {
        self.hold_lock()?;
        let taken = |r: u32| self.manifest.runs.iter().any(|run| run.rank == r);
        let (rank, rank_source) = match hello.rank {
            Some(r) if taken(r) => {
                let other = self
                    .manifest
                    .runs
                    .iter()
                    .find(|run| run.rank == r)
                    .expect("taken");
                return Err(StoreError::Invalid(format!(
                    "pid {} says it is rank {r}, but pid {} (run '{}') already is: give each \
                     process its own OMPI_COMM_WORLD_RANK/PMI_RANK/SLURM_PROCID/RANK, or a different \
                     run name (--run)",
                    hello.pid, other.pid, other.run
                )));
            }
            Some(r) => (r, "launcher".to_string()),
            None => (
                (0..).find(|r| !taken(*r)).expect("a free rank"),
                connection_order(),
            ),
        };
        self.manifest.runs.push(RunRecord {
            rank,
            rank_source,
            pid: hello.pid,
            run: hello.run.clone(),
            command_line: hello.command_line.clone(),
            working_directory: hello.working_directory.clone(),
            unaccounted: None,
            node: None,
            host_build: None,
        });
        self.write_manifest_unless_full()?;
        Ok(rank)
    }

    /// Records that rank `rank`'s connection ended without Goodbye: its
    /// dispatches from `from_index` on are of unknown fate.
    pub fn set_unaccounted(
        &mut self,
        rank: u32,
        from_index: u64,
        reason: &str,
    ) -> Result<(), StoreError> {
        self.mark_unaccounted(rank, from_index, reason);
        self.hold_lock()?;
        self.write_manifest_unless_full()
    }

    /// Rank `rank`'s dispatches from `from_index` on are of unknown fate;
    /// an earlier index already recorded stands.
    fn mark_unaccounted(&mut self, rank: u32, from_index: u64, reason: &str) {
        if let Some(run) = self.manifest.runs.iter_mut().find(|r| r.rank == rank)
            && run
                .unaccounted
                .as_ref()
                .is_none_or(|u| u.from_index > from_index)
        {
            run.unaccounted = Some(Unaccounted {
                from_index,
                reason: reason.to_string(),
            });
            self.manifest_stale = true;
        }
    }

    /// After a failed write of dispatch `index` of `rank`: when the file
    /// system is full (now, or since an earlier write), nothing more is
    /// stored; the room kept is given back and the manifest says from
    /// which dispatch on each rank's were not stored.
    fn after_failed_write(&mut self, rank: u32, index: u64, e: &StoreError) {
        if self.full.is_none() && room::is_full(e) {
            self.enter_full(e);
            self.record_not_stored(rank, index);
            let _ = self.write_manifest();
        } else if self.full.is_some() {
            self.record_not_stored(rank, index);
        }
    }

    /// The file system is full (`e` said so): nothing more is stored, and
    /// the room kept is given back for the manifest.
    fn enter_full(&mut self, e: &StoreError) {
        self.full = Some(format!(
            "not stored: the file system of {} is full ({e}); free space or choose another --out",
            self.dir.path().display()
        ));
        self.room.give_back();
    }

    /// Dispatch `index` of `rank` and all after it are not stored (the
    /// file system is full).
    fn record_not_stored(&mut self, rank: u32, index: u64) {
        if let Some(full) = self.full.clone() {
            self.mark_unaccounted(rank, index, &full);
        }
    }

    /// Why dispatches are no longer stored, once the file system filled.
    pub fn full(&self) -> Option<&str> {
        self.full.as_deref()
    }

    /// Stores a code object a replay capture refers to as
    /// `code-object-<digest>.co` ([`code_object_file_name`]), read from
    /// `bytes`, unless the snapshot has it already (one file per digest,
    /// whatever the number of processes that loaded it). The caller checked
    /// that `digest` is the bytes' SHA-256.
    pub fn add_code_object(
        &self,
        digest: &str,
        bytes: &mut dyn std::io::Read,
    ) -> Result<PathBuf, StoreError> {
        let name = code_object_file_name(digest);
        let path = self.dir.shown(&name);
        if !dir_handle::is_plain_name(&name) {
            return Err(StoreError::Invalid(format!(
                "code object digest {digest:?} is not a plain file name"
            )));
        }
        if self.dir.contains(&name).map_err(io_err(&path))? {
            return Ok(path);
        }
        write_replacing_with(&self.dir, &name, false, |w| {
            std::io::copy(bytes, w).map_err(io_err(&path))?;
            Ok(())
        })?;
        Ok(path)
    }

    /// Stores rank `rank`'s host build as `host-build-<digest>.so`
    /// ([`host_build_file_name`]), read from `bytes` (unless the snapshot
    /// has that file already), and names it in the rank's run record. The
    /// caller checked that `digest` is the bytes' SHA-256.
    pub fn add_host_build(
        &mut self,
        rank: u32,
        digest: &str,
        bytes: &mut dyn std::io::Read,
    ) -> Result<PathBuf, StoreError> {
        let name = host_build_file_name(digest);
        let path = self.dir.shown(&name);
        if !dir_handle::is_plain_name(&name) {
            return Err(StoreError::Invalid(format!(
                "host build digest {digest:?} is not a plain file name"
            )));
        }
        if !self.dir.contains(&name).map_err(io_err(&path))? {
            write_replacing_with(&self.dir, &name, false, |w| {
                std::io::copy(bytes, w).map_err(io_err(&path))?;
                Ok(())
            })?;
        }
        if let Some(run) = self.manifest.runs.iter_mut().find(|r| r.rank == rank) {
            run.host_build = Some(name);
            self.manifest_stale = true;
        }
        self.hold_lock()?;
        self.write_manifest_unless_full()?;
        Ok(path)
    }

    /// Writes the dispatch's tensor file, then the manifest naming it.
    pub fn add_dispatch(
        &mut self,
        rank: u32,
        pid: u32,
        dispatch: &Dispatch,
        captured: &[CapturedBuffer],
    ) -> Result<PathBuf, StoreError> {
        let mut tensors: Vec<TensorToStore> =
            captured.iter().map(CapturedBuffer::to_store).collect();
        self.add_dispatch_from(rank, pid, dispatch, &mut tensors)
    }

    /// [`Self::add_dispatch`] of tensors in memory or streamed into the
    /// file as it is written. A streamed source that refuses stores nothing
    /// (no file appears, the manifest and journal do not name the dispatch):
    /// [`StoreError::Refused`] with its message.
    pub fn add_dispatch_from(
        &mut self,
        rank: u32,
        pid: u32,
        dispatch: &Dispatch,
        tensors: &mut [TensorToStore],
    ) -> Result<PathBuf, StoreError> {
        let slot = self.reserve(rank, dispatch.index)?;
        match slot.write(pid, dispatch, tensors) {
            Ok(written) => self.record(written),
            Err(e) => {
                self.abandon(rank, dispatch.index);
                self.after_failed_write(rank, dispatch.index, &e);
                Err(e)
            }
        }
    }

    /// [`Self::add_dispatch_from`] into the writer that the connections of
    /// one run share, holding its lock only to reserve the dispatch's file
    /// name and to record the dispatch (journal line, manifest): the tensor
    /// file itself, a large buffer streamed from its attachment included,
    /// is written without it, so the dispatches of different connections
    /// are written at the same time. Returns once the dispatch is recorded
    /// (or refused: then nothing of it is stored).
    pub fn add_dispatch_shared(
        writer: &Mutex<SnapshotWriter>,
        rank: u32,
        pid: u32,
        dispatch: &Dispatch,
        tensors: &mut [TensorToStore],
    ) -> Result<PathBuf, StoreError> {
        let lock = || writer.lock().unwrap_or_else(|e| e.into_inner());
        let slot = lock().reserve(rank, dispatch.index)?;
        // Gives the reservation back on every path but a recorded one (a
        // panic while streaming included).
        let mut reservation = Reservation {
            writer,
            key: Some((rank, dispatch.index)),
        };
        let written = match slot.write(pid, dispatch, tensors) {
            Ok(written) => written,
            Err(e) => {
                lock().after_failed_write(rank, dispatch.index, &e);
                return Err(e);
            }
        };
        reservation.key = None;
        lock().record(written)
    }

    /// Reserves the tensor file of dispatch `index` of `rank`: refused when
    /// that dispatch is stored or being written already. File names are
    /// (rank, index) and a rank is one process's in a snapshot
    /// ([`Self::add_run`]), so two writers at once never share a name.
    fn reserve(&mut self, rank: u32, index: u64) -> Result<DispatchSlot, StoreError> {
        if self.stored.contains(&(rank, index)) || self.writing.contains(&(rank, index)) {
            return Err(StoreError::Invalid(format!(
                "dispatch {index} of rank {rank} was already stored in {}",
                self.dir.path().display()
            )));
        }
        // What the last manifest write found (the path is looked at there,
        // at most once a second, not once per dispatch: what is written
        // goes through the directory's handle either way).
        self.stop_if_displaced()?;
        if let Some(full) = self.full.clone() {
            self.record_not_stored(rank, index);
            return Err(StoreError::Invalid(format!(
                "dispatch {index} of rank {rank}: {full}"
            )));
        }
        self.room.resume();
        if self.spares.is_none() && self.spares_wanted {
            self.spares = SpareFiles::start(&self.dir);
        }
        self.spares_wanted = self.spares.is_some();
        let spare = match &self.spares {
            Some(spares) => Some(spares.take().map_err(io_err(self.dir.path()))?),
            None => None,
        };
        self.writing.insert((rank, index));
        let file = dispatch_file_name(rank, index);
        Ok(DispatchSlot {
            rank,
            path: self.dir.shown(&file),
            dir: self.dir.clone(),
            file,
            spare,
        })
    }

    /// Gives back a reservation whose file was not written.
    fn abandon(&mut self, rank: u32, index: u64) {
        self.writing.remove(&(rank, index));
    }

    /// Records a dispatch whose tensor file is in place: one journal line
    /// (the file is removed again when that fails: the dispatch is not
    /// stored), then the manifest when it is due.
    fn record(&mut self, written: WrittenDispatch) -> Result<PathBuf, StoreError> {
        let WrittenDispatch {
            record,
            path,
            spares_failed,
        } = written;
        let key = (record.rank, record.index);
        self.writing.remove(&key);
        if spares_failed {
            self.spares = None;
            self.spares_wanted = false;
        }
        let line = match self.journal.append(&record) {
            Ok(line) => line,
            Err(e) => {
                let _ = self.dir.remove(&record.file);
                self.after_failed_write(record.rank, record.index, &e);
                return Err(e);
            }
        };
        self.manifest_estimate += 2 * line as u64;
        // Room for the manifest naming this dispatch; where there is none
        // this dispatch is stored, the next ones are not.
        if let Err(e) = self.room.grow_for(self.manifest_estimate) {
            let e = io_err(&self.dir.shown(&room::file_name()))(e);
            self.after_failed_write(record.rank, record.index.saturating_add(1), &e);
        }
        if self.manifest.kernel.is_none() {
            self.manifest.kernel = record.kernel.clone();
        }
        self.manifest.dispatches.push(record);
        self.stored.insert(key);
        self.manifest_stale = true;
        if self.manifest_written.elapsed()
            >= MANIFEST_INTERVAL.max(self.manifest_write_time * MANIFEST_TIME_FACTOR)
        {
            // The dispatch is stored (its file and journal line are in
            // place) whether or not the manifest could be rewritten now.
            if let Err(e) = self.write_manifest() {
                self.after_failed_write(key.0, key.1.saturating_add(1), &e);
            }
        }
        Ok(path)
    }

    /// Closes the tensor files made ahead (ending their thread) and the
    /// journal, for while no process writes here: a collector serving many
    /// runs would otherwise keep a thread and nine fds per run. The next
    /// dispatch starts and reopens them. With `release_lock` (a collector
    /// of many snapshot directories) the directory's lock goes too, and the
    /// next run, or the last manifest write, takes it again.
    pub fn release_idle_resources(&mut self, release_lock: bool) {
        self.spares = None;
        self.journal.close();
        self.room.pause();
        if release_lock {
            self.lock = None;
            // The next use opens it again, if it is still the same one.
            self.dir.close();
        }
    }

    /// Records dispatches (or a buffer) of rank `rank` not captured. A
    /// stored dispatch it covers is dropped, its file removed ([`missing`]);
    /// returns the records of the dispatches dropped.
    pub fn add_missing(
        &mut self,
        record: MissingRecord,
    ) -> Result<Vec<DispatchRecord>, StoreError> {
        if self.full.is_some() {
            // What the full file system's record covers is said there; the
            // rest is kept in memory for the last manifest (the journal
            // cannot grow).
            let covered = self.manifest.runs.iter().any(|r| {
                r.rank == record.rank
                    && r.unaccounted
                        .as_ref()
                        .is_some_and(|u| record.index >= u.from_index)
            });
            if covered {
                return Ok(Vec::new());
            }
        } else {
            match self.journal.append_missing(&record) {
                Ok(line) => self.manifest_estimate += 2 * line as u64,
                Err(e) => {
                    self.after_failed_write(record.rank, record.index, &e);
                    if self.full.is_none() {
                        return Err(e);
                    }
                }
            }
        }
        let dropped = missing::merge(&mut self.manifest, record);
        for dropped in &dropped {
            self.stored.remove(&(dropped.rank, dropped.index));
            self.dir
                .remove_if_there(&dropped.file)
                .map_err(io_err(&self.dir.shown(&dropped.file)))?;
        }
        self.manifest_stale = true;
        if self.full.is_none() && self.manifest_written.elapsed() >= MANIFEST_INTERVAL {
            self.write_manifest()?;
        }
        Ok(dropped)
    }

    /// Writes `manifest.json` whole if it lacks stored dispatches.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        if self.manifest_stale {
            self.hold_lock()?;
            self.write_manifest()?;
        }
        Ok(())
    }

    /// The end of a run: an error when the directory is no longer the one
    /// at its path (the snapshot is not committed there), else the whole
    /// manifest written if it lacks anything.
    pub fn commit(&mut self) -> Result<(), StoreError> {
        self.check_in_place()?;
        self.flush()?;
        self.room.give_back();
        Ok(())
    }

    /// Whether the directory written is still the one at its path; once it
    /// is not, it never is again and nothing more is written.
    fn check_in_place(&mut self) -> Result<(), StoreError> {
        if self.displaced.is_none() {
            self.displaced = self.dir.displaced();
        }
        self.stop_if_displaced()
    }

    /// An error once the directory was found displaced.
    fn stop_if_displaced(&self) -> Result<(), StoreError> {
        match &self.displaced {
            None => Ok(()),
            Some(what) => Err(StoreError::Displaced {
                path: self.dir.path().to_path_buf(),
                what: what.clone(),
            }),
        }
    }

    /// Takes the directory's lock again if an idle period gave it up; a
    /// writer that took it meanwhile makes this one stop (Busy).
    fn hold_lock(&mut self) -> Result<(), StoreError> {
        if self.lock.is_none() {
            self.lock = Some(writer_lock::acquire(&self.dir)?);
        }
        Ok(())
    }

    /// Adds a process's dispatched kernels (counts summed over processes).
    pub fn add_goodbye(&mut self, goodbye: &Goodbye) -> Result<(), StoreError> {
        for (name, count) in &goodbye.dispatched {
            match self
                .manifest
                .dispatched_kernels
                .iter_mut()
                .find(|k| k.mangled == name.mangled)
            {
                Some(k) => k.count += count,
                None => self.manifest.dispatched_kernels.push(DispatchedKernel {
                    mangled: name.mangled.clone(),
                    demangled: name.demangled.clone(),
                    count: *count,
                }),
            }
        }
        self.write_manifest_unless_full()
    }

    /// [`Self::write_manifest`], or once the file system is full only
    /// marked for the last write ([`Self::commit`]).
    fn write_manifest_unless_full(&mut self) -> Result<(), StoreError> {
        if self.full.is_some() {
            self.manifest_stale = true;
            return Ok(());
        }
        self.write_manifest()
    }

    /// Writes `manifest.json` whole. A full file system found here is
    /// noted ([`Self::enter_full`]) and the write tried once more in the
    /// room given back.
    ///
    /// Once full, a manifest that does not fit beside the one it replaces
    /// replaces it by removal, then write: the room kept fits one manifest,
    /// and the last one must say all the snapshot holds. (Killed between
    /// the two, the snapshot has its journal and no manifest.)
    fn write_manifest(&mut self) -> Result<(), StoreError> {
        match self.write_manifest_once() {
            Err(e) if self.full.is_none() && room::is_full(&e) => {
                self.enter_full(&e);
                self.write_manifest()
            }
            Err(e) if self.full.is_some() && room::is_full(&e) => {
                self.dir
                    .remove_if_there(MANIFEST_FILE)
                    .map_err(io_err(&self.dir.shown(MANIFEST_FILE)))?;
                self.write_manifest_once()
            }
            r => r,
        }
    }

    fn write_manifest_once(&mut self) -> Result<(), StoreError> {
        self.check_in_place()?;
        let started = Instant::now();
        let manifest = &self.manifest;
        let path = self.dir.shown(MANIFEST_FILE);
        write_replacing_with(&self.dir, MANIFEST_FILE, true, |w| {
            serde_json::to_writer_pretty(&mut *w, manifest)
                // An I/O error is given back as it came (ENOSPC stays ENOSPC).
                .map_err(std::io::Error::from)
                .and_then(|()| w.write_all(b"\n"))
                .map_err(io_err(&path))
        })?;
        self.manifest_written = Instant::now();
        self.manifest_write_time = self.manifest_written - started;
        self.manifest_stale = false;
        if self.full.is_none() {
            let size = self.dir.size_of(MANIFEST_FILE).ok().flatten().unwrap_or(0);
            self.manifest_estimate = size;
            self.room
                .grow_for(size)
                .map_err(io_err(&self.dir.shown(&room::file_name())))?;
        }
        Ok(())
    }
}

/// A reservation of [`SnapshotWriter::add_dispatch_shared`], given back
/// when dropped still holding its key.
struct Reservation<'a> {
    writer: &'a Mutex<SnapshotWriter>,
    key: Option<(u32, u64)>,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if let Some((rank, index)) = self.key.take() {
            self.writer
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .abandon(rank, index);
        }
    }
}

impl Drop for SnapshotWriter {
    /// The whole manifest at the end (the journal has it all anyway); a
    /// part's records when its collector stopped.
    fn drop(&mut self) {
        if let Some(collector) = &mut self.manifest.collector {
            collector.ended_ms = Some(now_ms());
            self.manifest_stale = true;
        }
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests;
