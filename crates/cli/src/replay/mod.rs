//! `ditto replay SNAPSHOT`: captured dispatches run again on their own,
//! with the kernel the application ran or a replacement, their outputs
//! compared with the outputs the application produced, through the same
//! comparison, report, `--json` and exit codes as `ditto compare`.
//!
//! Each dispatch runs in a replay process of its own (`child`): a kernel
//! that faults or hangs ends that process, never `ditto`. With a
//! replacement the original kernel is replayed too, so that the report
//! can say when the original does not reproduce its own outputs (the
//! kernel is not deterministic, or reads state outside captured memory)
//! and give the speedup from the two medians.
//!
//! Modules: `plan` (a replay capture read and checked), `runtime` (the
//! HSA entries a replay calls), `child` (the replay process),
//! `cuda_child` (its CUDA half, for a captured cubin), `outcome` (what a
//! replay process is given and leaves behind),
//! `replacement` (where a replacement kernel comes from, and its argument
//! layout checked against the captured one's), `emit` (a standalone
//! reproducer of one dispatch, `--emit DIR`), `inputs` (every file a
//! replay reads, by one rule, and the host build it loads).

pub mod child;
pub mod cuda_child;
pub mod emit;
pub mod inputs;
pub mod outcome;
pub mod plan;
pub mod replacement;
pub mod runtime;

use crate::compare::{CompareOptions, compare_snapshots};
use crate::runtime_choice::{self, ResolvedRuntime, RuntimeChoice};
use crate::stop_signals::stop_requested;
use crate::store::{CapturedBuffer, DispatchRecord, Snapshot, SnapshotWriter};
use anyhow::{Context, Result, bail};
use ditto_protocol::{Buffer, Dispatch, DispatchSelection, Hello, Phase, Transport};
use outcome::{ChildResult, read_result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// `ditto replay`'s options.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    pub snapshot: PathBuf,
    pub dispatch: Option<DispatchSelection>,
    /// `--kernel-object FILE`: a code object holding the replacement.
    pub kernel_object: Option<PathBuf>,
    /// `--from PROGRAM`: the kernel of the same name from another
    /// program's embedded device code.
    pub from: Option<PathBuf>,
    /// `--host-build FILE`: the captured program's host build (ditto's CPU
    /// runtime), instead of the copy the snapshot holds.
    pub host_build: Option<PathBuf>,
    pub iterations: u32,
    pub compare: CompareOptions,
    pub runtime: RuntimeChoice,
    /// Longest wait for one dispatch.
    pub timeout: Duration,
    /// `--relocate`: place every captured range at another address.
    pub relocate: bool,
    /// `--emit DIR`: write a standalone reproducer of the first selected
    /// dispatch there instead of replaying.
    pub emit: Option<PathBuf>,
    pub json: bool,
}

/// What a replay of all selected dispatches found, or where `--emit`
/// wrote the reproducer.
pub enum ReplayOutcome {
    Replayed {
        report: Box<crate::compare::ComparisonReport>,
        summary: ReplaySummary,
    },
    Emitted(PathBuf),
}

/// Times and notes of a replay, beside the comparison.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ReplaySummary {
    pub iterations: u32,
    /// The replayed kernel's times, every iteration of every dispatch.
    pub times_ns: Vec<u64>,
    pub median_ns: Option<u64>,
    pub min_ns: Option<u64>,
    pub max_ns: Option<u64>,
    /// With a replacement: the original kernel replayed, its median.
    pub original_median_ns: Option<u64>,
    /// original_median / median.
    pub speedup: Option<f64>,
    /// The replacement's code object (none: the captured kernel).
    pub kernel_object: Option<String>,
    /// Whether the original kernel replayed reproduced the captured
    /// outputs (checked with a replacement; null otherwise).
    pub original_reproduced: Option<bool>,
    /// Ranges not placed at their original address: (original, placed, size).
    pub relocated: Vec<(u64, u64, u64)>,
    pub variables_missing: Vec<String>,
}

