//! The collector: a Unix-socket server that receives captured dispatches
//! from tool libraries, reads their buffers through IPC handles (or from
//! the shared-memory copies passed with a message) and hands the bytes to
//! the snapshot store.
//!
//! Owns the listener (private 0700 directory or a given path, peer uid
//! checked), one thread per connection, the protocol state machine
//! (Hello → Welcome/Reject; Dispatch → Ack; Goodbye) and the rule that makes
//! a snapshot trustworthy: for every buffer attach → copy → DETACH (an RAII
//! guard detaches on every path) BEFORE the ack, then the fingerprint check.
//! It never keeps a mapping past a dispatch, never acks before detaching,
//! never stores data whose fingerprint differs, and never blocks forever: a
//! started message must complete within the frame timeout, a Hello must
//! come within the Hello deadline, and shutdown is noticed within
//! [`POLL_INTERVAL`]. What it holds is bounded: at most
//! [`CollectorConfig::max_connections`] connections (one more is rejected
//! with the reason), the bytes held for captures by one memory budget over
//! all of them (`memory_budget`), and the strings of messages (`limits`).
//!
//! This file: the listener, its lifecycle and the reports; `connection`:
//! the protocol of one connection; `capture`: attach/copy/detach/verify;
//! the two buffer sources, each loading its runtime when its first buffer
//! arrives: `hsa` (the HSA IPC importer) over `hsa_runtime`, and `cuda`
//! (the CUDA IPC importer) over `cuda_driver` and `cuda_copy`.

use crate::store::SnapshotWriter;
use ditto_protocol::CollectorMessage;
use std::collections::HashMap;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often blocked reads and the accept loop look at the shutdown flag.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// Default time a started message may take.
pub const DEFAULT_FRAME_TIMEOUT: Duration = Duration::from_secs(30);
/// Default time from connecting to a complete Hello (the tool sends it at
/// once).
pub const DEFAULT_HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// Default most connections open at once.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;
/// Default longest wait of a dispatch for room in the memory budget
/// (shorter than the tool's default wait for an Ack, 30 s: the tool hears
/// the refusal).
pub const DEFAULT_MEMORY_WAIT: Duration = Duration::from_secs(10);

/// An attached (mapped) allocation in the collector's address space.
#[derive(Debug, PartialEq, Eq)]
pub struct Mapping {
    pub address: usize,
    /// Bytes mapped (the allocation's size).
    pub len: u64,
    /// The GPU it was attached on, as its source numbers GPUs (the HSA
    /// NODE of the agent; the collector's CUDA device ordinal), where the
    /// source says: the CUDA importer copies and detaches there, and the
    /// debug log names it ([`BufferSource::gpu_name`]).
    pub gpu: Option<u32>,
}

/// Where buffer bytes come from: IPC attach, copy, detach. The HSA runtime
/// ([`hsa::HsaBufferSource`]) or the CUDA driver (`cuda`) in production, a
/// fake in tests.
pub trait BufferSource: Send + Sync {
    /// Maps the whole allocation named by `handle` (`alloc_size` bytes), on
    /// the GPU whose HSA NODE is `owner_node` (the GPU that owns the
    /// allocation, as the tool reported it) where the source has several.
    fn attach(
        &self,
        handle: &[u8],
        alloc_size: u64,
        owner_node: Option<u32>,
    ) -> Result<Mapping, String>;
    /// Copies `dst.len()` bytes at `offset` of a live mapping.
    fn copy(&self, mapping: &Mapping, offset: u64, dst: &mut [u8]) -> Result<(), String>;
    /// `len` bytes at `offset` of a live mapping, read in place, where the
    /// runtime maps IPC memory into the collector's host memory (a large
    /// buffer is then written into its tensor file without a copy); `None`
    /// where it must be copied out with [`Self::copy`] (the default), or
    /// the range lies outside the mapping. The bytes do not change while
    /// the mapping lives: the application holds the dispatch until the ack.
    fn host_bytes<'m>(&self, mapping: &'m Mapping, offset: u64, len: u64) -> Option<&'m [u8]> {
        let _ = (mapping, offset, len);
        None
    }
    /// Whether [`Self::copy`] of a long run straight into a tensor file's
    /// mapping is the fastest way to store it (the source copies in
    /// parallel, through its own staging: the CUDA importer); otherwise a
    /// long run is copied a chunk at a time and written from the chunk.
    fn copies_long_runs(&self) -> bool {
        false
    }
    /// Unmaps; the mapping is gone whatever the result.
    fn detach(&self, mapping: Mapping) -> Result<(), String>;
    /// [`Mapping::gpu`] in words, for the debug log.
    fn gpu_name(&self, gpu: u32) -> String {
        format!("the GPU of node {gpu}")
    }
}

