//! A progress line on stderr while an application runs under the tool:
//! dispatches captured and bytes copied, redrawn in place a few times a
//! second. Only when stderr is a terminal and `DITTO_LOG` allows info;
//! otherwise nothing at all (logs and CI output stay clean). Owns the
//! drawing only; the counts come from the collector.

use crate::collector::Collector;
use crate::units::{human_bytes, plural};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const REDRAW: Duration = Duration::from_millis(200);

/// Whether a progress line is drawn: stderr is a terminal and info is on.
pub fn wanted() -> bool {
    // SAFETY: isatty only inspects the descriptor.
    let tty = unsafe { libc::isatty(libc::STDERR_FILENO) } == 1;
    tty && crate::log::enabled(crate::log::Level::Info)
}

/// "captured 12 dispatches (3.0 MiB)".
pub fn line(dispatches: u64, bytes: u64) -> String {
    format!(
        "ditto: captured {} ({})",
        plural(dispatches, "dispatch", "dispatches"),
        human_bytes(bytes)
    )
}

/// Runs `work`, drawing the progress line meanwhile when [`wanted`].
pub fn while_running<T>(collector: &Collector, work: impl FnOnce() -> T) -> T {
    if !wanted() {
        return work();
    }
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut drawn = false;
            while !done.load(Ordering::SeqCst) {
                let (dispatches, bytes) = collector.progress();
                if dispatches > 0 {
                    eprint!("\r\x1b[2K{}", line(dispatches, bytes));
                    let _ = std::io::stderr().flush();
                    drawn = true;
                }
                std::thread::sleep(REDRAW);
            }
            if drawn {
                eprint!("\r\x1b[2K");
            }
        });
        let result = work();
        done.store(true, Ordering::SeqCst);
        result
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_line_counts_dispatches_and_bytes() {
        assert_eq!(
            super::line(1, 512),
            "ditto: captured 1 dispatch (512 bytes)"
        );
        assert_eq!(
            super::line(12, 3 << 20),
            "ditto: captured 12 dispatches (3.0 MiB)"
        );
    }
}