/// Runs `ditto replay` and returns the comparison with its summary.
pub fn replay(opts: &ReplayOptions) -> Result<ReplayOutcome> {
    let snapshot = Snapshot::load(&opts.snapshot)
        .with_context(|| format!("reading the snapshot {}", opts.snapshot.display()))?;
    let replayable = plan::replayable(&snapshot);
    if replayable.is_empty() {
        return Err(plan::PlanError::NoReplayData {
            dir: snapshot.dir.clone(),
        }
        .into());
    }
    let chosen: Vec<(u32, u64)> = replayable
        .iter()
        .filter(|d| opts.dispatch.as_ref().is_none_or(|s| s.selects(d.index)))
        .map(|d| (d.rank, d.index))
        .collect();
    if chosen.is_empty() {
        let indices: Vec<String> = replayable.iter().map(|d| d.index.to_string()).collect();
        bail!(
            "--dispatch selects none of the replayable dispatches of {} (they are {})",
            snapshot.dir.display(),
            indices.join(", ")
        );
    }
    // 0700, removed on every way out; if ditto is killed, by the next one.
    let work = crate::scratch::ScratchDir::create("ditto-replay-")
        .context("making the replay's work directory")?;
    let first = plan::plan(&snapshot, chosen[0].0, chosen[0].1)?;
    let captured = inputs::captured_code_object(&snapshot, &first)?;
    // Every chosen dispatch's numbers are checked before anything runs, and
    // its kernel arguments against the captured kernel's.
    for &(rank, index) in &chosen {
        let plan = plan::plan(&snapshot, rank, index)?;
        if let (Some(code), Some(path)) = (&captured, &first.code_object)
            && plan.code_object.as_ref() == Some(path)
        {
            plan::check_kernarg(&plan, code, path)?;
        }
    }
    // A captured cubin replays on the CUDA driver, anything else on HSA.
    let cubin = captured.as_deref().is_some_and(cuda_child::is_cubin);
    let runtime = match cubin {
        true => Backend::Cuda(
            std::env::var_os("DITTO_CUDA_DRIVER")
                .map_or_else(|| PathBuf::from("libcuda.so.1"), PathBuf::from),
        ),
        false => {
            let runtime = runtime_choice::resolve(opts.runtime)?;
            if let Some(missing) = runtime.missing() {
                return Err(missing.into());
            }
            Backend::Hsa(runtime)
        }
    };
    let replacement = replacement::choose(opts, captured.as_deref(), &first, work.path())?;
    // The captured program's host build: the one the user named or the
    // snapshot's own copy, never a path the manifest names.
    let original_host_build = match runtime.runs_host_builds() {
        true => inputs::original_host_build(
            opts.host_build.as_deref(),
            &snapshot,
            chosen[0].0,
            work.path(),
        )?,
        false => None,
    };
    if let Some(dir) = &opts.emit {
        let replacement_code;
        let code: &[u8] = match (&replacement, &captured) {
            (Some(r), _) => {
                replacement_code = inputs::named_file(&r.code_object, "a code object")?;
                &replacement_code
            }
            (None, Some(code)) => code,
            (None, None) => bail!(
                "dispatch {} has no code object to emit ({}); give one with --kernel-object or --from",
                first.record.index,
                first
                    .launch
                    .code_object_missing
                    .as_deref()
                    .unwrap_or("none was captured")
            ),
        };
        let host_build = match (runtime.runs_host_builds(), &replacement) {
            (true, Some(r)) => r.host_build.clone(),
            (true, None) => original_host_build.clone(),
            (false, _) => None,
        };
        let source = emit::EmitSource {
            code,
            host_build: host_build.as_deref(),
        };
        emit::emit(&snapshot, &first, &source, &opts.compare, dir)?;
        return Ok(ReplayOutcome::Emitted(dir.clone()));
    }
    let mut summary = ReplaySummary {
        iterations: opts.iterations.max(1),
        kernel_object: replacement
            .as_ref()
            .map(|r| r.code_object.display().to_string()),
        ..Default::default()
    };
    if runtime.runs_host_builds() {
        let runtime_words = runtime.words();
        let kernel = first
            .record
            .kernel
            .as_ref()
            .map_or_else(|| first.launch.symbol.clone(), |k| k.demangled.clone());
        let index = first.record.index;
        if captured.as_deref().is_some_and(inputs::is_amdgpu) && original_host_build.is_none() {
            bail!(
                "dispatch {index} of `{kernel}` cannot be replayed on {runtime_words}: the \
                 snapshot holds no host build of the captured program (the kernel's host code, \
                 `<program>.host.so`, which a capture stores since 2026-12-07; a snapshot's \
                 command line is never a library to load); name it with --host-build FILE, or \
                 capture the program again"
            );
        }
        if let Some(r) = &replacement
            && r.host_build.is_none()
            && inputs::named_file(&r.code_object, "a code object")
                .is_ok_and(|code| inputs::is_amdgpu(&code))
        {
            bail!(
                "the replacement from {} has no host build beside it ({0}.host.so, which `ditto \
                 hipcc` writes): on {runtime_words} `{kernel}` runs from its host code; \
                 build the replacement with `ditto hipcc`",
                r.source
            );
        }
    }
    // With a replacement, the original first: does it reproduce its outputs?
    let mut original_times = Vec::new();
    if replacement.is_some() {
        let dir = work.path().join("original");
        std::fs::create_dir(&dir)?;
        let results = run_children(
            opts,
            &snapshot,
            &chosen,
            &runtime,
            None,
            original_host_build.as_deref(),
            &dir,
        )?;
        let replayed = replay_snapshot(&snapshot, &chosen, &results, &dir)?;
        let reference = reference_view(&snapshot, &chosen);
        let check = compare_snapshots(&reference, &replayed, &opts.compare)?;
        summary.original_reproduced = Some(check.valid());
        original_times = results.iter().flat_map(|(_, r)| times(r)).collect();
    }
    let dir = work.path().join("replay");
    std::fs::create_dir(&dir)?;
    let host_build = match &replacement {
        Some(r) => r.host_build.clone(),
        None => original_host_build,
    };
    let results = run_children(
        opts,
        &snapshot,
        &chosen,
        &runtime,
        replacement
            .as_ref()
            .map(|r| (r.code_object.as_path(), r.source.as_str())),
        host_build.as_deref(),
        &dir,
    )?;
    for (_, r) in &results {
        summary.relocated.extend(r.relocated.iter().copied());
        summary
            .variables_missing
            .extend(r.variables_missing.iter().cloned());
    }
    summary.times_ns = results.iter().flat_map(|(_, r)| times(r)).collect();
    (summary.median_ns, summary.min_ns, summary.max_ns) = spread(&summary.times_ns);
    if replacement.is_some() {
        summary.original_median_ns = spread(&original_times).0;
        if let (Some(o), Some(n)) = (summary.original_median_ns, summary.median_ns)
            && n > 0
        {
            summary.speedup = Some(o as f64 / n as f64);
        }
    }
    let replayed = replay_snapshot(&snapshot, &chosen, &results, &dir)?;
    let reference = reference_view(&snapshot, &chosen);
    let mut report = compare_snapshots(&reference, &replayed, &opts.compare)?;
    // The application's own kernel times against the replay's.
    report.timing.second = Some("replay");
    Ok(ReplayOutcome::Replayed {
        report: Box::new(report),
        summary,
    })
}

