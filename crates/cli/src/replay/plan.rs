//! A replay capture as the replayer reads it: one dispatch's launch (the
//! manifest's `launch`), its images (the `replay` buffers: whole
//! allocations at their original addresses, and module variables by
//! name), the outputs the application produced (the `after` buffers) and
//! the page-aligned address ranges the images need. Owns reading and
//! checking that record only; nothing here touches a runtime.
//!
//! A snapshot is data anyone may hand over: every number the replay acts
//! on (grid and workgroup sizes, each buffer's offset and extent within
//! its allocation, the kernel-argument bytes against the kernel's
//! arguments) is checked here, with checked arithmetic, before anything
//! runs; one no capture can hold is a corrupt snapshot naming the
//! manifest and the field, never a panic, a fault or a verdict.

use crate::store::{BufferRecord, DispatchRecord, LaunchRecord, MANIFEST_FILE, Snapshot};
use ditto_protocol::Phase;
use std::path::{Path, PathBuf};

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
    #[error(
        "corrupt snapshot: {manifest}: {what}; the manifest was changed or damaged after ditto \
         wrote it: capture the dispatch again"
    )]
    Corrupt { manifest: PathBuf, what: String },
}

/// The most work-items of one workgroup (a CUDA block) on any GPU ditto
/// replays on: HSA's and CUDA's limit alike.
pub const MAX_WORKGROUP: u64 = 1024;

/// No process's memory lies at or above this address (user addresses
/// take at most 57 bits), so no captured range may end past it.
pub const ADDRESS_LIMIT: u64 = 1 << 63;

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
    /// The manifest the record was read from (the rank's part's, in a run
    /// of one collector per node), for messages.
    pub manifest: PathBuf,
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
    let manifest = snapshot.dir_of_rank(rank).join(MANIFEST_FILE);
    let corrupt = |what: String| PlanError::Corrupt {
        manifest: manifest.clone(),
        what: format!("dispatch {index} of rank {rank}: {what}"),
    };
    check_sizes(record).map_err(corrupt)?;
    for b in &record.buffers {
        check_buffer(b).map_err(|what| {
            corrupt(format!(
                "tensor {} (argument {}, {}): {what}",
                b.tensor,
                b.arg,
                phase_name(b.phase)
            ))
        })?;
    }
    let kernarg = launch
        .kernarg_bytes()
        .map_err(|e| corrupt(format!("kernarg: {e}")))?;
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
            // Within 2^63: `check_buffer` held offset + extent to the allocation.
            Phase::After => outputs.push(OutputRef {
                position,
                arg: b.arg,
                address: b.alloc_base + b.offset,
                extent: b.extent,
            }),
            Phase::Before => {}
        }
    }
    // An output is read back from memory the replay restored; anywhere
    // else it would be memory the kernel never had.
    let restored = |o: &OutputRef| {
        images
            .iter()
            .filter(|i| i.variable.is_none())
            .any(|i| o.address >= i.base && o.address + o.extent <= i.base + i.size)
    };
    if let Some(o) = outputs.iter().find(|o| !restored(o)) {
        return Err(PlanError::Invalid {
            dir,
            what: format!(
                "dispatch {index} of rank {rank}: output argument {} (0x{:x}, {} bytes) lies in \
                 none of the allocations the capture holds for replay; its allocation was not \
                 captured (`ditto inspect` lists what is missing), or the manifest was changed",
                o.arg, o.address, o.extent
            ),
        });
    }
    let ranges = merged_ranges(
        images
            .iter()
            .filter(|i| i.variable.is_none())
            .map(|i| (i.base, i.size)),
    );
    Ok(DispatchPlan {
        manifest,
        record: record.clone(),
        launch,
        kernarg,
        code_object,
        images,
        outputs,
        ranges,
    })
}

/// `before`, `after` or `replay`, as the manifest says.
fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Before => "before",
        Phase::After => "after",
        Phase::Replay => "replay",
    }
}

/// Why the grid and workgroup sizes cannot be a dispatch's, if they cannot.
fn check_sizes(d: &DispatchRecord) -> Result<(), String> {
    const AXES: [&str; 3] = ["x", "y", "z"];
    if let Some(axis) = d.grid.iter().position(|&g| g == 0) {
        return Err(format!(
            "grid {:?} is 0 along {}: a dispatch has at least one work-item along each axis",
            d.grid, AXES[axis]
        ));
    }
    if let Some(axis) = d.block.iter().position(|&b| b == 0) {
        return Err(format!(
            "block {:?} is 0 along {}: a workgroup has at least one work-item along each axis",
            d.block, AXES[axis]
        ));
    }
    let work_items: u64 = d.block.iter().map(|&b| u64::from(b)).product();
    if work_items > MAX_WORKGROUP {
        return Err(format!(
            "block {:?} is {work_items} work-items, more than the {MAX_WORKGROUP} of any GPU's \
             workgroup",
            d.block
        ));
    }
    Ok(())
}

