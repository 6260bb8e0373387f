//! The one log level of ditto's tool library and its CLI: `DITTO_LOG`'s
//! text parsed, ordered from quiet to verbose, and displayed. Owns the
//! level's vocabulary only: each side keeps its own filter and default
//! (the tool library `warn`, the CLI `info`) and says what it does with a
//! value that does not parse.

use std::fmt;

/// How much ditto says: `Off` < `Error` < `Warn` < `Info` < `Debug`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum LogLevel {
    Off = 0,
    Error = 1,
    Warn = 2,
    Info = 3,
    Debug = 4,
}

impl LogLevel {
    /// Every level, quietest first.
    pub const ALL: [LogLevel; 5] = [
        LogLevel::Off,
        LogLevel::Error,
        LogLevel::Warn,
        LogLevel::Info,
        LogLevel::Debug,
    ];

    /// A `DITTO_LOG` value: `off`, `error`, `warn`, `info` or `debug`,
    /// in any case, surrounding space ignored. Also `none` and `0` for
    /// `off` and `warning` for `warn`; `trace` means `debug` (ditto has no
    /// finer level), in the tool library and in the CLI alike. `None` for
    /// anything else.
    pub fn parse(text: &str) -> Option<LogLevel> {
        Some(match text.trim().to_ascii_lowercase().as_str() {
            "off" | "none" | "0" => LogLevel::Off,
            "error" => LogLevel::Error,
            "warn" | "warning" => LogLevel::Warn,
            "info" => LogLevel::Info,
            "debug" | "trace" => LogLevel::Debug,
            _ => return None,
        })
    }

    /// The level's name as `DITTO_LOG` spells it.
    pub const fn name(self) -> &'static str {
        match self {
            LogLevel::Off => "off",
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
        }
    }

    /// Whether a filter set to `self` lets a line of level `line` through:
    /// never an `Off` line, else every line at most as verbose as `self`.
    pub fn allows(self, line: LogLevel) -> bool {
        line != LogLevel::Off && line <= self
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ditto_log_values_parse_to_one_level_each_and_trace_is_debug() {
        for (text, level) in [
            ("off", LogLevel::Off),
            ("none", LogLevel::Off),
            ("0", LogLevel::Off),
            ("error", LogLevel::Error),
            ("warn", LogLevel::Warn),
            ("warning", LogLevel::Warn),
            ("WARN", LogLevel::Warn),
            ("info", LogLevel::Info),
            (" debug ", LogLevel::Debug),
            ("debug", LogLevel::Debug),
            ("trace", LogLevel::Debug),
            ("TRACE", LogLevel::Debug),
        ] {
            assert_eq!(LogLevel::parse(text), Some(level), "{text:?}");
        }
        for text in ["", "loud", "1", "verbose", "warn,debug"] {
            assert_eq!(LogLevel::parse(text), None, "{text:?}");
        }
    }

    #[test]
    fn levels_order_quiet_to_verbose_and_display_as_they_parse() {
        assert!(LogLevel::ALL.windows(2).all(|w| w[0] < w[1]));
        for level in LogLevel::ALL {
            assert_eq!(LogLevel::parse(&level.to_string()), Some(level));
        }
        assert_eq!(LogLevel::Warn.to_string(), "warn");
    }

    #[test]
    fn a_filter_lets_through_lines_up_to_its_level_and_never_off() {
        assert!(LogLevel::Warn.allows(LogLevel::Error));
        assert!(LogLevel::Warn.allows(LogLevel::Warn));
        assert!(!LogLevel::Warn.allows(LogLevel::Info));
        assert!(!LogLevel::Off.allows(LogLevel::Error));
        assert!(!LogLevel::Debug.allows(LogLevel::Off));
    }
}
