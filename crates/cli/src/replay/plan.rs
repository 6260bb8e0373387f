//! A replay capture as the replayer reads it: one dispatch's launch (the
//! manifest's `launch`), its images (the `replay` buffers: whole
//! allocations at their original addresses, and module variables by
//! name), the outputs the application produced (the `after` buffers) and
//! the page-aligned address ranges the images need. Owns reading and
//! checking that record only; nothing here touches a runtime.

use crate::store::{DispatchRecord, LaunchRecord, Snapshot};
use ditto_protocol::Phase;
use std::path::PathBuf;

/// The page size ranges are aligned to (ROCr reserves in pages of the
/// system's size; 4 KiB on x86-64).
pub const PAGE: u64 = 4096;

/// Why a dispatch cannot be replayed from a snapshot.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(
        "{dir}: no dispatch of this snapshot can be replayed: it was captured without replay \
         data; capture it again with `--capture replay` (or `replay-all` for kernels that \
         follow pointers stored in memory)"
    )]
    NoReplayData { dir: PathBuf },
    #[error("{dir}: dispatch {index} of rank {rank} was not captured with replay data")]
    NotReplayable { dir: PathBuf, rank: u32, index: u64 },
    #[error(
        "{dir}: dispatch {index} of `{kernel}` has no code object ({why}); it cannot be \
         replayed with its own kernel (give one with --kernel-object or --from)"
    )]
    NoCodeObject {
        dir: PathBuf,
        index: u64,
        kernel: String,
        why: String,
    },
    #[error("{dir}: {what}")]
    Invalid { dir: PathBuf, what: String },
}

/// One image of the memory before the kernel.
#[derive(Debug, Clone)]
pub struct ImageRef {
    /// Position among the dispatch's buffers (its array in `load_dispatch`).
    pub position: usize,
    pub base: u64,
    pub size: u64,
    /// The module variable's symbol, for a variable (restored by name).
    pub variable: Option<String>,
}

/// One output the application produced.
#[derive(Debug, Clone)]
pub struct OutputRef {
    pub position: usize,
    pub arg: u32,
    /// Original address of the first byte compared, and how many.
    pub address: u64,
    pub extent: u64,
}

/// A replayable dispatch.
#[derive(Debug, Clone)]
pub struct DispatchPlan {
    pub record: DispatchRecord,
    pub launch: LaunchRecord,
    pub kernarg: Vec<u8>,
    /// The captured code object's path, when there is one.
    pub code_object: Option<PathBuf>,
    pub images: Vec<ImageRef>,
    pub outputs: Vec<OutputRef>,
    /// Page-aligned, merged ranges covering every image that is not a
    /// variable: (start, size).
    pub ranges: Vec<(u64, u64)>,
}

/// The dispatches of `snapshot` that carry replay data.
pub fn replayable(snapshot: &Snapshot) -> Vec<&DispatchRecord> {
    snapshot
        .manifest
        .dispatches
        .iter()
        .filter(|d| d.launch.is_some())
        .collect()
}

/// The plan of dispatch `index` of rank `rank`.
pub fn plan(snapshot: &Snapshot, rank: u32, index: u64) -> Result<DispatchPlan, PlanError> {
    let dir = snapshot.dir.clone();
    let record = snapshot
        .manifest
        .dispatches
        .iter()
        .find(|d| d.rank == rank && d.index == index)
        .ok_or_else(|| PlanError::Invalid {
            dir: dir.clone(),
            what: format!("no dispatch {index} of rank {rank} in this snapshot"),
        })?;
    let launch = record
        .launch
        .as_deref()
        .cloned()
        .ok_or_else(|| PlanError::NotReplayable {
            dir: dir.clone(),
            rank,
            index,
        })?;
    let kernarg = launch.kernarg_bytes().map_err(|e| PlanError::Invalid {
        dir: dir.clone(),
        what: e.to_string(),
    })?;
    let code_object = match &launch.code_object {
        // In a run of one collector per node, the rank's node's part.
        Some(file) if crate::store::dir_handle::is_plain_name(file) => {
            Some(snapshot.dir_of_rank(rank).join(file))
        }
        Some(file) => {
            return Err(PlanError::Invalid {
                dir,
                what: format!("the launch names the code object {file:?}, not a file here"),
            });
        }
        None => None,
    };
    let variables: std::collections::HashMap<u32, &str> = launch
        .variables
        .iter()
        .map(|v| (v.image, v.name.as_str()))
        .collect();
    let mut images = Vec::new();
    let mut outputs = Vec::new();
    for (position, b) in record.buffers.iter().enumerate() {
        match b.phase {
            Phase::Replay => images.push(ImageRef {
                position,
                base: b.alloc_base,
                size: b.extent,
                variable: variables.get(&b.arg).map(|n| n.to_string()),
            }),
            Phase::After => outputs.push(OutputRef {
                position,
                arg: b.arg,
                address: b.alloc_base + b.offset,
                extent: b.extent,
            }),
            Phase::Before => {}
        }
    }
    let ranges = merged_ranges(
        images
            .iter()
            .filter(|i| i.variable.is_none())
            .map(|i| (i.base, i.size)),
    );
    Ok(DispatchPlan {
        record: record.clone(),
        launch,
        kernarg,
        code_object,
        images,
        outputs,
        ranges,
    })
}

/// Page-aligned ranges covering `(base, size)` pieces, overlapping or
/// touching ones merged, in address order.
pub fn merged_ranges(pieces: impl Iterator<Item = (u64, u64)>) -> Vec<(u64, u64)> {
    merged_ranges_aligned(pieces, PAGE)
}

/// [`merged_ranges`] aligned to `align` bytes (a CUDA driver's
/// allocation granularity) instead of a page.
pub fn merged_ranges_aligned(
    pieces: impl Iterator<Item = (u64, u64)>,
    align: u64,
) -> Vec<(u64, u64)> {
    let align = align.max(1);
    let mut spans: Vec<(u64, u64)> = pieces
        .filter(|&(_, size)| size > 0)
        .map(|(base, size)| {
            let start = base / align * align;
            let end = (base + size).div_ceil(align) * align;
            (start, end)
        })
        .collect();
    spans.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (start, end) in spans {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged.into_iter().map(|(s, e)| (s, e - s)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_whole_pages_and_neighbours_merge() {
        let r = merged_ranges(
            [
                (0x10_0000, 100),
                (0x10_0800, 10),
                (0x20_0000, 0x1000),
                (0x20_1000, 1),
                (0x30_0010, 0),
            ]
            .into_iter(),
        );
        assert_eq!(r, vec![(0x10_0000, 0x1000), (0x20_0000, 0x2000)]);
        // Grown to a 2 MiB granule, the two share one range.
        let g = merged_ranges_aligned([(0x10_0000, 100), (0x1f_0000, 1)].into_iter(), 2 << 20);
        assert_eq!(g, vec![(0, 2 << 20)]);
    }
}