fn times(r: &ChildResult) -> Vec<u64> {
    r.times_ns.iter().flatten().copied().collect()
}

/// Median, least and most of `times`.
fn spread(times: &[u64]) -> (Option<u64>, Option<u64>, Option<u64>) {
    if times.is_empty() {
        return (None, None, None);
    }
    let mut sorted = times.to_vec();
    sorted.sort_unstable();
    (
        Some(sorted[sorted.len() / 2]),
        sorted.first().copied(),
        sorted.last().copied(),
    )
}

/// Runs one replay process per chosen dispatch, in order.
fn run_children(
    opts: &ReplayOptions,
    snapshot: &Snapshot,
    chosen: &[(u32, u64)],
    runtime: &Backend,
    kernel_object: Option<(&Path, &str)>,
    host_build: Option<&Path>,
    work: &Path,
) -> Result<Vec<((u32, u64), ChildResult)>> {
    let exe = std::env::current_exe().context("finding the ditto executable")?;
    let mut results = Vec::new();
    for &(rank, index) in chosen {
        let mut cmd = Command::new(&exe);
        cmd.arg("replay-dispatch")
            .arg("--snapshot")
            .arg(&snapshot.dir)
            .arg("--rank")
            .arg(rank.to_string())
            .arg("--index")
            .arg(index.to_string())
            .arg("--work")
            .arg(work)
            .arg("--runtime-library")
            .arg(runtime.library())
            .arg("--iterations")
            .arg(opts.iterations.max(1).to_string())
            .arg("--timeout-ms")
            .arg(opts.timeout.as_millis().to_string());
        if let Some((k, _)) = kernel_object {
            cmd.arg("--kernel-object").arg(k);
        }
        if opts.relocate {
            cmd.arg("--relocate");
        }
        if let Some(dir) = runtime.cpu_dir() {
            // The host build's HIP runtime finds this HSA runtime, as the
            // application did under `ditto run`.
            let mut path = std::ffi::OsString::from(dir);
            if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
                path.push(":");
                path.push(old);
            }
            cmd.env("LD_LIBRARY_PATH", path);
        }
        if let Backend::Hsa(r) = runtime {
            // ROCr's model mode: the model GPU and its topology.
            cmd.envs(r.environment());
        }
        if let (true, Some(host)) = (runtime.runs_host_builds(), host_build) {
            cmd.env("DITTO_HIP_HOST_KERNELS", host);
        }
        cmd.stdin(std::process::Stdio::null());
        if stop_requested() {
            bail!("interrupted before the replay of dispatch {index}");
        }
        let out =
            crate::launch::output_of_own_group(&mut cmd).context("starting the replay process")?;
        if stop_requested() {
            bail!("interrupted: the replay of dispatch {index} was stopped");
        }
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let how = exit_words(&out.status);
            let kernel = snapshot
                .manifest
                .dispatches
                .iter()
                .find(|d| d.rank == rank && d.index == index)
                .and_then(|d| d.kernel.as_ref())
                .map_or_else(
                    || "the kernel".to_string(),
                    |k| format!("`{}`", k.demangled),
                );
            let record = snapshot
                .manifest
                .dispatches
                .iter()
                .find(|d| d.rank == rank && d.index == index);
            let hint = match record.and_then(|d| d.launch.as_ref()) {
                Some(l)
                    if kernel_object.is_none()
                        && !l.all_allocations
                        && out.status.code().is_none() =>
                {
                    "\nif the kernel follows pointers stored in memory (a pointer table, batched \
                     arguments), capture it with `--capture replay-all`, which takes every live \
                     allocation"
                }
                _ => "",
            };
            let what = match kernel_object {
                Some((_, source)) => format!("the replacement from {source}"),
                None => "the captured kernel".to_string(),
            };
            bail!(
                "the replay of dispatch {index} of {kernel} ({what}) {how}:\n{}{hint}",
                stderr.trim_end()
            );
        }
        results.push(((rank, index), read_result(work, rank, index)?));
    }
    Ok(results)
}

