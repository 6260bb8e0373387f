//! The `ditto` subcommands: run, compare, validate, collect. Each wires the
//! other modules together (runtime → collector → launch → store → compare →
//! report) and says what happened.
//!
//! Owns the sequencing and the user-facing status lines on stderr; results
//! for programs go to stdout (`--json`). It never parses argv (main.rs does)
//! and never exits the process: it returns a [`Verdict`] or an error, which
//! main maps to exit codes 0 (valid), 1 (mismatch), 2 (error).

use crate::collector::{Collector, CollectorConfig, ConnectionReport, SnapshotLayout, SocketPlace};
use crate::compare::{CompareOptions, compare_snapshots};
use crate::launch::{self, AppExit, ToolEnvironment};
use crate::report;
use crate::runtime::{self, HsaBufferSource, HsaRuntime, ResolvedRuntime, RuntimeChoice};
use crate::store::{Manifest, Snapshot};
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(signal: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
    if signal == libc::SIGTERM {
        launch::forward_signal_to_application(signal);
    }
}

/// SIGINT/SIGTERM set a flag instead of killing ditto, so it can report
/// and clean up. The application, in the same process group, gets Ctrl-C
/// itself; a SIGTERM sent to ditto alone is passed on to it (otherwise ditto
/// would wait for an application that was never told to stop). The handler
/// is reset to default in the child by exec.
fn catch_stop_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(sig, on_stop_signal as *const () as libc::sighandler_t) };
    }
}

fn start_collector(
    runtime: &ResolvedRuntime,
    config: CollectorConfig,
    place: SocketPlace,
) -> Result<Collector> {
    let library = runtime.library();
    let hsa = HsaRuntime::load(&library).with_context(|| {
        "the collector needs the HSA runtime to map the application's buffers".to_string()
    })?;
    let source = Arc::new(HsaBufferSource::new(Arc::new(hsa)));
    Ok(Collector::start(source, config, place)?)
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} bytes"),
    }
}

/// "reduce_sum(float const*, float*, int)" or the query when nothing ran.
fn kernel_label(manifest: Option<&Manifest>, query: &str) -> String {
    manifest
        .and_then(|m| m.kernel.as_ref())
        .map(|k| k.demangled.clone())
        .unwrap_or_else(|| query.to_string())
}

/// Totals over the reports of one snapshot directory.
struct Captured {
    connections: usize,
    dispatches: u64,
    arrays: u64,
    bytes: u64,
    problems: Vec<String>,
}

fn tally<'a>(reports: impl Iterator<Item = &'a ConnectionReport>) -> Captured {
    let mut c = Captured {
        connections: 0,
        dispatches: 0,
        arrays: 0,
        bytes: 0,
        problems: Vec::new(),
    };
    for r in reports {
        c.connections += 1;
        c.dispatches += r.dispatches_captured;
        c.arrays += r.arrays_captured;
        c.bytes += r.bytes_captured;
        if r.failed() {
            c.problems.push(r.to_string());
        } else if !matches!(r.end, crate::collector::ConnectionEnd::Goodbye) {
            eprintln!("ditto: warning: {r}");
        }
    }
    c
}

