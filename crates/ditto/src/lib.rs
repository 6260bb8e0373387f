//! The `ditto` command as a library: the collector that maps, copies and
//! unmaps the buffers applications export, the snapshot store, the
//! comparison engine and its reports, and the subcommands that tie them
//! together. `src/main.rs` only parses arguments and maps results to exit
//! codes (0 valid, 1 mismatch, 2 error).

pub mod collector;
pub mod commands;
pub mod compare;
pub mod diagnose;
pub mod hipcc;
pub mod inspect;
pub mod kernel_list;
pub mod launch;
pub mod log;
pub mod mcp;
pub mod progress;
pub mod report;
pub mod runtime;
pub mod scratch;
pub mod stdout;
pub mod store;
pub mod units;

use std::path::PathBuf;

/// Directory of the running executable: where `libditto.so` and
/// `hsa-cpu/` are found next to `ditto` (target/<profile>/).
pub fn executable_dir() -> std::io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    exe.parent()
        .map(|p| p.to_path_buf())
        .ok_or_else(|| std::io::Error::other(format!("{} has no parent directory", exe.display())))
}