/// How a replay process ended, in words.
fn exit_words(status: &std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (_, Some(libc::SIGABRT)) => {
            "was aborted (SIGABRT; on an HSA runtime, a memory access fault by the kernel)".into()
        }
        (_, Some(libc::SIGSEGV)) => "faulted (SIGSEGV)".into(),
        (_, Some(sig)) => format!("was killed by signal {sig}"),
        (Some(3), _) => "stopped on a queue error".into(),
        (Some(code), _) => format!("failed (exit status {code})"),
        _ => "ended abnormally".into(),
    }
}

/// The runtime a replay process loads.
enum Backend {
    /// An HSA runtime (ditto's CPU runtime or the system's ROCr).
    Hsa(ResolvedRuntime),
    /// The CUDA driver, for a captured cubin.
    Cuda(PathBuf),
}

impl Backend {
    fn library(&self) -> PathBuf {
        match self {
            Backend::Hsa(r) => r.library(),
            Backend::Cuda(driver) => driver.clone(),
        }
    }

    /// ditto's CPU runtime's directory, when that is the runtime.
    fn cpu_dir(&self) -> Option<&Path> {
        match self {
            Backend::Hsa(ResolvedRuntime::Cpu { dir }) => Some(dir),
            _ => None,
        }
    }

    /// Whether kernels run from their host builds (`<program>.host.so`):
    /// on ditto's CPU runtime and on the model GPU beneath real ROCr, not
    /// on a GPU.
    fn runs_host_builds(&self) -> bool {
        matches!(
            self,
            Backend::Hsa(ResolvedRuntime::Cpu { .. } | ResolvedRuntime::Model { .. })
        )
    }

