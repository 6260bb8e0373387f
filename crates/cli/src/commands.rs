//! The `ditto` subcommands: run, compare, validate, collect, inspect,
//! kernels. Each wires the other modules together (runtime_choice →
//! collector → launch → store → compare → report) and says what happened.
//!
//! Owns the sequencing and the user-facing status lines on stderr; results
//! for programs go to stdout (`--json`). It never parses argv (main.rs does)
//! and never exits the process: it returns a [`Verdict`] or an error, which
//! main maps to exit codes 0 (valid), 1 (mismatch), 2 (error).
//!
//! What a run delivered is judged by [`crate::run_outcome`]; SIGINT and
//! SIGTERM are caught by [`crate::stop_signals`]; the file `ditto kernels`
//! lists is read by [`crate::program_file`].

use crate::collector::hsa::LazyHsaSource;
use crate::collector::{
    Collector, CollectorConfig, ConnectionReport, LiveConnection, SnapshotLayout, SocketPlace,
};
use crate::compare::{CompareOptions, compare_snapshots};
use crate::launch::{self, AppExit, ToolEnvironment};
use crate::log;
use crate::program_file::read_program_file;
use crate::report;
use crate::run_outcome::{RunOutcome, check_run, tally};
use crate::runtime_choice::{self, ResolvedRuntime, RuntimeChoice};
use crate::stdout::{emit, emit_line};
use crate::stop_signals::{catch_stop_signals, stop_requested};
use crate::store::{CollectorRecord, Snapshot};
use crate::units::plural;
use anyhow::{Context, Result, anyhow, bail};
use ditto_kernels::{ArgSizes, KernelQuery};
use ditto_protocol::{CaptureSet, DispatchSelection};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How long after an application exits its connections may take to end.
const SETTLE_GRACE: Duration = Duration::from_secs(10);

/// Outcome of a command that did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Exit 0.
    Valid,
    /// Exit 1.
    Mismatch,
}

/// Starts the collector over `runtime` (chosen by `choice`): the system's
/// HSA runtime is loaded now (its error is one now, not at the first
/// buffer), ditto's CPU runtime when an HSA buffer first arrives, so that a
/// CUDA run starts none and needs none installed. Where `auto` chose the
/// CPU runtime, the first HSA application to connect hears so
/// ([`runtime_choice::cpu_notice`]), or that it is missing.
fn start_collector(
    choice: RuntimeChoice,
    runtime: &ResolvedRuntime,
    mut config: CollectorConfig,
    place: SocketPlace,
) -> Result<Collector> {
    let host_mapped = matches!(runtime, ResolvedRuntime::Cpu { .. });
    // The system's ROCr is loaded at once (its failure said before the
    // application starts); ROCr in model mode never (no IPC handle comes:
    // the tool copies into shared memory there), nor the CPU runtime
    // until a buffer arrives.
    let now = matches!(runtime, ResolvedRuntime::System);
    let source = LazyHsaSource::new(runtime.library(), host_mapped, now)
        .context("the collector needs the HSA runtime to map the application's buffers")?;
    // Said when the first HSA application connects: the CPU runtime's
    // absence (its buffers cannot be mapped), else that `auto` chose it.
    let said = match runtime.missing() {
        Some(missing) => Some((missing.to_string(), true)),
        None => runtime_choice::cpu_notice(choice, runtime).map(|t| (t.to_string(), false)),
    };
    if let Some((text, is_error)) = said {
        let once = std::sync::Once::new();
        config.on_hsa_connection = Some(Arc::new(move || {
            once.call_once(|| match is_error {
                true => crate::log::warn(&text),
                false => crate::log::info(&text),
            })
        }));
    }
    Ok(Collector::start(Arc::new(source), config, place)?)
}