/// Where snapshots go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotLayout {
    /// Every connection into this one directory (`ditto run`).
    Single(PathBuf),
    /// Each run into `<base>/<Hello.run>/` (`ditto collect`, `ditto validate`);
    /// runs with the same name share a directory with increasing rank.
    PerRun(PathBuf),
}

/// Where the socket lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SocketPlace {
    /// A fresh private (0700) directory, removed when the collector stops.
    Private,
    /// A given path (must not exist); removed when the collector stops.
    At(PathBuf),
}

pub type ConnectionObserver = Arc<dyn Fn(&ConnectionReport) + Send + Sync>;

#[derive(Clone)]
pub struct CollectorConfig {
    pub layout: SnapshotLayout,
    /// Time a started message may take; also the longest time from
    /// connect to a complete Hello.
    pub frame_timeout: Duration,
    /// Time from connect to a complete Hello (at most `frame_timeout`):
    /// a connection that has said nothing by then is closed and reported.
    pub hello_timeout: Duration,
    /// Connections open at once; one more is rejected with the reason.
    pub max_connections: usize,
    /// Bytes the collector may hold in memory for captures, over all
    /// connections ([`memory_budget`]); `DITTO_COLLECTOR_MEMORY_MIB`, else
    /// a quarter of the machine's memory, at most 16 GiB.
    pub memory_budget: u64,
    /// How long a dispatch waits for room in the budget before it is
    /// refused.
    pub memory_wait: Duration,
    /// Only peers with this uid are served (default: ours).
    pub allowed_uid: u32,
    /// Called as each connection ends.
    pub on_connection_end: Option<ConnectionObserver>,
    /// Called when an HSA application's connection is welcomed (its Hello
    /// says [`ditto_protocol::Api::Hsa`]), before anything it sends is read.
    pub on_hsa_connection: Option<Arc<dyn Fn() + Send + Sync>>,
}

impl CollectorConfig {
    pub fn new(layout: SnapshotLayout) -> Self {
        let variable = std::env::var(memory_budget::BUDGET_VARIABLE).ok();
        let (memory_budget, warning) = memory_budget::budget_from(variable.as_deref());
        if let Some(warning) = warning {
            crate::log::warn(&warning);
        }
        CollectorConfig {
            layout,
            frame_timeout: DEFAULT_FRAME_TIMEOUT,
            hello_timeout: DEFAULT_HELLO_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            memory_budget,
            memory_wait: DEFAULT_MEMORY_WAIT,
            // SAFETY: getuid cannot fail.
            allowed_uid: unsafe { libc::getuid() },
            on_connection_end: None,
            on_hsa_connection: None,
        }
    }
}

/// How a connection ended.
#[derive(Debug, Clone, PartialEq)]
pub enum ConnectionEnd {
    /// The tool said Goodbye.
    Goodbye,
    /// Refused before Welcome.
    Rejected(String),
    /// Closed or broken without Goodbye; `in_flight` names the dispatch
    /// being received or acknowledged when it happened.
    Dropped {
        in_flight: Option<u64>,
        reason: String,
    },
    /// The collector stopped while the connection was open.
    Stopped,
    /// The process's HSA runtime never started the tool: why, as the
    /// process saw it.
    NeverLoaded(String),
}

/// What one connection (one application process) delivered.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectionReport {
    pub run: Option<String>,
    pub pid: Option<u32>,
    pub rank: Option<u32>,
    pub snapshot_dir: Option<PathBuf>,
    pub dispatches_captured: u64,
    pub arrays_captured: u64,
    pub bytes_captured: u64,
    /// Dispatches that were answered with an error Ack, and why.
    pub errors: Vec<String>,
    /// Whole dispatches recorded as missing, per reason (selection,
    /// timeout, error), and buffers of captured dispatches left out.
    pub missing: Vec<(ditto_protocol::MissReason, u64)>,
    pub buffers_missing: u64,
    pub end: ConnectionEnd,
}