    /// The runtime in words, for messages.
    fn words(&self) -> &'static str {
        match self {
            Backend::Hsa(ResolvedRuntime::Cpu { .. }) => "ditto's CPU runtime",
            Backend::Hsa(ResolvedRuntime::Model { .. }) => "the model GPU beneath real ROCr",
            Backend::Hsa(ResolvedRuntime::System) => "the system's ROCm",
            Backend::Cuda(_) => "the CUDA driver",
        }
    }
}

/// The captured snapshot reduced to the replayed dispatches: the side the
/// replay is compared with.
fn reference_view(snapshot: &Snapshot, chosen: &[(u32, u64)]) -> Snapshot {
    let mut view = snapshot.clone();
    view.manifest
        .dispatches
        .retain(|d| chosen.contains(&(d.rank, d.index)));
    view.manifest.missing.clear();
    view
}

/// A snapshot of the replayed outputs, as the application's run would
/// have stored them: same ranks, indices, kernels and arguments, each
/// dispatch's time the median of its iterations.
fn replay_snapshot(
    snapshot: &Snapshot,
    chosen: &[(u32, u64)],
    results: &[((u32, u64), ChildResult)],
    work: &Path,
) -> Result<Snapshot> {
    let dir = work.join("snapshot");
    let mut writer = SnapshotWriter::create(&dir, &snapshot.manifest.kernel_query)?;
    let mut ranks = Vec::new();
    for &(rank, index) in chosen {
        let record: &DispatchRecord = snapshot
            .manifest
            .dispatches
            .iter()
            .find(|d| d.rank == rank && d.index == index)
            .expect("chosen from the snapshot");
        if !ranks.contains(&rank) {
            let run = snapshot.manifest.runs.iter().find(|r| r.rank == rank);
            writer.add_run(&Hello {
                version: ditto_protocol::PROTOCOL_VERSION,
                pid: record.pid,
                run: "replay".into(),
                kernel_query: snapshot.manifest.kernel_query.clone(),
                command_line: run.map(|r| r.command_line.clone()).unwrap_or_default(),
                working_directory: run.map(|r| r.working_directory.clone()).unwrap_or_default(),
                rank: Some(rank),
                api: ditto_protocol::Api::Hsa,
            })?;
            ranks.push(rank);
        }
        let (_, result) = results
            .iter()
            .find(|(key, _)| *key == (rank, index))
            .expect("one result per chosen dispatch");
        let mut captured = Vec::new();
        // The memory before the kernel, where the capture took some (an
        // output inside a larger allocation, `--capture inputs`), is what
        // the replay restored: the same bytes, so that a comparison by
        // what the kernels wrote sees both sides alike.
        let compared = crate::compare::results_only(record);
        let before: Vec<(u32, crate::store::Array)> =
            match compared.buffers.iter().any(|b| b.phase == Phase::Before) {
                true => snapshot.load_dispatch(&compared)?,
                false => Vec::new(),
            };
        for (at, b) in compared.buffers.iter().enumerate() {
            let data = match b.phase {
                Phase::Before => before[at].1.bytes.to_vec(),
                Phase::After => {
                    let Some((_, file)) = result.outputs.iter().find(|(arg, _)| *arg == b.arg)
                    else {
                        continue;
                    };
                    std::fs::read(work.join(file))?
                }
                Phase::Replay => continue,
            };
            captured.push(CapturedBuffer {
                buffer: Buffer {
                    arg_index: b.arg,
                    phase: b.phase,
                    name: b.name.clone(),
                    dtype: b.dtype()?,
                    transport: Transport::SharedMemory,
                    owner_pid: b.owner_pid,
                    alloc_base: b.alloc_base,
                    alloc_size: b.alloc_size,
                    offset: b.offset,
                    extent: b.extent,
                    fingerprint: ditto_protocol::fingerprint(&data),
                },
                data,
            });
        }
        let dispatch = Dispatch {
            index,
            kernel: record
                .kernel
                .clone()
                .unwrap_or_else(|| ditto_protocol::KernelName {
                    mangled: String::new(),
                    demangled: snapshot.manifest.kernel_query.clone(),
                }),
            grid: record.grid,
            block: record.block,
            duration_ns: spread(&times(result)).0,
            buffers: captured.iter().map(|c| c.buffer.clone()).collect(),
            launch: None,
        };
        writer.add_dispatch(rank, record.pid, &dispatch, &captured)?;
    }
    writer.commit()?;
    Ok(Snapshot::load(&dir)?)
}

