//! The listener and the collector's lifecycle: the socket made (in a
//! private 0700 directory, or at a given path that appears only once it
//! listens), the accept loop (one thread per connection, at most
//! [`super::CollectorConfig::max_connections`] at once: one more is
//! rejected with the reason and kept open a moment without a thread),
//! progress and reports for the caller, and the stop that ends every
//! connection and commits every snapshot. Never blocks longer than
//! [`super::POLL_INTERVAL`] without looking at the shutdown flag; serves
//! no connection itself ([`super::connection`] does).

use super::config::{CollectorConfig, POLL_INTERVAL, SocketPlace};
use super::connection;
use super::memory_budget;
use super::report::{ConnectionEnd, ConnectionReport, LiveConnection};
use super::{BufferSource, Shared};
use crate::store::StoreError;
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

/// Why snapshots of a run are not committed (their directory moved or
/// replaced mid-run, their last manifest not written): each one's error,
/// said on one line.
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct Uncommitted(pub Vec<StoreError>);

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
    /// or replaced mid-run, its last manifest not written).
    pub fn stop_and_commit(mut self) -> (Vec<ConnectionReport>, Result<(), Uncommitted>) {
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
            .filter_map(|w| w.lock().unwrap_or_else(|e| e.into_inner()).commit().err())
            .collect::<Vec<_>>();
        let committed = if errors.is_empty() {
            Ok(())
        } else {
            Err(Uncommitted(errors))
        };
        (self.reports(), committed)
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
        shared.record_report(report);
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
                        crate::log::warn(&format!("cannot start a connection thread: {e}"));
                    }
                }
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                crate::log::warn(&format!("accept on the collector socket failed: {e}"));
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