impl ConnectionReport {
    pub(crate) fn new() -> Self {
        ConnectionReport {
            run: None,
            pid: None,
            rank: None,
            snapshot_dir: None,
            dispatches_captured: 0,
            arrays_captured: 0,
            bytes_captured: 0,
            errors: Vec::new(),
            missing: Vec::new(),
            buffers_missing: 0,
            end: ConnectionEnd::Stopped,
        }
    }

    /// Whether dispatches or buffers were missed for a reason other than
    /// `--dispatch`.
    pub fn missed_some(&self) -> bool {
        self.buffers_missing > 0
            || self
                .missing
                .iter()
                .any(|(r, n)| *r != ditto_protocol::MissReason::Selection && *n > 0)
    }

    /// A snapshot from this connection cannot be trusted to be complete.
    pub fn failed(&self) -> bool {
        !self.errors.is_empty()
            || matches!(
                self.end,
                ConnectionEnd::Rejected(_)
                    | ConnectionEnd::Dropped {
                        in_flight: Some(_),
                        ..
                    }
            )
    }

    /// "run 'ref' (pid 12, rank 0)".
    pub fn who(&self) -> String {
        let mut s = match &self.run {
            Some(r) => format!("run '{r}'"),
            None => "an unidentified process".to_string(),
        };
        if let Some(p) = self.pid {
            s.push_str(&format!(" (pid {p}"));
            if let Some(r) = self.rank {
                s.push_str(&format!(", rank {r}"));
            }
            s.push(')');
        }
        s
    }
}

/// How many of a connection's errors its report line shows.
const SHOWN_ERRORS: usize = 3;

impl std::fmt::Display for ConnectionReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} dispatch(es) captured",
            self.who(),
            self.dispatches_captured
        )?;
        if let Some(d) = &self.snapshot_dir {
            write!(f, " into {}", d.display())?;
        }
        if !self.missing.is_empty() {
            let parts: Vec<String> = self
                .missing
                .iter()
                .map(|(r, n)| format!("{n} ({})", r.name()))
                .collect();
            write!(
                f,
                "; not captured: {} dispatch(es) (listed under \"missing\" in its manifest)",
                parts.join(", ")
            )?;
        }
        if self.buffers_missing > 0 {
            write!(
                f,
                "; {} buffer(s) of captured dispatches left out",
                self.buffers_missing
            )?;
        }
        match &self.end {
            ConnectionEnd::Goodbye => {}
            ConnectionEnd::Rejected(r) => write!(f, "; rejected: {r}")?,
            ConnectionEnd::Dropped {
                in_flight: Some(i),
                reason,
            } => write!(f, "; connection lost during dispatch {i}: {reason}")?,
            ConnectionEnd::Dropped {
                in_flight: None,
                reason,
            } => write!(f, "; {reason}")?,
            ConnectionEnd::Stopped => write!(f, "; the collector stopped while it was connected")?,
            ConnectionEnd::NeverLoaded(why) => write!(
                f,
                "; the tool was never loaded in pid {}: {why}",
                self.pid.unwrap_or(0)
            )?,
        }
        // A few errors say what went wrong; thousands of the same (a full
        // disk refuses every dispatch after the first) say nothing more.
        for e in self.errors.iter().take(SHOWN_ERRORS) {
            write!(f, "; error: {e}")?;
        }
        if self.errors.len() > SHOWN_ERRORS {
            write!(
                f,
                "; and {} more errors (each dispatch's reason is under \"missing\" in its \
                 manifest; `ditto inspect` lists them)",
                self.errors.len() - SHOWN_ERRORS
            )?;
        }
        Ok(())
    }
}

/// A connection that is still open: who it is and how far it got, for
/// progress lines and for saying what was pending when a run is stopped.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LiveConnection {
    pub run: Option<String>,
    pub pid: Option<u32>,
    pub rank: Option<u32>,
    pub dispatches_captured: u64,
    pub bytes_captured: u64,
    /// Index of the last dispatch acknowledged.
    pub last_dispatch: Option<u64>,
    /// Index of the dispatch being captured now (received, not yet acked).
    pub capturing: Option<u64>,
}

impl std::fmt::Display for LiveConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.run, self.pid) {
            (Some(run), Some(pid)) => write!(f, "run '{run}' (pid {pid}")?,
            _ => write!(f, "a process that has not said Hello yet (")?,
        }
        if let Some(r) = self.rank {
            write!(f, ", rank {r}")?;
        }
        write!(f, "): {} dispatch(es) captured", self.dispatches_captured)?;
        if let Some(i) = self.last_dispatch {
            write!(f, ", the last dispatch {i}")?;
        }
        match self.capturing {
            Some(i) => write!(f, "; dispatch {i} was being captured"),
            None => write!(f, "; waiting for its next dispatch"),
        }
    }
}

