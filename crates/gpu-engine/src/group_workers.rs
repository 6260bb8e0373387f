//! The group workers: threads shared by every queue that run chunks of the
//! work-groups of multi-group dispatches (include/ditto_hsa_cpu.h,
//! "Executing"). Owns the worker threads, the list of jobs that still have
//! chunks to claim, and the thread count (DITTO_HSA_CPU_THREADS). Knows
//! nothing about kernels: a job is "run chunk i" for i in 0..chunks.
//!
//! Progress rule (why no dispatch can deadlock): the thread that submits a
//! job claims and runs chunks itself until none is left, and only then
//! waits, for the chunks that workers have already claimed and are running.
//! A worker never waits for a job to finish, only for the next job, so
//! whoever waits always waits on threads that are running kernel code.
//! Several queues may submit at once; their chunks interleave on the workers.
//!
//! Workers are started on the first job and live as long as the process
//! (idle on a condition variable; hsa_shut_down leaves them parked).

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex, OnceLock};
use std::thread::Thread;

/// Environment variable: how many threads run work-groups.
pub const THREADS_ENV: &str = "DITTO_HSA_CPU_THREADS";
/// Largest accepted DITTO_HSA_CPU_THREADS.
pub const MAX_THREADS: usize = 1024;

/// Threads that run the groups of one dispatch: the queue's processor
/// thread plus `threads() - 1` workers. Read once.
pub fn threads() -> usize {
    static THREADS: OnceLock<usize> = OnceLock::new();
    *THREADS.get_or_init(|| {
        let default = std::thread::available_parallelism().map_or(1, |n| n.get());
        let value = std::env::var_os(THREADS_ENV);
        match parse_threads(value.as_deref().map(|v| v.to_string_lossy()).as_deref()) {
            Ok(Some(n)) => n,
            Ok(None) => default,
            Err(text) => {
                eprintln!(
                    "ditto GPU engine: {THREADS_ENV}={text:?} is not a thread count from 1 to {MAX_THREADS}; \
                     using {default} (the machine's available parallelism)"
                );
                default
            }
        }
    })
}

/// `None` when unset or empty; the offending text when invalid.
fn parse_threads(value: Option<&str>) -> Result<Option<usize>, String> {
    let Some(text) = value.map(str::trim).filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    match text.parse::<usize>() {
        Ok(n) if (1..=MAX_THREADS).contains(&n) => Ok(Some(n)),
        _ => Err(text.to_string()),
    }
}

/// One submitted job: `chunks` calls of `run_chunk`, each exactly once.
struct Job {
    chunks: u64,
    /// Next chunk to claim (may run past `chunks`: claims fail then).
    next: AtomicU64,
    /// Chunks claimed or not yet claimed that have not returned.
    unfinished: AtomicU64,
    panicked: AtomicBool,
    run_chunk: Box<dyn Fn(u64) + Send + Sync>,
    /// The submitting thread, unparked when the last chunk returns.
    submitter: Thread,
}

impl Job {
    fn exhausted(&self) -> bool {
        self.next.load(Ordering::Relaxed) >= self.chunks
    }

    /// Claims and runs chunks until none is left to claim.
    fn work(&self) {
        loop {
            let chunk = self.next.fetch_add(1, Ordering::Relaxed);
            if chunk >= self.chunks {
                return;
            }
            if catch_unwind(AssertUnwindSafe(|| (self.run_chunk)(chunk))).is_err() {
                self.panicked.store(true, Ordering::Relaxed);
            }
            // AcqRel: the chunk's memory effects reach the submitter, which
            // loads `unfinished` with Acquire before completing the packet.
            if self.unfinished.fetch_sub(1, Ordering::AcqRel) == 1 {
                self.submitter.unpark();
            }
        }
    }
}

struct Pool {
    jobs: Mutex<VecDeque<Arc<Job>>>,
    wake: Condvar,
    workers: usize,
}

static POOL: LazyLock<Pool> = LazyLock::new(|| {
    let mut workers = 0;
    for i in 1..threads() {
        let spawned = std::thread::Builder::new()
            .name(format!("hsa-cpu-group-{i}"))
            .spawn(worker);
        match spawned {
            Ok(_) => workers += 1,
            Err(e) => {
                // Fewer workers only means less parallelism: submitters
                // always run chunks themselves.
                eprintln!(
                    "ditto GPU engine: cannot start group worker {i}: {e}; running with {workers}"
                );
                break;
            }
        }
    }
    Pool {
        jobs: Mutex::new(VecDeque::new()),
        wake: Condvar::new(),
        workers,
    }
});

