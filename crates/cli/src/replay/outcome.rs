//! What a replay process is given and what it leaves in its work
//! directory: its arguments ([`ChildArgs`]), its result
//! (`result-<rank>-<index>.json`, [`ChildResult`]) and one file per output.
//! Shared by the parent (`ditto replay`) and both replay processes (HSA,
//! CUDA); plain data and file names.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What `ditto replay` asks of one replay process.
#[derive(Debug, Clone)]
pub struct ChildArgs {
    pub snapshot: PathBuf,
    pub rank: u32,
    pub index: u64,
    /// Where outputs and the result go.
    pub work: PathBuf,
    /// The HSA runtime library to load.
    pub runtime: PathBuf,
    /// A replacement code object (else the captured one).
    pub kernel_object: Option<PathBuf>,
    pub iterations: u32,
    pub timeout: Duration,
    /// Place every range elsewhere, as when its addresses are taken.
    pub relocate: bool,
}

/// What a replay process reports (`result-<rank>-<index>.json`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ChildResult {
    /// Each iteration's kernel time from the runtime's dispatch
    /// timestamps, in nanoseconds (null where it gave none).
    pub times_ns: Vec<Option<u64>>,
    /// Ranges not placed at their original address: (original, placed, size).
    pub relocated: Vec<(u64, u64, u64)>,
    /// Module variables of the capture the loaded code object lacks.
    pub variables_missing: Vec<String>,
    /// Files holding the outputs, by argument, in the order of the plan's outputs.
    pub outputs: Vec<(u32, String)>,
}

/// The result file's name for a dispatch.
pub fn result_file(rank: u32, index: u64) -> String {
    format!("result-{rank}-{index}.json")
}

/// The file of one output of a dispatch.
pub fn output_file(rank: u32, index: u64, arg: u32) -> String {
    format!("output-{rank}-{index}-arg{arg}.bin")
}

/// The work directory's result of a dispatch.
pub fn read_result(work: &Path, rank: u32, index: u64) -> Result<ChildResult> {
    let path = work.join(result_file(rank, index));
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(serde_json::from_slice(&bytes)?)
}