/// Why a buffer's numbers cannot be a capture's, if they cannot: its
/// extent is its elements' bytes (the data file holds that many, as the
/// reader checks), and offset and extent lie within its allocation, which
/// ends below [`ADDRESS_LIMIT`].
fn check_buffer(b: &BufferRecord) -> Result<(), String> {
    let dtype = b.dtype().map_err(|e| e.to_string())?;
    let bytes = b.elements.checked_mul(dtype.size() as u64);
    if bytes != Some(b.extent) {
        return Err(format!(
            "extent {} is not the bytes of its {} {} elements ({})",
            b.extent,
            b.elements,
            dtype.name(),
            bytes.map_or_else(|| "more than 2^64".into(), |n| format!("{n} bytes"))
        ));
    }
    match b.offset.checked_add(b.extent) {
        Some(end) if end <= b.alloc_size => {}
        _ => {
            return Err(format!(
                "offset {} + extent {} runs past its allocation's {} bytes (alloc_size)",
                b.offset, b.extent, b.alloc_size
            ));
        }
    }
    match b.alloc_base.checked_add(b.alloc_size) {
        Some(end) if end <= ADDRESS_LIMIT => Ok(()),
        _ => Err(format!(
            "alloc_base 0x{:x} + alloc_size {} ends past 2^63, where no process's memory lies",
            b.alloc_base, b.alloc_size
        )),
    }
}

