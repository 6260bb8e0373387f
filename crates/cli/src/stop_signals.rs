//! SIGINT and SIGTERM while ditto runs an application or serves as a
//! collector: they set a flag instead of killing ditto, so that it can
//! report and clean up, one sent to ditto alone is passed on to the
//! application, and a helper process's group (the replay process's) is
//! killed. Owns the handler and the flag; what a command does once asked
//! to stop is the command's.

use crate::launch;
use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    _context: *mut libc::c_void,
) {
    STOP.store(true, Ordering::SeqCst);
    // A helper process (the replay process) runs in a group of its own,
    // which no terminal's signal reaches: it is killed, group and all.
    launch::kill_helper_group();
    // A SIGINT the terminal sent (Ctrl-C, si_code > 0) reached the whole
    // process group, the application with it; one sent to ditto alone
    // (kill, si_code <= 0) did not.
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let from_a_process = info.is_null() || unsafe { (*info).si_code } <= 0;
    if signal == libc::SIGTERM || from_a_process {
        launch::forward_signal_to_application(signal);
    }
}

/// SIGINT/SIGTERM set a flag instead of killing ditto, so it can report
/// and clean up. The application, in the same process group, gets Ctrl-C
/// itself; a SIGTERM or SIGINT sent to ditto alone is passed on to it
/// (otherwise ditto would wait for an application that was never told to
/// stop). The handler is reset to default in the child by exec.
pub fn catch_stop_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: an all-zero sigaction is valid; the handler only stores
        // to atomics and calls kill, which are async-signal-safe.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_stop_signal as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}

/// Whether a SIGINT or SIGTERM arrived since [`catch_stop_signals`].
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}
