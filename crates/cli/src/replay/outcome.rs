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

/// A captured range as a replay process placed it: its original start,
/// where it is, its size.
pub struct Placed {
    pub original: u64,
    pub at: u64,
    pub size: u64,
}

/// Where `address` of the captured process is in this one: moved with its
/// range, or where it was when no range holds it.
pub fn relocate(placed: &[Placed], address: u64) -> u64 {
    placed
        .iter()
        .find(|p| address >= p.original && address < p.original + p.size)
        .map_or(address, |p| address - p.original + p.at)
}

impl ChildArgs {
    /// Writes an output's bytes into the work directory: (its argument,
    /// its file), for [`ChildResult::outputs`].
    pub fn write_output(&self, arg: u32, bytes: &[u8]) -> Result<(u32, String)> {
        let file = output_file(self.rank, self.index, arg);
        std::fs::write(self.work.join(&file), bytes)?;
        Ok((arg, file))
    }

    /// Writes the process's result, its relocated ranges taken from `placed`.
    pub fn write_result(
        &self,
        times_ns: Vec<Option<u64>>,
        placed: &[Placed],
        variables_missing: Vec<String>,
        outputs: Vec<(u32, String)>,
    ) -> Result<()> {
        let result = ChildResult {
            times_ns,
            relocated: placed
                .iter()
                .filter(|p| p.at != p.original)
                .map(|p| (p.original, p.at, p.size))
                .collect(),
            variables_missing,
            outputs,
        };
        std::fs::write(
            self.work.join(result_file(self.rank, self.index)),
            serde_json::to_vec_pretty(&result)?,
        )?;
        Ok(())
    }
}
