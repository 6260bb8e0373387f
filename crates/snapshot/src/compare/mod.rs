//! The comparison engine: pairs the dispatches of a reference and an
//! optimized snapshot and compares their arrays element by element with
//! torch.testing.assert_close's rules.
//!
//! Owns tolerances (per-dtype defaults, user overrides), the closeness rule
//! `|a - b| <= atol + rtol * |b|` (b = reference), NaN/inf handling and the
//! statistics of a mismatch. It never prints (see `report`) and never writes
//! files; structural differences (dtype, length, dispatch count, a kernel that
//! was never captured) are errors, not mismatches.
//!
//! `closeness` holds the element-wise rules, `scan` applies them fast
//! (monomorphic per dtype, in parallel chunks); this module pairs the
//! dispatches and arrays of two snapshots and applies them. A dispatch
//! (or buffer) the manifest lists as missing for a reason other than
//! `--dispatch` on either side, or captured on one side and not selected on
//! the other, is an error naming each one with its reason; dispatches that
//! neither side selected are not compared.

mod closeness;
#[cfg(test)]
mod properties;
mod scan;
#[cfg(test)]
mod tests;
mod timing;
mod written;

pub use closeness::*;
pub use scan::compare_arrays;
pub use timing::{DispatchTime, Timing, TimingSummary, human_duration};
pub use written::{OneSided, WrittenSet, compare_written};

use crate::store::missing::{self, MissingRecord};
use crate::store::{DispatchRecord, Manifest, Snapshot};
use ditto_protocol::MissReason;
use ditto_protocol::Phase;
use std::path::PathBuf;

/// One compared array and where it came from.
#[derive(Debug, Clone, PartialEq)]

pub struct ArrayComparison {
    pub rank: u32,
    /// Dispatch index within its process.
    pub dispatch: u64,
    pub arg: u32,
    /// The parameter's source name, when the build kept it (the
    /// reference's, else the optimized run's).
    pub name: Option<String>,
    /// Before or after the kernel ran.
    pub phase: Phase,
    pub stats: ArrayStats,
    /// Set when compared by what the kernels wrote (`written`).
    pub written: Option<WrittenSet>,
}

/// Everything `ditto compare` found.
#[derive(Debug, Clone, PartialEq)]
pub struct ComparisonReport {
    /// Demangled name of the reference's kernel.
    pub kernel: String,
    pub mangled: String,
    /// Demangled name of the optimized run's kernel when it differs.
    pub optimized_kernel: Option<String>,
    pub reference_dir: PathBuf,
    pub optimized_dir: PathBuf,
    pub dispatches_compared: usize,
    /// Whether more than one process (rank) took part.
    pub multi_rank: bool,
    pub options: CompareOptions,
    pub arrays: Vec<ArrayComparison>,
    /// Both sides' kernel times of each compared pair.
    pub timing: Timing,
}

impl ComparisonReport {
    pub fn valid(&self) -> bool {
        self.arrays.iter().all(|a| a.stats.matches())
    }
    pub fn mismatching(&self) -> impl Iterator<Item = &ArrayComparison> {
        self.arrays.iter().filter(|a| !a.stats.matches())
    }
}

/// What to say when the kernel asked for was never captured (see
/// [`crate::diagnose::what_ran`]).
pub fn what_ran(m: &Manifest) -> String {
    crate::diagnose::what_ran(m)
}

fn location(multi_rank: bool, d: &DispatchRecord, arg: Option<u32>) -> String {
    let mut s = String::new();
    if multi_rank {
        s.push_str(&format!("rank {}, ", d.rank));
    }
    s.push_str(&format!("dispatch {}", d.index));
    if let Some(arg) = arg {
        s.push_str(&format!(", arg {arg}"));
    }
    s
}

/// The snapshot with only the dispatches of kernels `query` names
/// (`--opt-kernel`: the optimized build's kernel, matched by the rules of
/// `--kernel`); an error naming what the snapshot holds when none is.
pub fn only_kernel(snapshot: &Snapshot, query: &str) -> Result<Snapshot, CompareError> {
    let named = |d: &DispatchRecord| {
        d.kernel.as_ref().is_some_and(|k| {
            ditto_kernels::matching::matches(query, &ditto_kernels::KernelNames::new(&k.mangled))
        })
    };
    let mut selected = snapshot.clone();
    selected.manifest.dispatches.retain(|d| named(d));
    if selected.manifest.dispatches.is_empty() {
        let mut held: Vec<String> = snapshot
            .manifest
            .dispatches
            .iter()
            .filter_map(|d| d.kernel.as_ref().map(|k| k.demangled.clone()))
            .collect();
        held.sort();
        held.dedup();
        return Err(CompareError::Usage(format!(
            "--opt-kernel {query:?} names no dispatch of {}: it holds {}",
            snapshot.dir.display(),
            if held.is_empty() {
                "no dispatch".to_string()
            } else {
                held.join(", ")
            }
        )));
    }
    if let Some(first) = selected
        .manifest
        .dispatches
        .iter()
        .find_map(|d| d.kernel.clone())
    {
        selected.manifest.kernel = Some(first);
    }
    Ok(selected)
}