fn worker() {
    let pool = &*POOL;
    loop {
        let job = {
            let mut jobs = pool.jobs.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                while jobs.front().is_some_and(|j| j.exhausted()) {
                    jobs.pop_front();
                }
                if let Some(job) = jobs.front() {
                    break job.clone();
                }
                jobs = pool.wake.wait(jobs).unwrap_or_else(|e| e.into_inner());
            }
        };
        job.work();
    }
}

/// A chunk of the job panicked (the other chunks still ran).
#[derive(Debug, PartialEq, Eq)]
pub struct ChunkPanicked;

/// Runs `run_chunk(i)` for every i in 0..chunks, on the calling thread and
/// the workers, and returns when every call has returned.
pub fn run(chunks: u64, run_chunk: Box<dyn Fn(u64) + Send + Sync>) -> Result<(), ChunkPanicked> {
    if chunks == 0 {
        return Ok(());
    }
    let job = Arc::new(Job {
        chunks,
        next: AtomicU64::new(0),
        unfinished: AtomicU64::new(chunks),
        panicked: AtomicBool::new(false),
        run_chunk,
        submitter: std::thread::current(),
    });
    let helpers = if chunks > 1 && threads() > 1 {
        POOL.workers.min((chunks - 1) as usize)
    } else {
        0
    };
    if helpers > 0 {
        POOL.jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(job.clone());
        for _ in 0..helpers {
            POOL.wake.notify_one();
        }
    }
    job.work();
    if helpers > 0 {
        POOL.jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|j| !Arc::ptr_eq(j, &job));
    }
    // Spurious unparks (a stale token) only cost one more check.
    while job.unfinished.load(Ordering::Acquire) != 0 {
        std::thread::park();
    }
    if job.panicked.load(Ordering::Relaxed) {
        Err(ChunkPanicked)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_count_accepts_1_to_1024_and_reports_anything_else() {
        assert_eq!(parse_threads(None), Ok(None));
        assert_eq!(parse_threads(Some("  ")), Ok(None));
        assert_eq!(parse_threads(Some("1")), Ok(Some(1)));
        assert_eq!(parse_threads(Some(" 4 ")), Ok(Some(4)));
        assert_eq!(parse_threads(Some("1024")), Ok(Some(1024)));
        assert_eq!(parse_threads(Some("0")), Err("0".into()));
        assert_eq!(parse_threads(Some("1025")), Err("1025".into()));
        assert_eq!(parse_threads(Some("four")), Err("four".into()));
        assert_eq!(parse_threads(Some("-2")), Err("-2".into()));
    }

    #[test]
    fn every_chunk_runs_exactly_once_before_run_returns() {
        let counts: Arc<Vec<AtomicU64>> = Arc::new((0..100).map(|_| AtomicU64::new(0)).collect());
        let c = counts.clone();
        let result = run(
            100,
            Box::new(move |i| {
                c[i as usize].fetch_add(1, Ordering::Relaxed);
            }),
        );
        assert_eq!(result, Ok(()));
        let seen: Vec<u64> = counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        assert_eq!(seen, vec![1; 100]);
    }

    #[test]
    fn a_panicking_chunk_fails_the_job_and_the_others_still_run() {
        let ran = Arc::new(AtomicU64::new(0));
        let r = ran.clone();
        let result = run(
            8,
            Box::new(move |i| {
                r.fetch_add(1, Ordering::Relaxed);
                if i == 3 {
                    panic!("chunk 3 fails (expected by this test)");
                }
            }),
        );
        assert_eq!(result, Err(ChunkPanicked));
        assert_eq!(ran.load(Ordering::Relaxed), 8);
    }

    #[test]
    fn concurrent_submitters_all_complete() {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    let sum = Arc::new(AtomicU64::new(0));
                    for _ in 0..50 {
                        let s = sum.clone();
                        run(
                            16,
                            Box::new(move |i| {
                                s.fetch_add(i, Ordering::Relaxed);
                            }),
                        )
                        .unwrap();
                    }
                    sum.load(Ordering::Relaxed)
                })
            })
            .collect();
        for h in handles {
            assert_eq!(h.join().unwrap(), 50 * (0..16).sum::<u64>());
        }
    }
}
