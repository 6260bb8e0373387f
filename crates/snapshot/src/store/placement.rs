//! Putting a run of bytes (a large tensor) into a tensor file as fast as
//! the machine allows: [`TensorOut`] is where a tensor file is written; a
//! file places a run of at least [`PLACE_FROM_BYTES`] with several threads
//! through a shared mapping of the file ([`place`]); everything else is one
//! `write` after the source's pages are mapped ([`populate_for_reading`]).
//!
//! Why: a captured dispatch is held until its file is written (a dispatch
//! acknowledged is a dispatch stored, issue 6), and one thread writing
//! 1 GiB into fresh page-cache pages takes 3 to 15 times a memcpy of it
//! (issue 7, item 3). Buffered writes to one file are serialised by the
//! file's lock; page faults of a shared mapping are not.
//!
//! Owns no file names and no layout: the caller's file and position.

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::sync::Mutex;

/// Runs of at least this many bytes are placed with several threads.
pub(super) const PLACE_FROM_BYTES: usize = 64 << 20;

/// At most this many threads place one run. (On a 16-CPU machine, 16
/// threads took a 1 GiB capture from 0.136 s to 0.118 s after the kernel's
/// end, against 8; scripts/bench item 3.)
const MAX_THREADS: usize = 16;

/// Each thread places at least this many bytes.
const MIN_SHARE: usize = 16 << 20;

const PAGE: usize = 4096;
const HUGE_PAGE: usize = 2 << 20;

/// Why a source refused to give a run's bytes: its own error, kept whole
/// (the collector's capture error, a fingerprint mismatch or a failed
/// copy); nothing of the run is kept.
pub type Refusal = Box<dyn std::error::Error + Send + Sync>;

/// What [`TensorOut::fill_run`] did.
#[derive(Debug)]
pub enum Filled {
    /// The run was filled and the position moved past it.
    Done,
    /// The output cannot be filled in place: nothing happened, write it.
    NotMapped,
    /// The fill refused (its error); the position is unchanged.
    Refused(Refusal),
}

/// Where a tensor file's bytes go: a writer that may put a long run of
/// bytes by other means than `write` (a [`File`] does, `place`).
pub trait TensorOut: Write {
    /// Writes all of `bytes`, as `write_all` does, at the current position.
    fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        populate_for_reading(bytes);
        self.write_all(bytes)
    }

    /// Hands the next `len` bytes of the output to `fill` as one writable
    /// slice (a file's shared mapping), so that a source can copy into it
    /// directly, with as many threads as it likes. [`Filled::NotMapped`]
    /// where the output cannot (by default).
    fn fill_run(
        &mut self,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Result<(), Refusal>,
    ) -> std::io::Result<Filled> {
        let _ = (len, fill);
        Ok(Filled::NotMapped)
    }
}

impl TensorOut for File {
    fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let threads = threads_for(bytes.len());
        if threads >= 2 && place(self, bytes, threads)? {
            return Ok(());
        }
        populate_for_reading(bytes);
        self.write_all(bytes)
    }

    fn fill_run(
        &mut self,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Result<(), Refusal>,
    ) -> std::io::Result<Filled> {
        fill_mapped(self, len, fill)
    }
}

/// Any writer, putting runs with `write` ([`TensorOut`]'s default).
pub(super) struct Plain<'w>(pub &'w mut dyn Write);

impl Write for Plain<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl TensorOut for Plain<'_> {}