/// Pairs dispatches by (rank, index) and arguments by position, then
/// compares every array.
pub fn compare_snapshots(
    reference: &Snapshot,
    optimized: &Snapshot,
    options: &CompareOptions,
) -> Result<ComparisonReport, CompareError> {
    let problems = uncaptured(reference, optimized);
    if !problems.is_empty() {
        let kernel = [reference, optimized]
            .iter()
            .find_map(|s| s.manifest.kernel.as_ref().map(|k| k.demangled.clone()))
            .unwrap_or_else(|| reference.manifest.kernel_query.clone());
        return Err(CompareError::NotCapturedDispatches {
            kernel,
            reference_dir: reference.dir.clone(),
            optimized_dir: optimized.dir.clone(),
            problems,
        });
    }
    for (which, s) in [("the reference", reference), ("the optimized", optimized)] {
        if s.manifest.dispatches.is_empty() {
            return Err(CompareError::NotCaptured {
                which,
                dir: s.dir.clone(),
                query: s.manifest.kernel_query.clone(),
                what_ran: what_ran(&s.manifest),
            });
        }
    }
    // A replay capture's images are what `ditto replay` restores, not
    // results: a reference captured for replay compares with any run.
    let ref_results: Vec<DispatchRecord> = reference
        .manifest
        .dispatches
        .iter()
        .map(results_only)
        .collect();
    let opt_results: Vec<DispatchRecord> = optimized
        .manifest
        .dispatches
        .iter()
        .map(results_only)
        .collect();
    let mut ref_d: Vec<&DispatchRecord> = ref_results.iter().collect();
    let mut opt_d: Vec<&DispatchRecord> = opt_results.iter().collect();
    ref_d.sort_by_key(|d| (d.rank, d.index));
    opt_d.sort_by_key(|d| (d.rank, d.index));
    let kernel = reference
        .manifest
        .kernel
        .clone()
        .unwrap_or_else(|| ditto_protocol::KernelName {
            mangled: String::new(),
            demangled: reference.manifest.kernel_query.clone(),
        });
    let keys = |v: &[&DispatchRecord]| v.iter().map(|d| (d.rank, d.index)).collect::<Vec<_>>();
    if keys(&ref_d) != keys(&opt_d) {
        let ranks = |s: &Snapshot| {
            let mut r: Vec<u32> = s.manifest.runs.iter().map(|r| r.rank).collect();
            r.sort_unstable();
            r.dedup();
            r
        };
        let (ref_ranks, opt_ranks) = (ranks(reference), ranks(optimized));
        let detail = if ref_ranks != opt_ranks {
            // A run of one collector per node whose node's collector did
            // not run, or died before its processes connected.
            format!(
                "the ranks differ: reference {ref_ranks:?}, optimized {opt_ranks:?}; every rank \
                 must be captured on both sides (with one collector per node, each node's \
                 collector must run for the whole job)"
            )
        } else if ref_d.len() != opt_d.len() {
            // Which processes dispatched it how often on each side: a
            // process that only compiles or benchmarks kernels (torch.compile's
            // compile workers, on a cold cache) shows up here.
            let count =
                |v: &[&DispatchRecord], rank: u32| v.iter().filter(|d| d.rank == rank).count();
            let differing: Vec<String> = ref_ranks
                .iter()
                .filter(|&&r| count(&ref_d, r) != count(&opt_d, r))
                .map(|&r| {
                    let command = reference
                        .manifest
                        .runs
                        .iter()
                        .find(|run| run.rank == r)
                        .map(|run| run.command_line.join(" "))
                        .unwrap_or_default();
                    let command: String = command.chars().take(120).collect();
                    format!(
                        "rank {r} ({command}): {} against {}",
                        count(&ref_d, r),
                        count(&opt_d, r)
                    )
                })
                .collect();
            format!(
                "the runs must dispatch the kernel equally often (same inputs and iteration \
                 counts); per process, reference against optimized: {} (a process that only \
                 compiles or benchmarks kernels, as torch.compile's compile workers do on a cold \
                 cache, launches them too: fill its cache first, or choose dispatches with \
                 --dispatch)",
                differing.join("; ")
            )
        } else {
            format!(
                "the (rank, dispatch) pairs differ: reference {:?}, optimized {:?}",
                keys(&ref_d),
                keys(&opt_d)
            )
        };
        return Err(CompareError::DispatchesDiffer {
            kernel: kernel.demangled.clone(),
            reference_dir: reference.dir.clone(),
            optimized_dir: optimized.dir.clone(),
            reference: ref_d.len(),
            optimized: opt_d.len(),
            detail,
        });
    }
    let multi_rank = ref_d.iter().chain(opt_d.iter()).any(|d| d.rank != 0);
    let kernels_of = |v: &[&DispatchRecord]| {
        let mut k: Vec<&str> = v
            .iter()
            .filter_map(|d| d.kernel.as_ref())
            .map(|k| k.mangled.as_str())
            .collect();
        k.sort_unstable();
        k.dedup();
        k.len()
    };
    let several_kernels = kernels_of(&ref_d) > 1 || kernels_of(&opt_d) > 1;
    let mut arrays = Vec::new();
    let mut timing = Timing::default();
    for (r, o) in ref_d.iter().zip(opt_d.iter()) {
        timing.dispatches.push(DispatchTime {
            rank: r.rank,
            dispatch: r.index,
            reference_ns: r.duration_ns,
            optimized_ns: o.duration_ns,
        });
        // Paired by tensor name: argument and phase (before/after).
        let ref_args: Vec<String> = r.buffers.iter().map(|b| b.tensor.clone()).collect();
        let opt_args: Vec<String> = o.buffers.iter().map(|b| b.tensor.clone()).collect();
        if ref_args != opt_args {
            // Different kernels explain different arguments better than the list does.
            if let (Some(rk), Some(ok)) = (&r.kernel, &o.kernel)
                && rk.mangled != ok.mangled
            {
                return Err(CompareError::KernelsDiffer {
                    location: location(multi_rank, r, None),
                    reference: rk.demangled.clone(),
                    optimized: ok.demangled.clone(),
                });
            }
            return Err(CompareError::ArgumentsDiffer {
                location: location(multi_rank, r, None),
                reference: ref_args,
                optimized: opt_args,
            });
        }
        // With several kernels in one snapshot (a bare name matching several
        // instantiations) a pair must be the same kernel; with one kernel on
        // each side a renamed optimized kernel is paired (and noted).
        if several_kernels
            && let (Some(rk), Some(ok)) = (&r.kernel, &o.kernel)
            && rk.mangled != ok.mangled
        {
            return Err(CompareError::KernelsDiffer {
                location: location(multi_rank, r, None),
                reference: rk.demangled.clone(),
                optimized: ok.demangled.clone(),
            });
        }
        let ref_arrays = reference.load_dispatch(r)?;
        let opt_arrays = optimized.load_dispatch(o)?;
        // Outputs captured before and after on both sides, which a kernel
        // changed: compared by what the kernels wrote (`written`), their
        // images before the kernel being only the baseline.
        let by_writes = |arg: u32| -> Option<[&crate::store::Array; 4]> {
            let rb = image(&ref_arrays, r, arg, Phase::Before)?;
            let ra = image(&ref_arrays, r, arg, Phase::After)?;
            let ob = image(&opt_arrays, o, arg, Phase::Before)?;
            let oa = image(&opt_arrays, o, arg, Phase::After)?;
            let wrote = *rb.bytes != *ra.bytes || *ob.bytes != *oa.bytes;
            wrote.then_some([rb, ra, ob, oa])
        };
        // Decided once per argument (its Before and After records both ask).
        let mut decided: std::collections::HashMap<u32, Option<[&crate::store::Array; 4]>> =
            std::collections::HashMap::new();
        for ((((arg, ra), (_, oa)), record), opt_record) in ref_arrays
            .iter()
            .zip(opt_arrays.iter())
            .zip(r.buffers.iter())
            .zip(o.buffers.iter())
        {
            let images = *decided.entry(*arg).or_insert_with(|| by_writes(*arg));
            if images.is_some() && record.phase == Phase::Before {
                continue; // the baseline of its output, compared through it
            }
            let mut loc = location(multi_rank, r, Some(*arg));
            if record.phase == Phase::Before {
                loc.push_str(" (before)");
            }
            let (stats, written) = match images {
                Some([rb, ra, ob, oa]) => {
                    let (stats, set) = compare_written(rb, ra, ob, oa, options, &loc)?;
                    (stats, Some(set))
                }
                None => (compare_arrays(ra, oa, options, &loc)?, None),
            };
            arrays.push(ArrayComparison {
                rank: r.rank,
                dispatch: r.index,
                arg: *arg,
                name: record.name.clone().or_else(|| opt_record.name.clone()),
                phase: record.phase,
                stats,
                written,
            });
        }
    }
    if arrays.is_empty() {
        // A verdict over no arrays would be a PASS that checked nothing.
        return Err(CompareError::NothingCompared {
            kernel: kernel.demangled,
            reference_dir: reference.dir.clone(),
            optimized_dir: optimized.dir.clone(),
            dispatches: ref_d.len(),
        });
    }
    let optimized_kernel = optimized
        .manifest
        .kernel
        .as_ref()
        .filter(|k| k.mangled != kernel.mangled)
        .map(|k| k.demangled.clone());
    Ok(ComparisonReport {
        kernel: kernel.demangled,
        mangled: kernel.mangled,
        optimized_kernel,
        reference_dir: reference.dir.clone(),
        optimized_dir: optimized.dir.clone(),
        dispatches_compared: ref_d.len(),
        multi_rank,
        options: *options,
        arrays,
        timing,
    })
}