/// Checks the kernel-argument bytes against the captured kernel's in its
/// code object `code` (read from `code_path`): at least as many as its
/// arguments take, at most its kernel-argument segment (hidden arguments
/// included). A code object without AMDGPU metadata for the symbol (a
/// CUDA cubin, whose parameters the driver checks) passes.
pub fn check_kernarg(plan: &DispatchPlan, code: &[u8], code_path: &Path) -> Result<(), PlanError> {
    let Ok(Some(kernels)) = ditto_kernels::parse_code_object(code) else {
        return Ok(());
    };
    let Some(kernel) = kernels.iter().find(|k| k.symbol == plan.launch.symbol) else {
        return Ok(());
    };
    let arguments = kernel
        .explicit_args()
        .iter()
        .map(|a| a.offset.saturating_add(a.size))
        .max()
        .unwrap_or(0);
    let held = plan.kernarg.len() as u64;
    let segment = kernel.kernarg_segment_size.max(arguments);
    if held >= arguments && held <= segment {
        return Ok(());
    }
    let (index, rank) = (plan.record.index, plan.record.rank);
    let how = match held < arguments {
        true => format!("but `{}`'s arguments take {arguments}", plan.launch.symbol),
        false => format!(
            "more than `{}`'s kernel-argument segment of {segment}",
            plan.launch.symbol
        ),
    };
    Err(PlanError::Corrupt {
        manifest: plan.manifest.clone(),
        what: format!(
            "dispatch {index} of rank {rank}: kernarg holds {held} bytes, {how} (its code object \
             {})",
            code_path.display()
        ),
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

    /// A replay capture's manifest of saxpy (x, y, a, n): x and y's memory
    /// at 0x100000 and 0x200000, y the output; `edit` changes dispatch 0.
    fn planned(edit: impl FnOnce(&mut serde_json::Value)) -> Result<DispatchPlan, PlanError> {
        let buffer =
            |arg: u32, tensor: &str, phase: &str, dtype: &str, elements: u64, base: u64| {
                serde_json::json!({
                    "arg": arg, "tensor": tensor, "phase": phase, "dtype": dtype,
                    "shape": [elements], "elements": elements, "owner_pid": 1,
                    "alloc_base": base, "alloc_size": 1024, "offset": 0, "extent": 1024,
                    "fingerprint": 0, "transport": "shared-memory"
                })
            };
        let mut m = serde_json::json!({
            "format": 1, "ditto_version": "0", "kernel_query": "saxpy", "runs": [],
            "kernel": null, "dispatched_kernels": [], "missing": [],
            "dispatches": [{
                "rank": 0, "index": 0, "pid": 1, "grid": [256, 1, 1], "block": [64, 1, 1],
                "file": "dispatch-0-00000.safetensors",
                "buffers": [
                    buffer(0, "memory0", "replay", "bytes", 1024, 0x10_0000),
                    buffer(1, "memory1", "replay", "bytes", 1024, 0x20_0000),
                    buffer(1, "arg1", "after", "float32", 256, 0x20_0000),
                ],
                "launch": {
                    "kernarg": "000010000000000000002000000000000000004000010000",
                    "group_segment_size": 0, "private_segment_size": 0,
                    "symbol": "_Z5saxpyPKfPffi.kd", "code_object": null, "isa": "gfx90a",
                    "variables": [], "all_allocations": false
                }
            }]
        });
        edit(&mut m["dispatches"][0]);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(MANIFEST_FILE), m.to_string()).unwrap();
        let snapshot = Snapshot::load(dir.path()).unwrap();
        plan(&snapshot, 0, 0)
    }

    /// `planned`'s error, which must be a corrupt snapshot's.
    fn corrupt(edit: impl FnOnce(&mut serde_json::Value)) -> String {
        match planned(edit) {
            Err(e @ PlanError::Corrupt { .. }) => e.to_string(),
            other => panic!("not a corrupt snapshot: {other:?}"),
        }
    }

    #[test]
    fn a_capture_s_numbers_plan() {
        let p = planned(|_| {}).unwrap();
        assert_eq!(p.ranges, vec![(0x10_0000, 0x1000), (0x20_0000, 0x1000)]);
        assert_eq!(
            (p.outputs[0].address, p.outputs[0].extent),
            (0x20_0000, 1024)
        );
        assert_eq!(p.kernarg.len(), 24);
    }

    #[test]
    fn numbers_no_capture_can_hold_are_a_corrupt_snapshot_naming_the_field() {
        let e = corrupt(|d| d["buffers"][2]["extent"] = u64::MAX.into());
        assert!(
            e.contains(
                "tensor arg1 (argument 1, after): extent 18446744073709551615 is not the \
                        bytes of its 256 float32 elements (1024 bytes)"
            ),
            "{e}"
        );
        let e = corrupt(|d| d["buffers"][2]["offset"] = u64::MAX.into());
        assert!(
            e.contains(
                "offset 18446744073709551615 + extent 1024 runs past its allocation's 1024 bytes"
            ),
            "{e}"
        );
        let e = corrupt(|d| d["buffers"][0]["alloc_base"] = (u64::MAX - 10).into());
        assert!(e.contains("ends past 2^63"), "{e}");
        let e = corrupt(|d| d["grid"] = serde_json::json!([256, 0, 1]));
        assert!(e.contains("grid [256, 0, 1] is 0 along y"), "{e}");
        let e = corrupt(|d| d["block"] = serde_json::json!([64, 64, 1]));
        assert!(e.contains("block [64, 64, 1] is 4096 work-items"), "{e}");
        let e = corrupt(|d| d["launch"]["kernarg"] = "0g".into());
        assert!(e.contains("kernarg: ") && e.contains("not hex"), "{e}");
        assert!(
            e.starts_with("corrupt snapshot: ")
                && e.contains("manifest.json: dispatch 0 of rank 0")
        );
    }

    #[test]
    fn an_output_outside_the_restored_memory_is_refused() {
        let e = planned(|d| d["buffers"][2]["alloc_base"] = 0x30_0000.into())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("output argument 1 (0x300000, 1024 bytes) lies in none of the allocations"),
            "{e}"
        );
    }

    #[test]
    fn kernel_arguments_are_checked_against_the_kernel_s() {
        let code = std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../kernels/tests/fixtures/qualifiers-v4.co"),
        )
        .unwrap();
        let at = Path::new("k.co");
        assert!(check_kernarg(&planned(|_| {}).unwrap(), &code, at).is_ok());
        let short = planned(|d| d["launch"]["kernarg"] = "00".repeat(16).into()).unwrap();
        let e = check_kernarg(&short, &code, at).unwrap_err().to_string();
        assert!(
            e.contains("kernarg holds 16 bytes, but `_Z5saxpyPKfPffi.kd`'s arguments take 24"),
            "{e}"
        );
        let long = planned(|d| d["launch"]["kernarg"] = "00".repeat(4096).into()).unwrap();
        let e = check_kernarg(&long, &code, at).unwrap_err().to_string();
        assert!(e.contains("kernarg holds 4096 bytes, more than"), "{e}");
    }

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
