//! The collector's memory budget: one count, over all its connections, of
//! the bytes it holds in memory for captures (inputs parts waiting for
//! their outputs, buffers copied into memory, a copy read for its
//! fingerprint check included, the chunk a streamed buffer goes through,
//! and large protocol frames). Owns the count, the wait for room
//! (bounded, and given up when the collector stops) and the reservation,
//! an RAII guard that gives its bytes back when dropped, on every path a
//! panic included. Why a refusal, and what to do, is [`Refusal::why`]'s.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The environment variable that sets the budget, in MiB.
pub const BUDGET_VARIABLE: &str = "DITTO_COLLECTOR_MEMORY_MIB";

/// The default budget: a quarter of the machine's memory, at most this.
pub const MAX_DEFAULT_BUDGET: u64 = 16 << 30;
/// The default budget where the machine's memory cannot be read.
const FALLBACK_BUDGET: u64 = 4 << 30;

/// A quarter of the machine's physical memory, at most
/// [`MAX_DEFAULT_BUDGET`].
pub fn default_budget() -> u64 {
    // SAFETY: sysconf only reads system configuration.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if pages <= 0 || page <= 0 {
        return FALLBACK_BUDGET;
    }
    ((pages as u64).saturating_mul(page as u64) / 4).min(MAX_DEFAULT_BUDGET)
}

/// The budget `DITTO_COLLECTOR_MEMORY_MIB` sets (`value` is its value),
/// or the default with a warning when it is not a positive number of MiB.
pub fn budget_from(value: Option<&str>) -> (u64, Option<String>) {
    let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return (default_budget(), None);
    };
    match value.parse::<u64>() {
        Ok(mib) if mib > 0 => (mib.saturating_mul(1 << 20), None),
        _ => {
            let budget = default_budget();
            (
                budget,
                Some(format!(
                    "{BUDGET_VARIABLE}=`{value}` is not a positive number of MiB; the collector's \
                     memory budget is {budget} bytes ({})",
                    crate::units::human_bytes(budget)
                )),
            )
        }
    }
}

pub struct MemoryBudget {
    total: u64,
    state: Mutex<State>,
    room: Condvar,
}

#[derive(Default)]
struct State {
    used: u64,
    peak: u64,
    /// Reservations waiting for room (a release wakes them only if any).
    waiting: usize,
}

/// What the budget holds now, and held at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryUse {
    pub total: u64,
    pub used: u64,
    pub peak: u64,
}

/// Bytes of the budget held until dropped.
#[must_use = "the bytes are given back when the reservation is dropped"]
pub struct Reservation {
    budget: Arc<MemoryBudget>,
    bytes: u64,
}

impl Reservation {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl std::fmt::Debug for Reservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Reservation({} bytes)", self.bytes)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
    }
}

/// Why bytes were not reserved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// More than the whole budget: it can never fit.
    LargerThanBudget { asked: u64, total: u64 },
    /// No room came within the wait.
    NoRoom {
        asked: u64,
        total: u64,
        used: u64,
        waited: Duration,
    },
    /// The collector is stopping.
    Stopping,
}

impl Refusal {
    /// Why, and what to do, as the end of "cannot allocate N bytes for
    /// X: ...".
    pub fn why(&self) -> String {
        let bytes = |n: u64| format!("{n} bytes ({})", crate::units::human_bytes(n));
        match self {
            Refusal::LargerThanBudget { total, .. } => format!(
                "more than the collector's whole memory budget of {}: raise the budget \
                 ({BUDGET_VARIABLE}=MiB in the environment of the ditto that runs the collector), \
                 capture less (--arg-sizes, --dispatch), or let large device buffers travel by \
                 IPC, which streams them into their file instead of holding them in memory",
                bytes(*total)
            ),
            Refusal::NoRoom {
                total,
                used,
                waited,
                ..
            } => format!(
                "other captures held {} of the collector's memory budget of {} for {:.1} s: \
                 capture fewer processes or dispatches at once, or raise the budget \
                 ({BUDGET_VARIABLE}=MiB in the environment of the ditto that runs the collector)",
                bytes(*used),
                bytes(*total),
                waited.as_secs_f64()
            ),
            Refusal::Stopping => "the collector is stopping".to_string(),
        }
    }
}

/// How often a wait for room looks at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(50);