/// One application run under the tool, with progress on a terminal and a
/// note of what was pending if the timeout stops it.
fn run_one(
    collector: &Collector,
    argv: &[String],
    env: &ToolEnvironment,
) -> Result<(AppExit, Vec<LiveConnection>)> {
    let mut pending = Vec::new();
    let exit = crate::progress::while_running(collector, || {
        launch::run_application_noting(argv, env, &mut || {
            pending = collector.open_connections();
        })
    })?;
    Ok((exit, pending))
}

pub struct RunOptions {
    /// `--kernel` or `--kernel-regex`, parsed.
    pub kernel: KernelQuery,
    pub arg_types: Option<String>,
    /// `--dispatch`: which matched dispatches to capture.
    pub dispatch: Option<DispatchSelection>,
    /// `--capture`: which arguments, before/after.
    pub capture: Option<CaptureSet>,
    /// `--arg-sizes`: extents of pointer arguments.
    pub arg_sizes: Option<ArgSizes>,
    pub out: PathBuf,
    pub runtime: RuntimeChoice,
    pub command: Vec<String>,
    pub timeout: Option<Duration>,
}

/// An empty `--kernel` matches nothing: refused before anything runs.
/// `flag` (`--kernel`, `--opt-kernel`) names a kernel, not spaces (a
/// pattern was checked when it was parsed).
fn kernel_given(flag: &str, kernel: &KernelQuery) -> Result<()> {
    if kernel.is_blank() {
        bail!("{flag} is empty: name the kernel to capture (`ditto kernels FILE` lists them)");
    }
    Ok(())
}

/// `ditto run`: one application, one snapshot directory.
pub fn run(opts: RunOptions) -> Result<Verdict> {
    crate::scratch::sweep_stale_temp_dirs();
    if opts.command.is_empty() {
        bail!("no application given: ditto run --kernel NAME -- CMD [ARGS...]");
    }
    kernel_given("--kernel", &opts.kernel)?;
    // Where the snapshot goes is checked before the application runs: a
    // wrong --out is an error now, not after a long run.
    let out = absolute(&opts.out)?;
    crate::store::output_dir::check(&out).context("--out")?;
    if let Some(pid) = crate::store::writer_lock::holder(&out) {
        bail!(
            "--out {} is being written by another ditto (pid {pid}); wait for it to finish or \
             choose another directory",
            out.display()
        );
    }
    let runtime = runtime_choice::resolve(opts.runtime)?;
    let tool = launch::tool_library()?;
    catch_stop_signals();
    let collector = start_collector(
        opts.runtime,
        &runtime,
        CollectorConfig::new(SnapshotLayout::Single(out.clone())),
        SocketPlace::Private,
    )?;
    let run_name = Path::new(&opts.command[0])
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| crate::collector::check_run_name(n).is_ok())
        .unwrap_or_else(|| "run".into());
    let env = ToolEnvironment {
        tool_library: tool,
        kernel: opts.kernel.clone(),
        socket: collector.socket_path().to_path_buf(),
        run_name,
        arg_types: opts.arg_types.clone(),
        dispatch: opts.dispatch.clone(),
        capture: opts.capture,
        arg_sizes: opts.arg_sizes.clone(),
        runtime_dir: runtime.library_dir().map(Path::to_path_buf),
        app_stdout_to_stderr: false,
        extra_env: runtime.environment(),
        cwd: None,
        timeout: opts.timeout,
    };
    let (exit, pending) = run_one(&collector, &opts.command, &env)?;
    if !collector.settle(SETTLE_GRACE) {
        log::warn(&format!(
            "a process still holds a connection {SETTLE_GRACE:?} after the application exited; stopping"
        ));
    }
    let (reports, committed) = collector.stop_and_commit();
    committed?;
    let line = check_run(RunOutcome {
        label: "the application",
        command: &opts.command,
        kernel_query: &opts.kernel,
        exit,
        captured: tally(reports.iter()),
        pending,
        dir: &out,
        show_dir: true,
        arg_sizes: opts.arg_sizes.as_ref(),
        missing_runtime: runtime.missing().map(|e| e.to_string()),
    })?;
    log::info(&line);
    Ok(Verdict::Valid)
}