/// What the replay measured, in lines for stderr.
pub fn summary_lines(s: &ReplaySummary) -> Vec<String> {
    let us = |ns: u64| format!("{:.1} µs", ns as f64 / 1000.0);
    let mut lines = Vec::new();
    match (s.median_ns, s.min_ns, s.max_ns) {
        (Some(median), Some(min), Some(max)) => lines.push(format!(
            "replay: {} timed dispatch{}: median {} (min {}, max {}), from the runtime's \
             dispatch timestamps",
            s.times_ns.len(),
            if s.times_ns.len() == 1 { "" } else { "es" },
            us(median),
            us(min),
            us(max)
        )),
        _ => lines.push("replay: the runtime gave no kernel times".into()),
    }
    if let (Some(original), Some(speedup)) = (s.original_median_ns, s.speedup) {
        lines.push(format!(
            "replay: the captured kernel replayed: median {}; speedup {speedup:.2}x",
            us(original)
        ));
    }
    if s.original_reproduced == Some(false) {
        lines.push(
            "replay: the captured kernel itself did not reproduce the application's outputs: it \
             is not deterministic, or it reads state the capture does not hold (pointers stored \
             in memory: capture with replay-all); a FAIL above may not be the replacement's"
                .into(),
        );
    }
    if !s.relocated.is_empty() {
        lines.push(format!(
            "replay: {} range{} could not be placed at the captured address and {} relocated; \
             pointer arguments were rewritten, pointers stored in memory were not",
            s.relocated.len(),
            if s.relocated.len() == 1 { "" } else { "s" },
            if s.relocated.len() == 1 {
                "was"
            } else {
                "were"
            },
        ));
    }
    if !s.variables_missing.is_empty() {
        lines.push(format!(
            "replay: module variables of the capture the loaded code object lacks (not restored): {}",
            s.variables_missing.join(", ")
        ));
    }
    lines
}