/// How many threads place a run of `len` bytes here: one below
/// [`PLACE_FROM_BYTES`], else as many as there are CPUs, at most
/// [`MAX_THREADS`] and one per [`MIN_SHARE`] bytes.
fn threads_for(len: usize) -> usize {
    if len < PLACE_FROM_BYTES {
        return 1;
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    cpus.min(MAX_THREADS).min(len / MIN_SHARE).max(1)
}

/// Places `bytes` at `file`'s position with `threads` threads and moves
/// the position past them, through [`fill_mapped`]. `Ok(false)` where the
/// file cannot be filled in place: then nothing was copied, the position
/// is unchanged and the caller writes.
fn place(file: &mut File, bytes: &[u8], threads: usize) -> std::io::Result<bool> {
    let mut copy = |dst: &mut [u8]| {
        copy_in_shares(dst, bytes, threads);
        Ok(())
    };
    Ok(match fill_mapped(file, bytes.len(), &mut copy)? {
        Filled::Done => true,
        Filled::NotMapped => false,
        Filled::Refused(reason) => unreachable!("a host copy never refuses: {reason}"),
    })
}

/// Fills `len` bytes at `file`'s position through a shared mapping: on a
/// file system where that is safe ([`faults_cannot_fail_after_fallocate`]),
/// the range is allocated with `fallocate` (the file grows to cover it; a
/// full disk is an error here, never a fault later), mapped shared (asking
/// for huge pages, so the page cache holds it in folios of up to 2 MiB,
/// which readers map whole), handed to `fill`, and unmapped; the position
/// moves past it when `fill` succeeded. [`Filled::NotMapped`] where the
/// file system cannot allocate ahead or the range cannot be mapped: then
/// nothing was done; so also on other file systems.
fn fill_mapped(
    file: &mut File,
    len: usize,
    fill: &mut dyn FnMut(&mut [u8]) -> Result<(), Refusal>,
) -> std::io::Result<Filled> {
    if len == 0 {
        return Ok(match fill(&mut []) {
            Ok(()) => Filled::Done,
            Err(reason) => Filled::Refused(reason),
        });
    }
    let fd = file.as_raw_fd();
    if !faults_cannot_fail_after_fallocate(fd) {
        return Ok(Filled::NotMapped);
    }
    let pos = file.stream_position()?;
    // On tmpfs this allocates and zeroes every page on one thread, the
    // costliest step there: on the H200 machine 1 GiB took 120 ms, then 58
    // ms to fill with 16 threads. Populating the pages with 16 threads
    // instead (MADV_POPULATE_WRITE) took 200 ms, mapping lock contention:
    // not better, so not done.
    // SAFETY: fallocate(2) on an open descriptor; it changes no byte
    // already written (mode 0 allocates, and grows the size over the range).
    if unsafe { libc::fallocate(fd, 0, pos as libc::off_t, len as libc::off_t) } != 0 {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EOPNOTSUPP | libc::ENOSYS) => Ok(Filled::NotMapped),
            _ => Err(e),
        };
    }
    let lead = pos as usize % PAGE;
    let map_len = lead + len;
    // SAFETY: a fresh shared mapping of a range of the file that fallocate
    // just made part of it; used only within `map_len` and unmapped below.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            (pos as usize - lead) as libc::off_t,
        )
    };
    if map == libc::MAP_FAILED {
        return Ok(Filled::NotMapped);
    }
    let base = map as usize;
    let (huge_start, huge_end) = (
        base.next_multiple_of(HUGE_PAGE),
        (base + map_len) & !(HUGE_PAGE - 1),
    );
    if huge_end > huge_start {
        // SAFETY: advice on whole pages of the mapping; no contents change.
        unsafe {
            libc::madvise(
                huge_start as *mut libc::c_void,
                huge_end - huge_start,
                libc::MADV_HUGEPAGE,
            )
        };
    }
    // SAFETY: `len` writable bytes of the mapping, after the `lead` bytes
    // that precede the position; nothing else refers to them.
    let dst = unsafe { std::slice::from_raw_parts_mut((base + lead) as *mut u8, len) };
    let filled = fill(dst);
    // SAFETY: the mapping made above, unmapped once; `dst` is not used after.
    unsafe { libc::munmap(map, map_len) };
    match filled {
        Ok(()) => {
            file.seek(SeekFrom::Start(pos + len as u64))?;
            Ok(Filled::Done)
        }
        Err(reason) => Ok(Filled::Refused(reason)),
    }
}