pub struct CompareArgs {
    pub reference: PathBuf,
    pub optimized: PathBuf,
    /// `--opt-kernel`: compare only the optimized snapshot's dispatches of
    /// this kernel.
    pub opt_kernel: Option<KernelQuery>,
    pub compare: CompareOptions,
    pub json: bool,
}

fn print_comparison(r: &crate::compare::ComparisonReport, json: bool) -> Result<Verdict> {
    if json {
        emit_line(
            &serde_json::to_string_pretty(&report::render_json(r)).expect("JSON values serialize"),
        )?;
    } else {
        emit(&report::render_human(r, report::stdout_wants_color()))?;
    }
    Ok(if r.valid() {
        Verdict::Valid
    } else {
        Verdict::Mismatch
    })
}

/// `ditto replay SNAPSHOT`: the comparison's report, then what the replay
/// measured (stderr; with `--json`, a "replay" member of the object).
pub fn replay(opts: &crate::replay::ReplayOptions) -> Result<Verdict> {
    crate::scratch::sweep_stale_temp_dirs();
    // Stopped, the replay process is killed and the work directory removed.
    catch_stop_signals();
    let (report, s) = match crate::replay::replay(opts)? {
        crate::replay::ReplayOutcome::Replayed { report, summary } => (report, summary),
        crate::replay::ReplayOutcome::Emitted(dir) => {
            let build = match dir.join("replay.cu").exists() {
                true => "nvcc -O2 replay.cu -o replay -lcuda",
                false => "hipcc -O2 replay.cpp -o replay",
            };
            let line = format!(
                "a reproducer of the dispatch is in {0}: cd {0} && {build} && ./replay",
                dir.display()
            );
            if opts.json {
                emit_line(&serde_json::json!({ "emitted": dir, "build": line }).to_string())?;
            } else {
                emit_line(&line)?;
            }
            return Ok(Verdict::Valid);
        }
    };
    if opts.json {
        let mut value = report::render_json(&report);
        value["replay"] = serde_json::to_value(&s).expect("a summary serializes");
        emit_line(&serde_json::to_string_pretty(&value).expect("JSON values serialize"))?;
    } else {
        emit(&report::render_human(&report, report::stdout_wants_color()))?;
    }
    for line in crate::replay::summary_lines(&s) {
        log::info(&line);
    }
    Ok(if report.valid() {
        Verdict::Valid
    } else {
        Verdict::Mismatch
    })
}

/// `ditto compare REF_DIR OPT_DIR`.
pub fn compare(args: CompareArgs) -> Result<Verdict> {
    let options = args.compare;
    let reference = Snapshot::load(&args.reference).context("reading the reference snapshot")?;
    let mut optimized =
        Snapshot::load(&args.optimized).context("reading the optimized snapshot")?;
    if let Some(query) = &args.opt_kernel {
        kernel_given("--opt-kernel", query)?;
        optimized = crate::compare::only_kernel(&optimized, &query.to_string())?;
    }
    let r = compare_snapshots(&reference, &optimized, &options)?;
    print_comparison(&r, args.json)
}

/// How to run one side of `ditto validate`.
#[derive(Debug, Clone, Default)]
pub struct Side {
    /// The command line, split like a shell would (`--ref 'CMD ARGS'`).
    pub command: String,
    /// `--ref-env K=V` / `--opt-env K=V`.
    pub env: Vec<(String, String)>,
    /// `--ref-cwd DIR` / `--opt-cwd DIR`.
    pub cwd: Option<PathBuf>,
}

