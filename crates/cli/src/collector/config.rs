//! What a collector is started with: where snapshots go
//! ([`SnapshotLayout`]), where its socket lives ([`SocketPlace`]), its
//! timeouts and bounds ([`CollectorConfig`], with their defaults), and how
//! often blocked reads look at the shutdown flag ([`POLL_INTERVAL`]). Owns
//! the settings and their defaults only; reads one environment variable
//! (the memory budget's) when a configuration is made.

use super::memory_budget;
use super::report::ConnectionReport;
use crate::store::CollectorRecord;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

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

/// Where snapshots go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotLayout {
    /// Every connection into this one directory (`ditto run`).
    Single(PathBuf),
    /// Each run into `<base>/<Hello.run>/` (`ditto collect`, `ditto validate`);
    /// runs with the same name share a directory with increasing rank.
    PerRun(PathBuf),
    /// Each run into its part `<base>/<Hello.run>/node-<node>/`: this
    /// collector is one node's of several writing `base`, each its own
    /// part (`ditto collect --node`, [`crate::store::parts`]); a process
    /// is served only with its launcher's rank, so that ranks of different
    /// nodes never clash. `job`: the job the collector runs in, recorded
    /// in each part (readers refuse parts of different jobs).
    PerRunPart {
        base: PathBuf,
        node: String,
        job: Option<String>,
        /// This collector process, recorded in each part: another
        /// collector never replaces a part of the same capture.
        collector: CollectorRecord,
    },
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
