//! What the collector tells of its connections: how one ended
//! ([`ConnectionEnd`]), what an ended one delivered ([`ConnectionReport`],
//! and its line for people), and how far an open one got
//! ([`LiveConnection`]). Owns the report types and their wording; counts
//! nothing itself (the connection fills them in).

use std::path::PathBuf;

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
    /// The API of the process (its Hello's), once it said hello.
    pub api: Option<ditto_protocol::Api>,
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
            api: None,
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