pub struct ValidateOptions {
    /// `--kernel` or `--kernel-regex`, parsed.
    pub kernel: KernelQuery,
    /// `--opt-kernel`: the optimized builds' kernel, when renamed.
    pub opt_kernel: Option<KernelQuery>,
    /// The reference to run; `None` with `reference_snapshot`.
    pub reference: Option<Side>,
    /// `--ref-snapshot DIR`: a stored reference instead of a run.
    pub reference_snapshot: Option<PathBuf>,
    /// One or more optimized builds (`--opt` repeated), each compared
    /// with the reference.
    pub optimized: Vec<Side>,
    pub compare: CompareOptions,
    pub arg_types: Option<String>,
    /// `--dispatch`: the same selection for every run.
    pub dispatch: Option<DispatchSelection>,
    /// `--capture`: the same for every run.
    pub capture: Option<CaptureSet>,
    /// `--arg-sizes`: the same for every run.
    pub arg_sizes: Option<ArgSizes>,
    pub runtime: RuntimeChoice,
    pub keep: Option<PathBuf>,
    pub timeout: Option<Duration>,
    pub json: bool,
}

/// `ditto validate`: one collector, the reference run (or a stored
/// reference) then each optimized run, then the comparisons.
pub fn validate(opts: ValidateOptions) -> Result<Verdict> {
    crate::scratch::sweep_stale_temp_dirs();
    let options = opts.compare;
    if opts.optimized.is_empty() {
        bail!("give at least one --opt 'CMD ARGS'");
    }
    kernel_given("--kernel", &opts.kernel)?;
    if let Some(k) = &opts.opt_kernel {
        kernel_given("--opt-kernel", k)?;
    }
    let mut runs: Vec<(String, String, Vec<String>, &Side)> = Vec::new();
    match (&opts.reference, &opts.reference_snapshot) {
        (Some(side), None) => {
            let cmd = launch::split_command(&side.command).context("--ref")?;
            runs.push(("reference run".into(), "ref".into(), cmd, side));
        }
        (None, Some(_)) => {}
        (Some(_), Some(_)) => bail!("give --ref or --ref-snapshot, not both"),
        (None, None) => bail!("give the reference: --ref 'CMD ARGS' or --ref-snapshot DIR"),
    }
    let several = opts.optimized.len() > 1;
    for (i, side) in opts.optimized.iter().enumerate() {
        let cmd = launch::split_command(&side.command).context("--opt")?;
        let (label, name) = if several {
            (format!("optimized run {}", i + 1), format!("opt-{}", i + 1))
        } else {
            ("optimized run".to_string(), "opt".to_string())
        };
        runs.push((label, name, cmd, side));
    }
    // A stored reference is read before anything runs: a wrong directory is
    // an error now, not after the optimized builds ran.
    let stored_reference = match &opts.reference_snapshot {
        Some(dir) => Some(Snapshot::load(dir).with_context(|| {
            format!(
                "reading the reference snapshot (--ref-snapshot {})",
                dir.display()
            )
        })?),
        None => None,
    };
    let runtime = runtime_choice::resolve(opts.runtime)?;
    let tool = launch::tool_library()?;
    catch_stop_signals();
    let temp;
    let base = match &opts.keep {
        Some(dir) => {
            let base = absolute(dir)?;
            for (_, run_name, _, _) in &runs {
                crate::store::output_dir::check(&base.join(run_name)).context("--keep")?;
            }
            base
        }
        None => {
            temp = crate::scratch::ScratchDir::create("ditto-validate-")
                .context("creating a temporary directory")?;
            temp.path().to_path_buf()
        }
    };
    let collector = start_collector(
        opts.runtime,
        &runtime,
        CollectorConfig::new(SnapshotLayout::PerRun(base.clone())),
        SocketPlace::Private,
    )?;
    for (label, run_name, cmd, side) in &runs {
        if stop_requested() {
            bail!("interrupted before the {label}");
        }
        let cwd = side.cwd.as_deref().map(absolute).transpose()?;
        if let Some(dir) = &cwd
            && !dir.is_dir()
        {
            bail!(
                "{label}: the working directory {} does not exist",
                dir.display()
            );
        }
        // The optimized builds capture their own kernel when it was renamed.
        let kernel = match &opts.opt_kernel {
            Some(k) if run_name != "ref" => k,
            _ => &opts.kernel,
        };
        let env = ToolEnvironment {
            tool_library: tool.clone(),
            kernel: kernel.clone(),
            socket: collector.socket_path().to_path_buf(),
            run_name: run_name.clone(),
            arg_types: opts.arg_types.clone(),
            dispatch: opts.dispatch.clone(),
            capture: opts.capture,
            arg_sizes: opts.arg_sizes.clone(),
            runtime_dir: runtime.library_dir().map(Path::to_path_buf),
            app_stdout_to_stderr: opts.json,
            // The runtime's first: the user's word wins.
            extra_env: runtime
                .environment()
                .into_iter()
                .chain(side.env.clone())
                .collect(),
            cwd,
            timeout: opts.timeout,
        };
        let (exit, pending) = run_one(&collector, cmd, &env)?;
        if !collector.settle(SETTLE_GRACE) {
            log::warn(&format!(
                "a process of the {label} still holds a connection; going on"
            ));
        }
        let reports = collector.reports();
        let line = check_run(RunOutcome {
            label,
            command: cmd,
            kernel_query: kernel,
            exit,
            captured: tally(
                reports
                    .iter()
                    .filter(|r| r.run.as_deref() == Some(run_name.as_str())),
            ),
            pending,
            dir: &base.join(run_name),
            show_dir: opts.keep.is_some(),
            arg_sizes: opts.arg_sizes.as_ref(),
            missing_runtime: runtime.missing().map(|e| e.to_string()),
        })?;
        log::info(&line);
    }
    let (reports, committed) = collector.stop_and_commit();
    committed?;
    let hsa_ran = reports
        .iter()
        .any(|r| r.api == Some(ditto_protocol::Api::Hsa));
    let reference = match stored_reference {
        Some(s) => s,
        None => Snapshot::load(&base.join("ref"))?,
    };
    let mut verdict = Verdict::Valid;
    let mut objects = Vec::new();
    // Kernel times an HSA application took on the CPU runtime are not a
    // GPU's: the verdict says so beside its speedup (a CUDA application's
    // are its GPU's).
    let times_note = (hsa_ran && matches!(runtime, ResolvedRuntime::Cpu { .. }))
        .then_some(report::CPU_RUNTIME_TIMES);
    for (label, run_name, cmd, _) in runs.iter().filter(|r| r.1 != "ref") {
        let optimized = Snapshot::load(&base.join(run_name))?;
        let r = compare_snapshots(&reference, &optimized, &options)?;
        if !r.valid() {
            verdict = Verdict::Mismatch;
        }
        if opts.json {
            objects.push(report::render_json_noting(&r, times_note));
        } else {
            if several {
                emit_line(&format!("{label}: {}", cmd.join(" ")))?;
            }
            emit(&report::render_human_noting(
                &r,
                report::stdout_wants_color(),
                times_note,
            ))?;
        }
    }
    if opts.json {
        let v = if several {
            serde_json::json!({"valid": verdict == Verdict::Valid, "comparisons": objects})
        } else {
            objects.pop().expect("one comparison")
        };
        emit_line(&serde_json::to_string_pretty(&v).expect("JSON values serialize"))?;
    }
    if opts.keep.is_some() {
        log::info(&format!("snapshots kept in {}/<run>/", base.display()));
    }
    Ok(verdict)
}

