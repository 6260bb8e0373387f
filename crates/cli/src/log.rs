//! ditto's own status lines and warnings on stderr, filtered by `DITTO_LOG`
//! (`off|error|warn|info|debug`, `trace` meaning debug; default `info`; the
//! same variable sets the tool library's filter inside the application,
//! default `warn` there). The level is `ditto_types::LogLevel`, the one the
//! tool library parses the same variable with, so a value means the same
//! on both sides. Errors that end a command are printed by main whatever
//! the filter says, except under `off`. Owns the filter only; never decides
//! what to say.

use std::sync::OnceLock;

/// The CLI's modules name the shared level `Level`.
pub use ditto_types::LogLevel as Level;

/// The CLI's filter when `DITTO_LOG` is unset or does not parse.
pub const DEFAULT_LEVEL: Level = Level::Info;

static LEVEL: OnceLock<Level> = OnceLock::new();

/// The filter: `DITTO_LOG`, read once; unknown values mean `info`.
pub fn level() -> Level {
    *LEVEL.get_or_init(|| {
        std::env::var("DITTO_LOG")
            .ok()
            .and_then(|v| Level::parse(&v))
            .unwrap_or(DEFAULT_LEVEL)
    })
}

pub fn enabled(at: Level) -> bool {
    level().allows(at)
}

/// "ditto: warning: ..." unless filtered out.
pub fn warn(message: &str) {
    if enabled(Level::Warn) {
        eprintln!("ditto: warning: {message}");
    }
}

/// "ditto: ..." status line unless filtered out.
pub fn info(message: &str) {
    if enabled(Level::Info) {
        eprintln!("ditto: {message}");
    }
}

/// "ditto: debug: ..." only with DITTO_LOG=debug (or trace).
pub fn debug(message: &str) {
    if enabled(Level::Debug) {
        eprintln!("ditto: debug: {message}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_and_order_like_the_tool_library() {
        assert_eq!(Level::parse("WARN"), Some(Level::Warn));
        assert_eq!(Level::parse(" debug "), Some(Level::Debug));
        assert_eq!(Level::parse("loud"), None);
        assert!(Level::Error < Level::Warn && Level::Info < Level::Debug);
        assert_eq!(Level::parse("trace"), Some(Level::Debug), "as in the tool");
    }
}