/// What keeps dispatches from being compared, by the manifests' missing
/// records: each line names the dispatch(es), the side and the reason.
/// At most [`MAX_LISTED`] lines, then how many more.
fn uncaptured(reference: &Snapshot, optimized: &Snapshot) -> Vec<String> {
    const MAX_LISTED: usize = 10;
    let sides = [
        ("reference", reference, optimized),
        ("optimized", optimized, reference),
    ];
    let mut lines = Vec::new();
    let why = |m: &MissingRecord| format!("{}: {}", m.reason.name(), m.detail);
    for (name, side, _) in sides {
        // A process whose connection ended without Goodbye: its later
        // dispatches may have run uncaptured.
        for u in side.manifest.unaccounted() {
            lines.push(format!("the {name} run is incomplete: {u}"));
        }
    }
    for (name, side, other) in sides {
        for m in &side.manifest.missing {
            match m.arg {
                None if m.reason != MissReason::Selection => lines.push(format!(
                    "dispatch {} of rank {} was not captured in the {name} run ({})",
                    m.indices(),
                    m.rank,
                    why(m)
                )),
                None => {
                    // Not selected here: fine only where the other side
                    // did not capture it either (the other side's
                    // dispatches are looked at, not the record's range,
                    // which may be of any length).
                    let mut indices: Vec<u64> = other
                        .manifest
                        .dispatches
                        .iter()
                        .filter(|d| m.covers(d.rank, d.index))
                        .map(|d| d.index)
                        .collect();
                    indices.sort_unstable();
                    for index in indices {
                        lines.push(format!(
                            "dispatch {index} of rank {} was captured in one run but not in \
                             the {name} run ({})",
                            m.rank,
                            why(m)
                        ));
                    }
                }
                Some(arg) => {
                    let phase = m.phase.unwrap_or_default();
                    let tensor = crate::store::tensor_name(arg, phase);
                    let in_other = captured(other, m.rank, m.index)
                        .is_some_and(|d| d.buffers.iter().any(|b| b.tensor == tensor));
                    if in_other {
                        lines.push(format!(
                            "dispatch {} of rank {}, argument {arg} ({}) was not captured in \
                             the {name} run ({})",
                            m.index,
                            m.rank,
                            phase_name(phase),
                            why(m)
                        ));
                    }
                }
            }
        }
    }
    if lines.len() > MAX_LISTED {
        let more = lines.len() - MAX_LISTED;
        lines.truncate(MAX_LISTED);
        lines.push(format!(
            "and {more} more (see \"missing\" in each manifest.json)"
        ));
    }
    lines
}