pub struct CollectOptions {
    pub socket: PathBuf,
    pub out: PathBuf,
    pub runtime: RuntimeChoice,
    /// `--node [NAME]`: this collector is one node's of several writing
    /// OUT, each run into its part `OUT/<run>/node-NAME/`; `Some("")`
    /// names it by the host name.
    pub node: Option<String>,
}

/// The name of this host (gethostname), for `--node` without a name.
fn host_name() -> Result<String> {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        bail!(
            "--node: cannot read this host's name ({}): give one, --node NAME",
            std::io::Error::last_os_error()
        );
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// The job a node's collector runs in, as its launcher names it
/// (`SLURM_JOB_ID`, else PMIx's `PMIX_NAMESPACE`, which mpirun sets);
/// recorded in each part so that a reader refuses an earlier job's parts.
fn launcher_job() -> Option<String> {
    ["SLURM_JOB_ID", "PMIX_NAMESPACE"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|j| !j.is_empty()))
}

/// `ditto collect`: serves until SIGINT/SIGTERM; each run goes to
/// `OUT/<run>/`, or with `--node` to its part `OUT/<run>/node-NAME/`.
/// `ditto hsa-env`: what an application needs, beyond the tool's own
/// variables, to run on the runtime `choice` names, as `ditto run` gives
/// it (`launch`): LD_LIBRARY_PATH with the CPU runtime's directory first,
/// the model GPU's variables. One `NAME=VALUE` a line, for
/// scripts/ditto-run to export; a value a line cannot hold is an error.
pub fn hsa_env(choice: RuntimeChoice) -> Result<Verdict> {
    let runtime = runtime_choice::resolve(choice)?;
    if let Some(missing) = runtime.missing() {
        return Err(missing.into());
    }
    let mut variables: Vec<(String, String)> = Vec::new();
    if let Some(dir) = runtime.library_dir() {
        let path = launch::prepend(dir, std::env::var_os("LD_LIBRARY_PATH"));
        let path = path
            .into_string()
            .map_err(|p| anyhow!("LD_LIBRARY_PATH {} is not UTF-8", p.to_string_lossy()))?;
        variables.push(("LD_LIBRARY_PATH".into(), path));
    }
    variables.extend(runtime.environment());
    let mut text = String::new();
    for (name, value) in variables {
        if value.contains('\n') {
            bail!("{name} would hold a line break ({value:?}): a line cannot carry it");
        }
        text.push_str(&format!("{name}={value}\n"));
    }
    emit(&text)?;
    Ok(Verdict::Valid)
}