/// Checks what one application run delivered into `dir`; returns the
/// summary line or the error to report.
fn check_run(
    label: &str,
    command: &[String],
    kernel_query: &str,
    exit: AppExit,
    captured: &Captured,
    dir: &Path,
    show_dir: bool,
) -> Result<String> {
    let manifest = Snapshot::load(dir).ok().map(|s| s.manifest);
    let kernel = kernel_label(manifest.as_ref(), kernel_query);
    let mut what = format!(
        "{} of {kernel} ({}, {})",
        plural(captured.dispatches, "dispatch", "dispatches"),
        plural(captured.arrays, "array", "arrays"),
        human_bytes(captured.bytes),
    );
    if show_dir {
        what.push_str(&format!(" into {}", dir.display()));
    }
    let cmd = command.join(" ");
    if !captured.problems.is_empty() {
        bail!(
            "{label} ({cmd}): capture failed: {}; {what} before that",
            captured.problems.join("; ")
        );
    }
    if !exit.success() {
        bail!(
            "{label} ({cmd}) ended with {exit}: fix the application first (run it without ditto to see); \
             captured {what}"
        );
    }
    if captured.connections == 0 {
        bail!(
            "{label} ({cmd}) exited but the tool never connected to the collector: is it an HSA/HIP \
             application, and does the tool load? (rerun with DITTO_LOG=debug)"
        );
    }
    if captured.dispatches == 0 {
        let what_ran = manifest.as_ref().map_or_else(
            || format!("its snapshot in {} could not be read", dir.display()),
            crate::compare::what_ran,
        );
        bail!("{label} ({cmd}) never dispatched a kernel matching {kernel_query:?}; {what_ran}");
    }
    Ok(format!("{label}: {exit}, captured {what}"))
}

pub struct RunOptions {
    pub kernel: String,
    pub arg_types: Option<String>,
    pub out: PathBuf,
    pub runtime: RuntimeChoice,
    pub command: Vec<String>,
}

/// `ditto run`: one application, one snapshot directory.
pub fn run(opts: RunOptions) -> Result<Verdict> {
    if opts.command.is_empty() {
        bail!("no application given: ditto run --kernel NAME -- CMD [ARGS...]");
    }
    let runtime = runtime::resolve(opts.runtime)?;
    let tool = launch::tool_library()?;
    catch_stop_signals();
    let out = absolute(&opts.out)?;
    let collector = start_collector(
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
        runtime_dir: runtime.library_dir().map(Path::to_path_buf),
        app_stdout_to_stderr: false,
    };
    let exit = launch::run_application(&opts.command, &env)?;
    if !collector.settle(SETTLE_GRACE) {
        eprintln!(
            "ditto: warning: a process still holds a connection {SETTLE_GRACE:?} after the application exited; stopping"
        );
    }
    let reports = collector.stop();
    let captured = tally(reports.iter());
    let line = check_run(
        "the application",
        &opts.command,
        &opts.kernel,
        exit,
        &captured,
        &out,
        true,
    )?;
    eprintln!("ditto: {line}");
    Ok(Verdict::Valid)
}

pub struct CompareArgs {
    pub reference: PathBuf,
    pub optimized: PathBuf,
    pub atol: Option<f64>,
    pub rtol: Option<f64>,
    pub equal_nan: bool,
    pub json: bool,
}

fn print_comparison(r: &crate::compare::ComparisonReport, json: bool) -> Verdict {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report::render_json(r)).expect("JSON values serialize")
        );
    } else {
        print!("{}", report::render_human(r, report::stdout_wants_color()));
    }
    if r.valid() {
        Verdict::Valid
    } else {
        Verdict::Mismatch
    }
}

/// `ditto compare REF_DIR OPT_DIR`.
pub fn compare(args: CompareArgs) -> Result<Verdict> {
    let options = CompareOptions::new(args.atol, args.rtol, args.equal_nan)?;
    let reference = Snapshot::load(&args.reference).context("reading the reference snapshot")?;
    let optimized = Snapshot::load(&args.optimized).context("reading the optimized snapshot")?;
    let r = compare_snapshots(&reference, &optimized, &options)?;
    Ok(print_comparison(&r, args.json))
}

pub struct ValidateOptions {
    pub kernel: String,
    pub reference: String,
    pub optimized: String,
    pub atol: Option<f64>,
    pub rtol: Option<f64>,
    pub equal_nan: bool,
    pub arg_types: Option<String>,
    pub runtime: RuntimeChoice,
    pub keep: Option<PathBuf>,
    pub json: bool,
}

