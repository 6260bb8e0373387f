//! An event trace for tests, off unless `DITTO_HSA_CPU_TRACE=<file>` is set:
//! what the application wrote into intercept queues (`app <packet>`), what
//! the interceptors passed on to the hardware ring (`ring <packet>`), and the
//! signal creations and waits requested through the API (`signal-create`,
//! `signal-wait`), IPC exports (`ipc-create`), writer calls that overflowed
//! an intercept queue's hardware ring (`overflow`) and interceptor calls
//! made on the runtime's async thread rather than on the application's
//! storing thread (`intercept-async`), and every API call that returned a
//! status other than SUCCESS or INFO_BREAK (`error <function> <status>`).
//! Packets are their 64 bytes in hex.
//! Lines are appended whole (O_APPEND), so several threads and processes
//! may share one file.
//!
//! Tracing never changes what the runtime does; a file that cannot be opened
//! disables it with one message. It uses no other module of the crate
//! (callers pass what it needs to know), so every module may trace.

use hsa::AqlPacket;
use std::fs::File;
use std::io::Write;
use std::sync::OnceLock;

static TRACE: OnceLock<Option<File>> = OnceLock::new();

/// The trace file; inlined to one load on the packet path once decided.
#[inline]
fn file() -> Option<&'static File> {
    match TRACE.get() {
        Some(decided) => decided.as_ref(),
        None => open_once(),
    }
}

#[cold]
fn open_once() -> Option<&'static File> {
    TRACE
        .get_or_init(|| {
            let path = std::env::var_os("DITTO_HSA_CPU_TRACE")?;
            match std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
            {
                Ok(f) => Some(f),
                Err(e) => {
                    eprintln!(
                        "hsa-cpu: cannot open DITTO_HSA_CPU_TRACE={}: {e}",
                        path.to_string_lossy()
                    );
                    None
                }
            }
        })
        .as_ref()
}

fn line(text: &str) {
    if let Some(mut f) = file() {
        let _ = f.write_all(text.as_bytes());
    }
}

/// Records one packet passing `stage` (`app` or `ring`).
#[inline]
pub(crate) fn packet(stage: &str, p: &AqlPacket) {
    if file().is_some() {
        packet_line(stage, p);
    }
}

#[cold]
fn packet_line(stage: &str, p: &AqlPacket) {
    let mut text = String::with_capacity(stage.len() + 130);
    text.push_str(stage);
    text.push(' ');
    for b in p.0 {
        text.push_str(&format!("{b:02x}"));
    }
    text.push('\n');
    line(&text);
}

/// Records an event without payload (`signal-create`, `signal-wait`,
/// `ipc-create`, `overflow`).
pub(crate) fn event(name: &str) {
    if file().is_some() {
        line(&format!("{name}\n"));
    }
}

/// Records `intercept-async` when an interceptor is about to be called on
/// the runtime's async thread; `on_async_thread` (the caller's check,
/// `signals` owns that thread) is asked only while tracing.
#[inline]
pub(crate) fn interceptor_call(on_async_thread: impl FnOnce() -> bool) {
    if file().is_some() && on_async_thread() {
        line("intercept-async\n");
    }
}