pub fn collect(opts: CollectOptions) -> Result<Verdict> {
    crate::scratch::sweep_stale_temp_dirs();
    let node = match opts.node.as_deref() {
        None => None,
        Some("") => Some(host_name()?),
        Some(name) => Some(name.to_string()),
    };
    if let Some(node) = &node {
        crate::store::parts::check_node_name(node).map_err(|e| anyhow!("--node: {e}"))?;
    }
    let runtime = runtime_choice::resolve(opts.runtime)?;
    let out = absolute(&opts.out)?;
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    catch_stop_signals();
    let (layout, place) = match node {
        None => (SnapshotLayout::PerRun(out.clone()), "<run>".to_string()),
        Some(node) => (
            SnapshotLayout::PerRunPart {
                base: out.clone(),
                node: node.clone(),
                job: launcher_job(),
                collector: CollectorRecord::this_process(host_name()?),
            },
            format!("<run>/node-{node}"),
        ),
    };
    let mut config = CollectorConfig::new(layout);
    config.on_connection_end = Some(Arc::new(|r: &ConnectionReport| log::info(&r.to_string())));
    let collector = start_collector(
        opts.runtime,
        &runtime,
        config,
        SocketPlace::At(opts.socket.clone()),
    )?;
    log::info(&format!(
        "collecting on {} into {}/{place}/ (stop with Ctrl-C)",
        collector.socket_path().display(),
        out.display()
    ));
    while !stop_requested() {
        std::thread::sleep(Duration::from_millis(100));
    }
    let (reports, committed) = collector.stop_and_commit();
    let failed: Vec<&ConnectionReport> = reports.iter().filter(|r| r.failed()).collect();
    committed?;
    log::info(&format!(
        "collector stopped after {}",
        plural(reports.len() as u64, "connection", "connections")
    ));
    if !failed.is_empty() {
        let list: Vec<String> = failed.iter().map(|r| r.to_string()).collect();
        bail!(
            "{} failed: {}",
            plural(failed.len() as u64, "connection", "connections"),
            list.join("; ")
        );
    }
    Ok(Verdict::Valid)
}