/// Whether the file system of `fd` backs every page of a range once
/// `fallocate` has allocated it, so that writing through a mapping cannot
/// fault with SIGBUS for want of space: ext2/3/4, XFS and tmpfs. Others
/// (copy-on-write ones such as btrfs reserve space again at each page
/// fault) are written with `write`, whose failures are errors.
fn faults_cannot_fail_after_fallocate(fd: std::os::fd::RawFd) -> bool {
    let mut fs = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: fstatfs(2) fills the struct for an open descriptor.
    if unsafe { libc::fstatfs(fd, fs.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: filled by the successful call above.
    let kind = unsafe { fs.assume_init() }.f_type as u64;
    [
        libc::EXT4_SUPER_MAGIC as u64,
        libc::XFS_SUPER_MAGIC as u64,
        libc::TMPFS_MAGIC as u64,
    ]
    .contains(&kind)
}

/// Copies `src` into `dst` (same length) with `threads` threads, each a
/// contiguous share ending on a 2 MiB boundary of `dst`'s address (so no
/// two threads fault the same huge page). This thread copies too: every
/// share not yet taken by a thread, so a thread that cannot be started
/// costs only speed.
fn copy_in_shares(dst: &mut [u8], src: &[u8], threads: usize) {
    let cuts = share_cuts(dst.as_ptr() as usize, dst.len(), threads);
    let mut shares = Vec::with_capacity(cuts.len() - 1);
    let (mut rest_dst, mut rest_src) = (dst, src);
    for w in cuts.windows(2) {
        let (d, dr) = rest_dst.split_at_mut(w[1] - w[0]);
        let (s, sr) = rest_src.split_at(w[1] - w[0]);
        (rest_dst, rest_src) = (dr, sr);
        shares.push(Mutex::new(Some((d, s))));
    }
    let copy_share = |share: &Mutex<Option<(&mut [u8], &[u8])>>| {
        let taken = share.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some((d, s)) = taken {
            d.copy_from_slice(s);
        }
    };
    std::thread::scope(|scope| {
        for k in 1..shares.len() {
            let (shares, copy_share) = (&shares, &copy_share);
            // A thread that does not start leaves its share to the loop below.
            let _ = std::thread::Builder::new()
                .name("ditto-place".into())
                .spawn_scoped(scope, move || copy_share(&shares[k]));
        }
        for share in &shares {
            copy_share(share);
        }
    });
}

/// Where `threads` contiguous shares of the `len` bytes at address `addr`
/// begin and end (offsets, from 0 to `len`, increasing): about equal, each
/// cut on a 2 MiB boundary of the address, so that no two threads fault
/// the same huge page. Fewer shares than threads where the run is short.
pub fn share_cuts(addr: usize, len: usize, threads: usize) -> Vec<usize> {
    let share = len.div_ceil(threads.max(1));
    let mut cuts = vec![0];
    for k in 1..threads {
        let cut = ((addr + k * share).next_multiple_of(HUGE_PAGE) - addr).min(len);
        if cut > *cuts.last().expect("starts at 0") {
            cuts.push(cut);
        }
    }
    cuts.push(len);
    if len > 0 {
        cuts.dedup();
    }
    cuts
}

/// Asks the kernel to map every page of `bytes` (a fresh attachment has
/// none mapped) in one call, before they are written with `write`. Page
/// by page, the write would not only fault each one: Linux's buffered
/// write copies from user memory without taking faults, and after each
/// short copy it halves the page-cache folio size it writes for the rest
/// of the call, so the file would end up in 4 KiB pages. Written from
/// mapped pages it gets folios of up to 2 MiB, which a reader's mapping
/// maps whole (`ditto compare` of two 1 GiB snapshots read them twice as
/// fast, issue 7). A refusal (a kernel before 5.14) changes nothing but
/// speed.
fn populate_for_reading(bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    let start = (bytes.as_ptr() as usize) & !(PAGE - 1);
    let end = bytes.as_ptr() as usize + bytes.len();
    // SAFETY: advice on whole pages of a live mapping that covers `bytes`
    // (mappings are page-aligned); populating for reading changes no
    // contents.
    unsafe {
        libc::madvise(
            start as *mut libc::c_void,
            end - start,
            libc::MADV_POPULATE_READ,
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// The resident size /proc/self/smaps gives the mapping that starts at `at`, in KiB.
    fn mapped_kib(at: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("read /proc/self/smaps");
        let head = format!("{at:x}-");
        let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&head));
        assert!(lines.next().is_some(), "no mapping at {head} in smaps");
        let rss = lines
            .find(|l| l.starts_with("Rss:"))
            .expect("an Rss line for the mapping");
        rss.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[test]
    fn a_fresh_mapping_of_written_shared_memory_is_mapped_whole_by_one_populate() {
        const LEN: usize = 4 << 20;
        let file = tempfile::tempfile().expect("a temporary file");
        file.set_len(LEN as u64).unwrap();
        let map = |prot| {
            // SAFETY: a fresh shared mapping of a file of LEN bytes.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    LEN,
                    prot,
                    libc::MAP_SHARED,
                    file.as_raw_fd(),
                    0,
                )
            };
            assert_ne!(p, libc::MAP_FAILED);
            p as usize
        };
        let writer = map(libc::PROT_READ | libc::PROT_WRITE);
        // SAFETY: LEN writable bytes at `writer`.
        unsafe { std::ptr::write_bytes(writer as *mut u8, 0x5a, LEN) };
        let reader = map(libc::PROT_READ);
        assert_eq!(mapped_kib(reader), 0, "a fresh mapping has no page mapped");
        // SAFETY: LEN readable bytes at `reader`, alive until the munmap below.
        let bytes = unsafe { std::slice::from_raw_parts((reader + 100) as *const u8, LEN - 200) };
        populate_for_reading(bytes);
        assert_eq!(mapped_kib(reader), (LEN / 1024) as u64);
        assert!(bytes.iter().all(|&b| b == 0x5a));
        for p in [writer, reader] {
            // SAFETY: the mappings made above, unmapped once.
            unsafe { libc::munmap(p as *mut libc::c_void, LEN) };
        }
    }

    /// `len` bytes that differ from one position to the next.
    fn pattern(len: usize, seed: u64) -> Vec<u8> {
        (0..len as u64)
            .map(|i| (i.wrapping_mul(0x9e37_79b9).wrapping_add(seed) >> 7) as u8)
            .collect()
    }

    /// Directories (the temporary one, /dev/shm) whose file system takes
    /// placement; at least one must.
    fn placeable_dirs() -> Vec<tempfile::TempDir> {
        let dirs: Vec<_> = [std::env::temp_dir(), "/dev/shm".into()]
            .into_iter()
            .filter_map(|d| tempfile::tempdir_in(d).ok())
            .filter(|d| {
                let f = File::open(d.path()).unwrap();
                faults_cannot_fail_after_fallocate(f.as_raw_fd())
            })
            .collect();
        assert!(
            !dirs.is_empty(),
            "neither $TMPDIR nor /dev/shm is ext4, XFS or tmpfs"
        );
        dirs
    }

    #[test]
    fn bytes_placed_by_several_threads_after_a_header_read_back_exactly_and_writing_goes_on_after_them()
     {
        let header = b"a header of 29 unaligned byte";
        for dir in placeable_dirs() {
            for threads in [2, 3, 8] {
                let mut file = tempfile::tempfile_in(dir.path()).unwrap();
                file.write_all(header).unwrap();
                let run = pattern((5 << 20) + 4099, threads as u64);
                assert!(place(&mut file, &run, threads).expect("place"));
                assert_eq!(file.stream_position().unwrap(), 29 + run.len() as u64);
                file.write_all(b"tail").unwrap();
                let mut back = Vec::new();
                file.seek(SeekFrom::Start(0)).unwrap();
                file.read_to_end(&mut back).unwrap();
                let at = format!("{threads} threads in {}", dir.path().display());
                assert_eq!(back.len(), 29 + run.len() + 4, "{at}");
                assert_eq!(&back[..29], header, "{at}");
                assert!(back[29..29 + run.len()] == run[..], "{at}: the run differs");
                assert_eq!(&back[29 + run.len()..], b"tail", "{at}");
            }
        }
    }

    #[test]
    fn a_run_filled_in_place_lands_after_the_header_and_a_refused_fill_moves_nothing() {
        for dir in placeable_dirs() {
            let mut file = tempfile::tempfile_in(dir.path()).unwrap();
            file.write_all(b"head").unwrap();
            let run = pattern((3 << 20) + 5, 9);
            let mut fill = |dst: &mut [u8]| {
                dst.copy_from_slice(&run);
                Ok(())
            };
            assert!(matches!(
                file.fill_run(run.len(), &mut fill).unwrap(),
                Filled::Done
            ));
            assert_eq!(file.stream_position().unwrap(), 4 + run.len() as u64);
            let mut refuse = |_: &mut [u8]| Err(Refusal::from("fingerprint mismatch"));
            assert!(matches!(
                file.fill_run(100, &mut refuse).unwrap(),
                Filled::Refused(reason) if reason.to_string() == "fingerprint mismatch"
            ));
            assert_eq!(file.stream_position().unwrap(), 4 + run.len() as u64);
            let mut back = Vec::new();
            file.seek(SeekFrom::Start(0)).unwrap();
            file.read_to_end(&mut back).unwrap();
            assert_eq!(&back[..4], b"head");
            assert!(back[4..4 + run.len()] == run[..]);
        }
    }

    #[test]
    fn only_ext4_xfs_and_tmpfs_are_trusted_with_placement() {
        // /proc is none of ext4, XFS and tmpfs.
        let proc = File::open("/proc/self/stat").unwrap();
        assert!(!faults_cannot_fail_after_fallocate(proc.as_raw_fd()));
        let dev_shm_or_tmp = placeable_dirs();
        let f = File::open(dev_shm_or_tmp[0].path()).unwrap();
        assert!(faults_cannot_fail_after_fallocate(f.as_raw_fd()));
    }

    #[test]
    fn shares_cut_at_huge_page_boundaries_cover_the_run_once_whatever_the_thread_count() {
        let src = pattern((6 << 20) + 17, 5);
        for threads in [1, 2, 3, 7, 64] {
            let mut dst = vec![0u8; src.len()];
            copy_in_shares(&mut dst, &src, threads);
            assert!(dst == src, "{threads} threads");
        }
    }

    #[test]
    fn a_file_that_cannot_be_written_is_an_error_and_nothing_is_placed() {
        let dir = placeable_dirs().remove(0);
        let path = dir.path().join("read-only");
        std::fs::write(&path, b"x").unwrap();
        let mut file = File::open(&path).unwrap();
        let run = pattern(1 << 20, 1);
        assert!(place(&mut file, &run, 2).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"x");
    }

    #[test]
    fn only_runs_of_64_mib_or_more_are_placed_with_threads() {
        assert_eq!(threads_for(PLACE_FROM_BYTES - 1), 1);
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(threads_for(PLACE_FROM_BYTES), cpus.clamp(1, 4));
        assert_eq!(threads_for(1 << 40), cpus.clamp(1, MAX_THREADS));
    }
}
