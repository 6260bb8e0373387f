//! The tool's stderr log: one line per event, prefixed `ditto: `, filtered
//! by `DITTO_LOG` (off | error | warn | info | debug, `trace` meaning
//! debug; default warn). The level is `ditto_types::LogLevel`, the one the
//! CLI reads the same variable with. Owns the filter only; never buffers,
//! never blocks on anything but stderr.

pub use ditto_types::LogLevel;
use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};

/// The tool's filter when `DITTO_LOG` is unset or does not parse.
pub const DEFAULT_LEVEL: LogLevel = LogLevel::Warn;

static LEVEL: AtomicU8 = AtomicU8::new(DEFAULT_LEVEL as u8);

pub fn set_level(level: LogLevel) {
    LEVEL.store(level as u8, Ordering::Relaxed);
}

/// Whether a line of `level` passes the filter (as `LogLevel::allows`,
/// without decoding the stored level: this runs on every log call).
pub fn enabled(level: LogLevel) -> bool {
    level != LogLevel::Off && level as u8 <= LEVEL.load(Ordering::Relaxed)
}

/// Writes `ditto: <message>` as one write, so lines of several threads do
/// not interleave.
pub fn write(level: LogLevel, args: std::fmt::Arguments<'_>) {
    if !enabled(level) {
        return;
    }
    let line = format!("ditto: {args}\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

macro_rules! log_error { ($($t:tt)*) => { $crate::log::write($crate::log::LogLevel::Error, format_args!($($t)*)) } }
macro_rules! log_warn { ($($t:tt)*) => { $crate::log::write($crate::log::LogLevel::Warn, format_args!($($t)*)) } }
macro_rules! log_info { ($($t:tt)*) => { $crate::log::write($crate::log::LogLevel::Info, format_args!($($t)*)) } }
macro_rules! log_debug { ($($t:tt)*) => { $crate::log::write($crate::log::LogLevel::Debug, format_args!($($t)*)) } }
pub(crate) use {log_debug, log_error, log_info, log_warn};