/// `ditto validate`: one collector, the reference run then the optimized
/// run, then the comparison.
pub fn validate(opts: ValidateOptions) -> Result<Verdict> {
    let options = CompareOptions::new(opts.atol, opts.rtol, opts.equal_nan)?;
    let ref_cmd = launch::split_command(&opts.reference).context("--ref")?;
    let opt_cmd = launch::split_command(&opts.optimized).context("--opt")?;
    let runtime = runtime::resolve(opts.runtime)?;
    let tool = launch::tool_library()?;
    catch_stop_signals();
    let temp;
    let base = match &opts.keep {
        Some(dir) => absolute(dir)?,
        None => {
            temp = tempfile::Builder::new()
                .prefix("ditto-validate-")
                .tempdir()
                .context("creating a temporary directory")?;
            temp.path().to_path_buf()
        }
    };
    let collector = start_collector(
        &runtime,
        CollectorConfig::new(SnapshotLayout::PerRun(base.clone())),
        SocketPlace::Private,
    )?;
    for (label, run_name, cmd) in [
        ("reference", "ref", &ref_cmd),
        ("optimized", "opt", &opt_cmd),
    ] {
        if STOP.load(Ordering::SeqCst) {
            bail!("interrupted before the {label} run");
        }
        let env = ToolEnvironment {
            tool_library: tool.clone(),
            kernel: opts.kernel.clone(),
            socket: collector.socket_path().to_path_buf(),
            run_name: run_name.into(),
            arg_types: opts.arg_types.clone(),
            runtime_dir: runtime.library_dir().map(Path::to_path_buf),
            app_stdout_to_stderr: opts.json,
        };
        let exit = launch::run_application(cmd, &env)?;
        if !collector.settle(SETTLE_GRACE) {
            eprintln!(
                "ditto: warning: a process of the {label} run still holds a connection; going on"
            );
        }
        let reports = collector.reports();
        let captured = tally(
            reports
                .iter()
                .filter(|r| r.run.as_deref() == Some(run_name)),
        );
        let line = check_run(
            &format!("{label} run"),
            cmd,
            &opts.kernel,
            exit,
            &captured,
            &base.join(run_name),
            opts.keep.is_some(),
        )?;
        eprintln!("ditto: {line}");
    }
    drop(collector.stop());
    let reference = Snapshot::load(&base.join("ref"))?;
    let optimized = Snapshot::load(&base.join("opt"))?;
    let r = compare_snapshots(&reference, &optimized, &options)?;
    if opts.keep.is_some() {
        eprintln!(
            "ditto: snapshots kept in {} and {}",
            base.join("ref").display(),
            base.join("opt").display()
        );
    }
    Ok(print_comparison(&r, opts.json))
}

pub struct CollectOptions {
    pub socket: PathBuf,
    pub out: PathBuf,
    pub runtime: RuntimeChoice,
}

/// `ditto collect`: serves until SIGINT/SIGTERM; each run goes to
/// `OUT/<run>/`.
pub fn collect(opts: CollectOptions) -> Result<Verdict> {
    let runtime = runtime::resolve(opts.runtime)?;
    let out = absolute(&opts.out)?;
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    catch_stop_signals();
    let mut config = CollectorConfig::new(SnapshotLayout::PerRun(out.clone()));
    config.on_connection_end = Some(Arc::new(|r: &ConnectionReport| eprintln!("ditto: {r}")));
    let collector = start_collector(&runtime, config, SocketPlace::At(opts.socket.clone()))?;
    eprintln!(
        "ditto: collecting on {} into {}/<run>/ (stop with Ctrl-C)",
        collector.socket_path().display(),
        out.display()
    );
    while !STOP.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let reports = collector.stop();
    let failed: Vec<&ConnectionReport> = reports.iter().filter(|r| r.failed()).collect();
    eprintln!(
        "ditto: collector stopped after {}",
        plural(reports.len() as u64, "connection", "connections")
    );
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