struct Shared {
    /// When the collector started: its log lines give instants from here.
    started: Instant,
    live_connections: Mutex<HashMap<u64, LiveConnection>>,
    next_connection: AtomicU64,
    source: Arc<dyn BufferSource>,
    config: CollectorConfig,
    /// What the connections hold in memory for captures.
    memory: Arc<memory_budget::MemoryBudget>,
    live: AtomicUsize,
    shutdown: AtomicBool,
    active: AtomicUsize,
    accept_passes: AtomicU64,
    snapshots: Mutex<HashMap<PathBuf, Arc<Mutex<SnapshotWriter>>>>,
    reports: Mutex<Vec<ConnectionReport>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// A running collector. Stop it with [`Collector::stop`] (dropping it
/// stops it too).
pub struct Collector {
    shared: Arc<Shared>,
    socket_path: PathBuf,
    remove_socket: bool,
    _private_dir: Option<crate::scratch::ScratchDir>,
    acceptor: Option<JoinHandle<()>>,
}

#[derive(Debug, thiserror::Error)]
pub enum CollectorError {
    #[error(
        "{0} already exists: remove it (a stale socket of an earlier `ditto collect`?) or choose another --socket path"
    )]
    SocketExists(PathBuf),
    #[error("cannot listen on {path}: {error}")]
    Listen { path: PathBuf, error: io::Error },
}

/// A listening socket at `path`. A socket named by the user (`shared`:
/// others wait for its file to appear, then connect) appears only once it
/// listens: it is bound under a temporary name beside it, then hard-linked
/// to `path` (which fails if something took the name meanwhile).
fn listen_at(path: &Path, shared: bool) -> io::Result<UnixListener> {
    if !shared {
        return UnixListener::bind(path);
    }
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(format!(".binding-{}", std::process::id()));
    let temporary = PathBuf::from(temporary);
    let _ = std::fs::remove_file(&temporary);
    let listener = UnixListener::bind(&temporary)?;
    let linked = std::fs::hard_link(&temporary, path);
    let _ = std::fs::remove_file(&temporary);
    linked.map(|()| listener)
}

