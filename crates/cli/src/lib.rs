//! The `ditto` command as a library: the collector that maps, copies and
//! unmaps the buffers applications export, the reports of comparisons, and
//! the subcommands that tie them together (the snapshot store and the
//! comparison engine are the `ditto-snapshot` crate's). `src/main.rs`
//! only parses arguments and maps results to exit codes (0 valid, 1
//! mismatch, 2 error).

pub mod collector;
pub mod commands;
pub mod inspect;
pub mod kernel_list;
pub mod launch;
pub mod log;
pub mod mcp;
pub mod model_preflight;
pub mod program_file;
pub mod progress;
pub mod replay;
pub mod report;
pub mod run_outcome;
pub mod runtime_choice;
pub mod scratch;
pub mod stdout;
pub mod stop_signals;
pub mod units;

// The snapshot crate's modules, where the CLI's code and tests name them.
pub use ditto_snapshot::{compare, diagnose, store};

use std::path::PathBuf;

/// Directory of the running executable: where `libditto.so` and
/// `hsa-cpu/` are found next to `ditto` (`target/<profile>/`).
pub fn executable_dir() -> std::io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    exe.parent()
        .map(|p| p.to_path_buf())
        .ok_or_else(|| std::io::Error::other(format!("{} has no parent directory", exe.display())))
}