impl MemoryBudget {
    pub fn new(total: u64) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget {
            total,
            state: Mutex::new(State::default()),
            room: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn usage(&self) -> MemoryUse {
        let s = self.lock();
        MemoryUse {
            total: self.total,
            used: s.used,
            peak: s.peak,
        }
    }

    /// Reserves `bytes`, waiting at most `wait` for room (and no longer
    /// once `stop` is set). Refused at once when `bytes` exceeds the whole
    /// budget.
    pub fn reserve(
        self: &Arc<Self>,
        bytes: u64,
        wait: Duration,
        stop: &AtomicBool,
    ) -> Result<Reservation, Refusal> {
        if bytes > self.total {
            return Err(Refusal::LargerThanBudget {
                asked: bytes,
                total: self.total,
            });
        }
        let started = Instant::now();
        let mut state = self.lock();
        loop {
            if state.used.saturating_add(bytes) <= self.total {
                state.used += bytes;
                state.peak = state.peak.max(state.used);
                return Ok(Reservation {
                    budget: self.clone(),
                    bytes,
                });
            }
            if stop.load(Ordering::SeqCst) {
                return Err(Refusal::Stopping);
            }
            let waited = started.elapsed();
            if waited >= wait {
                return Err(Refusal::NoRoom {
                    asked: bytes,
                    total: self.total,
                    used: state.used,
                    waited,
                });
            }
            state.waiting += 1;
            let (next, _) = self
                .room
                .wait_timeout(state, (wait - waited).min(STOP_POLL))
                .unwrap_or_else(|e| e.into_inner());
            state = next;
            state.waiting -= 1;
        }
    }

    fn release(&self, bytes: u64) {
        let mut state = self.lock();
        state.used = state.used.saturating_sub(bytes);
        let wake = state.waiting > 0;
        drop(state);
        if wake {
            self.room.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(30);

    #[test]
    fn reservations_count_until_dropped_and_the_peak_is_kept() {
        let budget = MemoryBudget::new(100);
        let stop = AtomicBool::new(false);
        let a = budget.reserve(60, LONG, &stop).unwrap();
        let b = budget.reserve(40, LONG, &stop).unwrap();
        assert_eq!(
            budget.usage(),
            MemoryUse {
                total: 100,
                used: 100,
                peak: 100
            }
        );
        drop(a);
        assert_eq!(budget.usage().used, 40);
        drop(b);
        assert_eq!(budget.usage().used, 0);
        assert_eq!(budget.usage().peak, 100);
    }

    #[test]
    fn more_than_the_whole_budget_is_refused_at_once_naming_both_sizes_and_the_knob() {
        let budget = MemoryBudget::new(1 << 20);
        let stop = AtomicBool::new(false);
        let started = Instant::now();
        let refusal = budget.reserve((1 << 20) + 1, LONG, &stop).unwrap_err();
        assert!(started.elapsed() < LONG);
        assert_eq!(
            refusal,
            Refusal::LargerThanBudget {
                asked: (1 << 20) + 1,
                total: 1 << 20
            }
        );
        let text = refusal.why();
        assert!(
            text.starts_with(
                "more than the collector's whole memory budget of 1048576 bytes (1.0 MiB)"
            ) && text.contains(BUDGET_VARIABLE)
                && text.contains("IPC"),
            "{text}"
        );
        assert_eq!(budget.usage().used, 0);
    }

    #[test]
    fn a_reservation_that_does_not_fit_waits_for_room_and_gets_it_when_given_back() {
        let budget = MemoryBudget::new(100);
        let stop = Arc::new(AtomicBool::new(false));
        let held = budget.reserve(80, LONG, &stop).unwrap();
        let waiter = {
            let (budget, stop) = (budget.clone(), stop.clone());
            std::thread::spawn(move || budget.reserve(50, LONG, &stop).map(|r| r.bytes()))
        };
        // It waits while the 80 are held (the waiter is counted first).
        while budget.lock().waiting == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(budget.usage().used, 80);
        drop(held);
        assert_eq!(waiter.join().unwrap(), Ok(50));
        assert_eq!(budget.usage().used, 0);
        assert_eq!(budget.usage().peak, 80);
    }

    #[test]
    fn a_wait_ends_with_no_room_after_its_time_or_when_the_collector_stops() {
        let budget = MemoryBudget::new(100);
        let stop = Arc::new(AtomicBool::new(false));
        let _held = budget.reserve(80, LONG, &stop).unwrap();
        match budget.reserve(50, Duration::from_millis(100), &stop) {
            Err(Refusal::NoRoom {
                asked: 50,
                total: 100,
                used: 80,
                waited,
            }) => assert!(waited >= Duration::from_millis(100)),
            other => panic!("expected NoRoom, got {other:?}"),
        }
        let waiter = {
            let (budget, stop) = (budget.clone(), stop.clone());
            std::thread::spawn(move || budget.reserve(50, LONG, &stop).map(|r| r.bytes()))
        };
        while budget.lock().waiting == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        stop.store(true, Ordering::SeqCst);
        assert_eq!(waiter.join().unwrap(), Err(Refusal::Stopping));
    }

    #[test]
    fn a_panic_while_holding_a_reservation_gives_it_back() {
        let budget = MemoryBudget::new(100);
        let stop = AtomicBool::new(false);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _r = budget.reserve(70, LONG, &stop).unwrap();
            panic!("a bug while capturing");
        }));
        assert!(caught.is_err());
        assert_eq!(budget.usage().used, 0);
        assert!(budget.reserve(100, LONG, &stop).is_ok());
    }

    #[test]
    fn the_variable_sets_the_budget_in_mib_and_a_bad_value_is_said_and_ignored() {
        assert_eq!(budget_from(Some("64")), (64 << 20, None));
        assert_eq!(budget_from(None), (default_budget(), None));
        assert_eq!(budget_from(Some(" ")), (default_budget(), None));
        for bad in ["0", "-1", "lots", "1.5"] {
            let (budget, warning) = budget_from(Some(bad));
            assert_eq!(budget, default_budget());
            let warning = warning.unwrap();
            assert!(
                warning.contains(BUDGET_VARIABLE) && warning.contains(bad),
                "{warning}"
            );
        }
        let default = default_budget();
        assert!(default > 0 && default <= MAX_DEFAULT_BUDGET, "{default}");
    }
}