impl Collector {
    pub fn start(
        source: Arc<dyn BufferSource>,
        config: CollectorConfig,
        place: SocketPlace,
    ) -> Result<Collector, CollectorError> {
        let (socket_path, private_dir) = match place {
            SocketPlace::Private => {
                let dir =
                    crate::scratch::ScratchDir::create("ditto-collector-").map_err(|source| {
                        CollectorError::Listen {
                            path: std::env::temp_dir(),
                            error: source,
                        }
                    })?;
                (dir.path().join("socket"), Some(dir))
            }
            SocketPlace::At(path) => {
                if std::fs::symlink_metadata(&path).is_ok() {
                    return Err(CollectorError::SocketExists(path));
                }
                (path, None)
            }
        };
        let listener = listen_at(&socket_path, private_dir.is_none()).map_err(|source| {
            CollectorError::Listen {
                path: socket_path.clone(),
                error: source,
            }
        })?;
        listener
            .set_nonblocking(true)
            .map_err(|source| CollectorError::Listen {
                path: socket_path.clone(),
                error: source,
            })?;
        let shared = Arc::new(Shared {
            started: Instant::now(),
            live_connections: Mutex::new(HashMap::new()),
            next_connection: AtomicU64::new(0),
            source,
            memory: memory_budget::MemoryBudget::new(config.memory_budget),
            config,
            live: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            accept_passes: AtomicU64::new(0),
            snapshots: Mutex::new(HashMap::new()),
            reports: Mutex::new(Vec::new()),
            threads: Mutex::new(Vec::new()),
        });
        let acceptor = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("ditto-accept".into())
                .spawn(move || accept_loop(shared, listener))
                .map_err(|source| CollectorError::Listen {
                    path: socket_path.clone(),
                    error: source,
                })?
        };
        Ok(Collector {
            shared,
            remove_socket: private_dir.is_none(),
            socket_path,
            _private_dir: private_dir,
            acceptor: Some(acceptor),
        })
    }

    pub fn socket_path(&self) -> &Path {
        &self.socket_path
    }

    /// Mappings attached and not yet detached, across all connections.
    pub fn live_attachments(&self) -> usize {
        self.shared.live.load(Ordering::SeqCst)
    }

    /// The memory budget: its size, what connections hold of it now and
    /// the most they held at once.
    pub fn memory(&self) -> memory_budget::MemoryUse {
        self.shared.memory.usage()
    }

    /// Reports of the connections that have ended so far.
    pub fn reports(&self) -> Vec<ConnectionReport> {
        self.shared
            .reports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Connections open now, in no particular order.
    pub fn open_connections(&self) -> Vec<LiveConnection> {
        self.shared
            .live_connections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Dispatches and bytes captured so far, over ended and open connections.
    pub fn progress(&self) -> (u64, u64) {
        let live = self.open_connections();
        let ended = self.reports();
        let dispatches = live.iter().map(|l| l.dispatches_captured).sum::<u64>()
            + ended.iter().map(|r| r.dispatches_captured).sum::<u64>();
        let bytes = live.iter().map(|l| l.bytes_captured).sum::<u64>()
            + ended.iter().map(|r| r.bytes_captured).sum::<u64>();
        (dispatches, bytes)
    }

    /// Waits until every pending connection has been accepted and every
    /// open one has ended, for at most `grace`. Returns whether it settled.
    pub fn settle(&self, grace: Duration) -> bool {
        let deadline = Instant::now() + grace;
        let pass = self.shared.accept_passes.load(Ordering::SeqCst);
        while self.shared.accept_passes.load(Ordering::SeqCst) < pass + 2 {
            if Instant::now() > deadline || self.acceptor.as_ref().is_none_or(|a| a.is_finished()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        while self.shared.active.load(Ordering::SeqCst) > 0 {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }

    /// Stops accepting, ends open connections (reported as
    /// [`ConnectionEnd::Stopped`]) and returns every connection's report.
    pub fn stop(mut self) -> Vec<ConnectionReport> {
        self.shutdown_and_join();
        self.reports()
    }

    /// [`Self::stop`], then the end of every snapshot written: its whole
    /// manifest, where its directory is still the one at its path. Returns
    /// the reports and why a snapshot is not committed (its directory moved
    /// or replaced mid-run, its last manifest not written), one line each.
    pub fn stop_and_commit(mut self) -> (Vec<ConnectionReport>, Vec<String>) {
        self.shutdown_and_join();
        let writers: Vec<_> = self
            .shared
            .snapshots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        let errors = writers
            .iter()
            .filter_map(|w| {
                w.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .commit()
                    .err()
                    .map(|e| e.to_string())
            })
            .collect();
        (self.reports(), errors)
    }

    /// Asks the collector to stop from elsewhere (e.g. a signal watcher).
    pub fn request_stop(&self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
    }

    pub fn stop_requested(&self) -> bool {
        self.shared.shutdown.load(Ordering::SeqCst)
    }

    fn shutdown_and_join(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        let threads = std::mem::take(
            &mut *self
                .shared
                .threads
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for t in threads {
            let _ = t.join();
        }
        if self.remove_socket {
            let _ = std::fs::remove_file(&self.socket_path);
            self.remove_socket = false;
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.shutdown_and_join();
    }
}

/// Connections over the limit: answered with a Reject, then kept open a
/// little (the tool may still be writing its Hello: a socket closed under
/// it would fail that write instead of showing the Reject), without a thread.
struct Refused {
    streams: std::collections::VecDeque<(UnixStream, Instant)>,
}

impl Refused {
    /// How long a refused connection stays open.
    const LINGER: Duration = Duration::from_secs(2);
    /// The most kept open at once (older ones are closed sooner).
    const MOST: usize = 64;

    /// Rejects `stream` with `reason` and reports it.
    fn reject(&mut self, shared: &Shared, stream: UnixStream, reason: String) {
        let frame = CollectorMessage::Reject {
            reason: reason.clone(),
        };
        // A short frame into an empty socket buffer; never a wait.
        let _ = stream.set_nonblocking(true);
        let _ = ditto_protocol::write_frame(&mut &stream, &frame);
        let _ = stream.shutdown(std::net::Shutdown::Write);
        if self.streams.len() >= Self::MOST {
            self.streams.pop_front();
        }
        self.streams
            .push_back((stream, Instant::now() + Self::LINGER));
        let mut report = ConnectionReport::new();
        report.end = ConnectionEnd::Rejected(reason);
        if let Some(observer) = &shared.config.on_connection_end {
            observer(&report);
        }
        shared
            .reports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(report);
    }

    /// Closes those whose time is up.
    fn expire(&mut self) {
        let now = Instant::now();
        while self.streams.front().is_some_and(|(_, until)| *until <= now) {
            self.streams.pop_front();
        }
    }
}

fn accept_loop(shared: Arc<Shared>, listener: UnixListener) {
    let mut refused = Refused {
        streams: std::collections::VecDeque::new(),
    };
    loop {
        refused.expire();
        match listener.accept() {
            Ok((stream, _)) => {
                let limit = shared.config.max_connections;
                if shared.active.load(Ordering::SeqCst) >= limit {
                    refused.reject(
                        &shared,
                        stream,
                        format!(
                            "the collector serves at most {limit} connections at once (its \
                             limit), and {limit} are open: this process is not captured; run \
                             fewer processes through one collector, or start another"
                        ),
                    );
                    continue;
                }
                shared.active.fetch_add(1, Ordering::SeqCst);
                let s = shared.clone();
                let spawned = std::thread::Builder::new()
                    .name("ditto-conn".into())
                    .spawn(move || connection::serve_connection(&s, stream));
                match spawned {
                    Ok(h) => {
                        // Finished connections give their thread (its stack
                        // mapping) back now, not at shutdown: a collector
                        // serving many runs would otherwise grow by one
                        // stack per run.
                        let mut threads = shared.threads.lock().unwrap_or_else(|e| e.into_inner());
                        let (finished, running): (Vec<_>, Vec<_>) = std::mem::take(&mut *threads)
                            .into_iter()
                            .partition(|t| t.is_finished());
                        *threads = running;
                        threads.push(h);
                        drop(threads);
                        for t in finished {
                            let _ = t.join();
                        }
                    }
                    Err(e) => {
                        shared.active.fetch_sub(1, Ordering::SeqCst);
                        eprintln!("ditto: warning: cannot start a connection thread: {e}");
                    }
                }
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                eprintln!("ditto: warning: accept on the collector socket failed: {e}");
                std::thread::sleep(POLL_INTERVAL);
            }
        }
        // The backlog is empty now.
        shared.accept_passes.fetch_add(1, Ordering::SeqCst);
        if shared.shutdown.load(Ordering::SeqCst) {
            return;
        }
        let mut pfd = libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; the listener outlives the call.
        unsafe { libc::poll(&mut pfd, 1, POLL_INTERVAL.as_millis() as libc::c_int) };
    }
}

/// The uid of the process at the other end (SO_PEERCRED).
pub fn peer_uid(stream: &UnixStream) -> io::Result<u32> {
    ditto_protocol::peer_credentials(stream).map(|c| c.uid)
}

/// Why a peer is refused, if it is.
pub fn check_peer(peer_uid: u32, allowed_uid: u32) -> Result<(), String> {
    if peer_uid == allowed_uid {
        Ok(())
    } else {
        Err(format!(
            "peer runs as uid {peer_uid} but this collector serves only uid {allowed_uid}: \
             run the application as the same user as ditto"
        ))
    }
}

/// A run name usable as a directory name.
pub fn check_run_name(run: &str) -> Result<(), String> {
    if run.is_empty() || run == "." || run == ".." || run.contains('/') || run.contains('\0') {
        Err(format!(
            "run name {run:?} cannot name a snapshot directory: set DITTO_RUN_NAME (or --run) to a plain name"
        ))
    } else {
        Ok(())
    }
}

mod capture;
mod connection;
mod cuda;
mod cuda_copy;
mod cuda_driver;
pub mod hsa;
pub mod hsa_runtime;
pub mod limits;
pub mod memory_budget;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_names_that_escape_the_base_directory_are_refused() {
        for bad in ["", ".", "..", "a/b", "/abs"] {
            assert!(check_run_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_run_name("ref").is_ok());
        assert!(check_run_name("1234").is_ok());
    }

    #[test]
    fn a_peer_with_another_uid_is_refused_with_both_uids_named() {
        assert!(check_peer(1000, 1000).is_ok());
        let e = check_peer(0, 1000).unwrap_err();
        assert!(e.contains("uid 0") && e.contains("uid 1000"), "{e}");
    }

    #[test]
    fn peer_uid_of_a_socketpair_is_our_uid() {
        let (a, _b) = UnixStream::pair().unwrap();
        // SAFETY: getuid cannot fail.
        assert_eq!(peer_uid(&a).unwrap(), unsafe { libc::getuid() });
    }
}