/// The loaded array of `d`'s argument `arg` in `phase` (`arrays` are `d`'s,
/// in buffer order).
fn image<'a>(
    arrays: &'a [(u32, crate::store::Array)],
    d: &DispatchRecord,
    arg: u32,
    phase: Phase,
) -> Option<&'a crate::store::Array> {
    d.buffers
        .iter()
        .zip(arrays.iter())
        .find(|(b, _)| b.arg == arg && b.phase == phase)
        .map(|(_, (_, a))| a)
}

fn captured(s: &Snapshot, rank: u32, index: u64) -> Option<&DispatchRecord> {
    s.manifest
        .dispatches
        .iter()
        .find(|d| d.rank == rank && d.index == index)
}

fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Before => "before the kernel",
        Phase::After => "after the kernel",
        Phase::Replay => "for replay, before the kernel",
    }
}

/// `d` without the images a replay capture took ([`Phase::Replay`]).
pub fn results_only(d: &DispatchRecord) -> DispatchRecord {
    DispatchRecord {
        buffers: d
            .buffers
            .iter()
            .filter(|b| b.phase != Phase::Replay)
            .cloned()
            .collect(),
        ..d.clone()
    }
}

/// Whole dispatches a snapshot lists as not captured, per reason.
pub fn missing_counts(manifest: &Manifest) -> Vec<(MissReason, u64)> {
    missing::count_by_reason(manifest)
}