fn absolute(p: &Path) -> Result<PathBuf> {
    Ok(if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()?.join(p)
    })
}

/// `ditto inspect DIR [--dump ARG]`.
pub fn inspect(dir: &Path, dump: Option<u32>, json: bool) -> Result<Verdict> {
    let snapshot = Snapshot::load(dir)?;
    if let Some(arg) = dump
        && !snapshot
            .manifest
            .dispatches
            .iter()
            .any(|d| d.buffers.iter().any(|b| b.arg == arg))
    {
        let mut args: Vec<u32> = snapshot
            .manifest
            .dispatches
            .iter()
            .flat_map(|d| d.buffers.iter().map(|b| b.arg))
            .collect();
        args.sort_unstable();
        args.dedup();
        bail!(
            "--dump {arg}: no dispatch in {} captured argument {arg}; captured arguments: {args:?}",
            dir.display()
        );
    }
    if json {
        let v = crate::inspect::render_json(&snapshot, dump)?;
        emit_line(&serde_json::to_string_pretty(&v).expect("JSON values serialize"))?;
    } else {
        emit(&crate::inspect::render(&snapshot, dump)?)?;
    }
    Ok(Verdict::Valid)
}

/// `ditto inspect DIR --json --manifest`: the manifest as the reader
/// completed it, for programs that read the tensor files themselves (the
/// Python package): no tensor file is read.
pub fn inspect_manifest(dir: &Path) -> Result<Verdict> {
    let snapshot = Snapshot::load(dir)?;
    let v = crate::inspect::render_manifest_json(&snapshot);
    emit_line(&serde_json::to_string_pretty(&v).expect("JSON values serialize"))?;
    Ok(Verdict::Valid)
}

/// `ditto kernels FILE`: lists the kernels of a code object, a HIP program
/// or a bundle file with the layout a run would capture ([`crate::kernel_list`]).
/// A file that cannot be read or holds no kernel (none that `kernel` names)
/// is an error naming it.
pub fn kernels(
    file: &Path,
    kernel: Option<&str>,
    arg_types: Option<&str>,
    json: bool,
) -> Result<Verdict> {
    let types = arg_types
        .map(ditto_kernels::parse_arg_types)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let bytes = read_program_file(file)?;
    let name = file.display().to_string();
    // The caches a run would look in, and the one the file lies in when it
    // is a Triton cache entry's binary.
    let mut caches = ditto_kernels::triton::caches_from_env();
    caches.extend(ditto_kernels::triton::cache_of_entry_file(file));
    let listed = crate::kernel_list::list(&bytes, kernel, types.as_deref(), &caches)
        .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    if listed.is_empty() {
        let all = crate::kernel_list::list(&bytes, None, None, &[])
            .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        let mut names: Vec<&str> = Vec::new();
        for k in &all {
            if !names.contains(&k.names.name.as_str()) {
                names.push(&k.names.name);
            }
        }
        match kernel {
            Some(q) if !names.is_empty() => bail!(
                "{name}: no kernel is named `{q}`; its kernels: {}",
                names.join(", ")
            ),
            _ => bail!("{name}: its code objects hold no kernels"),
        }
    }
    if json {
        let v = crate::kernel_list::render_json(&name, &listed);
        emit_line(&serde_json::to_string_pretty(&v).expect("JSON values serialize"))?;
    } else {
        emit(&crate::kernel_list::render(&name, &listed))?;
    }
    Ok(Verdict::Valid)
}
