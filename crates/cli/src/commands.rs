//! The `ditto` subcommands: run, compare, validate, collect, inspect,
//! kernels. Each wires the other modules together (runtime_choice →
//! collector → launch → store → compare → report) and says what happened.
//!
//! Owns the sequencing and the user-facing status lines on stderr; results
//! for programs go to stdout (`--json`). It never parses argv (main.rs does)
//! and never exits the process: it returns a [`Verdict`] or an error, which
//! main maps to exit codes 0 (valid), 1 (mismatch), 2 (error).

use crate::collector::hsa::LazyHsaSource;
use crate::collector::{
    Collector, CollectorConfig, ConnectionReport, LiveConnection, SnapshotLayout, SocketPlace,
};
use crate::compare::{CompareOptions, compare_snapshots};
use crate::launch::{self, AppExit, ToolEnvironment};
use crate::log;
use crate::report;
use crate::runtime_choice::{self, ResolvedRuntime, RuntimeChoice};
use crate::stdout::{emit, emit_line};
use crate::store::{Manifest, Snapshot};
use crate::units::{human_bytes, plural};
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

extern "C" fn on_stop_signal(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    _context: *mut libc::c_void,
) {
    STOP.store(true, Ordering::SeqCst);
    // A SIGINT the terminal sent (Ctrl-C, si_code > 0) reached the whole
    // process group, the application with it; one sent to ditto alone
    // (kill, si_code <= 0) did not.
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let from_a_process = info.is_null() || unsafe { (*info).si_code } <= 0;
    if signal == libc::SIGTERM || from_a_process {
        launch::forward_signal_to_application(signal);
    }
}

/// SIGINT/SIGTERM set a flag instead of killing ditto, so it can report
/// and clean up. The application, in the same process group, gets Ctrl-C
/// itself; a SIGTERM or SIGINT sent to ditto alone is passed on to it
/// (otherwise ditto would wait for an application that was never told to
/// stop). The handler is reset to default in the child by exec.
fn catch_stop_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: an all-zero sigaction is valid; the handler only stores
        // to atomics and calls kill, which are async-signal-safe.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_stop_signal as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}

/// Starts the collector over `runtime` (chosen by `choice`): the system's
/// HSA runtime is loaded now (its error is one now, not at the first
/// buffer), ditto's CPU runtime when an HSA buffer first arrives, so that a
/// CUDA run starts none. Where `auto` chose the CPU runtime, the first HSA
/// application to connect hears so ([`runtime_choice::cpu_notice`]).
fn start_collector(
    choice: RuntimeChoice,
    runtime: &ResolvedRuntime,
    mut config: CollectorConfig,
    place: SocketPlace,
) -> Result<Collector> {
    let host_mapped = matches!(runtime, ResolvedRuntime::Cpu { .. });
    let source = LazyHsaSource::new(runtime.library(), host_mapped, !host_mapped)
        .context("the collector needs the HSA runtime to map the application's buffers")?;
    if let Some(text) = runtime_choice::cpu_notice(choice, runtime) {
        let once = std::sync::Once::new();
        config.on_hsa_connection = Some(Arc::new(move || once.call_once(|| eprintln!("{text}"))));
    }
    Ok(Collector::start(Arc::new(source), config, place)?)
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
    /// Whether a problem is more than a connection cut short (an error, a
    /// rejection): a connection that only ended mid-message leaves an
    /// incomplete snapshot, which the run says as such.
    errors: bool,
    /// "the tool was never loaded in pid 12: ...": processes whose HSA
    /// runtime never started the tool (not counted in `connections`).
    never_loaded: Vec<String>,
    /// "dispatch 3 of run 'ref' (pid 12, rank 0)": received, not acknowledged.
    in_flight: Vec<String>,
}

fn tally<'a>(reports: impl Iterator<Item = &'a ConnectionReport>) -> Captured {
    let mut c = Captured {
        connections: 0,
        dispatches: 0,
        arrays: 0,
        bytes: 0,
        problems: Vec::new(),
        errors: false,
        never_loaded: Vec::new(),
        in_flight: Vec::new(),
    };
    for r in reports {
        if let crate::collector::ConnectionEnd::NeverLoaded(why) = &r.end {
            c.never_loaded.push(format!(
                "the tool was never loaded in pid {}: {why}",
                r.pid.unwrap_or(0)
            ));
            continue;
        }
        c.connections += 1;
        c.dispatches += r.dispatches_captured;
        c.arrays += r.arrays_captured;
        c.bytes += r.bytes_captured;
        if let crate::collector::ConnectionEnd::Dropped {
            in_flight: Some(i), ..
        } = &r.end
        {
            c.in_flight.push(format!("dispatch {i} of {}", r.who()));
        }
        if r.failed() {
            c.errors |= !r.errors.is_empty()
                || !matches!(r.end, crate::collector::ConnectionEnd::Dropped { .. });
            c.problems.push(r.to_string());
        } else if !matches!(r.end, crate::collector::ConnectionEnd::Goodbye) || r.missed_some() {
            log::warn(&r.to_string());
        }
    }
    c
}

/// "dispatches 0, 1 and 2 of rank 0" / "nothing": what a snapshot holds.
fn saved_dispatches(manifest: Option<&Manifest>, dir: &Path, show_dir: bool) -> String {
    let Some(m) = manifest.filter(|m| !m.dispatches.is_empty()) else {
        return "nothing was saved".into();
    };
    let mut ranks: std::collections::BTreeMap<u32, Vec<u64>> = Default::default();
    for d in &m.dispatches {
        ranks.entry(d.rank).or_default().push(d.index);
    }
    let parts: Vec<String> = ranks
        .into_iter()
        .map(|(rank, mut indices)| {
            indices.sort_unstable();
            let list = if indices.len() > 6 {
                format!("{}..={}", indices[0], indices[indices.len() - 1])
            } else {
                indices
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            format!("rank {rank}: dispatch {list}")
        })
        .collect();
    let place = if show_dir {
        format!(" in {}", dir.display())
    } else {
        " (keep snapshots with --keep DIR)".to_string()
    };
    format!(
        "saved {} ({}){place}",
        plural(m.dispatches.len() as u64, "dispatch", "dispatches"),
        parts.join("; ")
    )
}

/// One application run as `check_run` judges it.
struct RunOutcome<'a> {
    label: &'a str,
    command: &'a [String],
    kernel_query: &'a str,
    exit: AppExit,
    captured: Captured,
    /// Connections still open when a timeout stopped the application.
    pending: Vec<LiveConnection>,
    dir: &'a Path,
    show_dir: bool,
    /// `--arg-sizes`, as given: the arguments it sizes were asked for.
    arg_sizes: Option<&'a str>,
}

/// Checks what one application run delivered into its directory; returns
/// the summary line or the error to report.
fn check_run(o: RunOutcome) -> Result<String> {
    let manifest = Snapshot::load(o.dir).ok().map(|s| s.manifest);
    let kernel = kernel_label(manifest.as_ref(), o.kernel_query);
    let captured = &o.captured;
    let mut what = format!(
        "{} of {kernel} ({}, {})",
        plural(captured.dispatches, "dispatch", "dispatches"),
        plural(captured.arrays, "array", "arrays"),
        human_bytes(captured.bytes),
    );
    if o.show_dir {
        what.push_str(&format!(" into {}", o.dir.display()));
    }
    let label = o.label;
    let cmd = o.command.join(" ");
    if !o.exit.success() {
        let mut what_happened = vec![];
        if !o.pending.is_empty() {
            let list: Vec<String> = o.pending.iter().map(|p| p.to_string()).collect();
            what_happened.push(format!("pending at the timeout: {}", list.join("; ")));
        } else if matches!(o.exit, AppExit::TimedOut(_)) {
            what_happened.push(if captured.connections == 0 {
                "pending at the timeout: the tool had not connected to the collector".to_string()
            } else {
                "pending at the timeout: no open connection to the collector".to_string()
            });
        }
        if captured.in_flight.is_empty() {
            if o.pending.iter().all(|p| p.capturing.is_none()) {
                what_happened.push("no dispatch was in flight".into());
            }
        } else {
            what_happened.push(format!(
                "in flight (not acknowledged): {}",
                captured.in_flight.join("; ")
            ));
        }
        what_happened.push(saved_dispatches(manifest.as_ref(), o.dir, o.show_dir));
        let advice = match o.exit {
            AppExit::TimedOut(_) => "raise --timeout if it needs longer, or see why it stalls",
            _ => "fix the application first (run it without ditto to see)",
        };
        bail!(
            "{label} ({cmd}) ended with {}: {advice}; {}",
            o.exit,
            what_happened.join("; ")
        );
    }
    // A connection cut mid-message and nothing else wrong: the process
    // ended while its tool was writing (killed, or gone after its tool gave
    // up on a collector that was not reading); the snapshot is incomplete,
    // which is said below with what is unaccounted.
    let only_cut_short = !captured.errors
        && manifest
            .as_ref()
            .is_some_and(|m| !m.unaccounted().is_empty());
    if !captured.problems.is_empty() && !only_cut_short {
        bail!(
            "{label} ({cmd}): capture failed: {}; {what} before that",
            captured.problems.join("; ")
        );
    }
    if captured.connections == 0 && !captured.never_loaded.is_empty() {
        bail!("{label} ({cmd}): {}", captured.never_loaded.join("; "));
    }
    if captured.connections == 0 {
        bail!(
            "{label} ({cmd}) exited but the tool never connected to the collector: is it an HSA/HIP \
             or CUDA application, and does the tool load? (rerun with DITTO_LOG=debug)"
        );
    }
    // A process whose connection ended without Goodbye: how many of its
    // dispatches matched, and what became of them, is unknown.
    if let Some(m) = manifest.as_ref() {
        let unaccounted = m.unaccounted();
        if !unaccounted.is_empty() {
            bail!(
                "{label} ({cmd}): captured {what}, but the snapshot is incomplete: {}; see the \
                 tool's warnings above",
                unaccounted.join("; ")
            );
        }
    }
    // Other processes were captured: a process that loaded an HSA runtime
    // without using it (a launcher, say) is only worth a warning.
    for n in &captured.never_loaded {
        log::warn(n);
    }
    if captured.dispatches == 0
        && let Some(m) = manifest.as_ref().filter(|m| !m.missing.is_empty())
    {
        // The kernel ran, but no dispatch of it was captured: say why.
        let mut reasons: Vec<(&'static str, u64)> = Vec::new();
        for r in m.missing.iter().filter(|r| r.arg.is_none()) {
            match reasons
                .iter_mut()
                .find(|(name, _)| *name == r.reason.name())
            {
                Some((_, n)) => *n += r.count,
                None => reasons.push((r.reason.name(), r.count)),
            }
        }
        let reasons: Vec<String> = reasons
            .iter()
            .map(|(name, n)| format!("{n} ({name})"))
            .collect();
        bail!(
            "{label} ({cmd}) dispatched the kernel matching {:?}, but no dispatch of it was \
             captured: {} (listed under \"missing\" in {}; `ditto inspect` shows why; check \
             --dispatch)",
            o.kernel_query,
            reasons.join(", "),
            o.dir.join("manifest.json").display()
        );
    }
    if captured.dispatches == 0 {
        if let Some(m) = manifest.as_ref() {
            log::debug(&format!(
                "every kernel the application dispatched: {}",
                crate::diagnose::every_kernel(m)
            ));
        }
        let what_ran = manifest.as_ref().map_or_else(
            || format!("its snapshot in {} could not be read", o.dir.display()),
            crate::compare::what_ran,
        );
        let renamed = if label.starts_with("optimized run") {
            " (an optimized build that renamed its kernel: give its name as --opt-kernel)"
        } else {
            ""
        };
        bail!(
            "{label} ({cmd}) never dispatched a kernel matching {:?}; {what_ran}{renamed}",
            o.kernel_query
        );
    }
    // A pattern is meant to pick one kernel: more is an error naming each.
    if let Some(m) = manifest.as_ref()
        && let Ok(Some(re)) = ditto_kernels::matching::query_regex(o.kernel_query)
    {
        let pattern = re.as_str();
        let mut matched: Vec<&str> = m
            .dispatches
            .iter()
            .filter_map(|d| d.kernel.as_ref().map(|k| k.demangled.as_str()))
            .collect();
        matched.sort_unstable();
        matched.dedup();
        if matched.len() > 1 {
            bail!(
                "{label} ({cmd}): the kernel regex {pattern:?} matched {} kernels: {}; make it \
                 match one (anchor it: ^name\\(, or give --kernel with the name)",
                matched.len(),
                matched.join("; ")
            );
        }
    }
    // Every matched dispatch is captured or missing for a reason; missing
    // for any reason but --dispatch, the snapshot is incomplete: an error.
    if let Some(m) = manifest.as_ref() {
        let lost: Vec<(ditto_protocol::MissReason, u64)> =
            crate::store::missing::count_by_reason(m)
                .into_iter()
                .filter(|(r, _)| *r != ditto_protocol::MissReason::Selection)
                .collect();
        if !lost.is_empty() {
            let why: Vec<String> = lost
                .iter()
                .map(|(r, n)| format!("{n} ({})", r.name()))
                .collect();
            bail!(
                "{label} ({cmd}): captured {what}, but not every matched dispatch: not captured \
                 {} (listed under \"missing\" in {}; `ditto inspect` shows why)",
                why.join(", "),
                o.dir.join("manifest.json").display()
            );
        }
    }
    // An argument the user sized with --arg-sizes was asked for by name:
    // left out of a captured dispatch, the capture did not do what it was
    // asked (an expression that overflows, a size past its allocation).
    if let (Some(text), Some(m)) = (o.arg_sizes, manifest.as_ref()) {
        let sized = ditto_kernels::ArgSizes::parse(text)
            .map_err(|e| anyhow::anyhow!("--arg-sizes: {e}"))?;
        let left_out: Vec<&crate::store::missing::MissingRecord> = m
            .missing
            .iter()
            .filter(|r| {
                r.reason != ditto_protocol::MissReason::Selection
                    && r.arg.is_some_and(|a| sized.sizes.contains_key(&a))
            })
            .collect();
        if let Some(first) = left_out.first() {
            bail!(
                "{label} ({cmd}): captured {what}, but not the argument{} --arg-sizes {text:?} \
                 sizes: {} of them left out; the first: dispatch {} of rank {}, arg{}: {}; fix \
                 the expression (its terms are integer arguments of the kernel, its product \
                 must fit the argument's allocation)",
                if sized.sizes.len() > 1 { "s" } else { "" },
                left_out.len(),
                first.indices(),
                first.rank,
                first.arg.unwrap_or_default(),
                first.detail
            );
        }
    }
    Ok(format!("{label}: {}, captured {what}", o.exit))
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
    pub kernel: String,
    pub arg_types: Option<String>,
    /// `--dispatch`, already checked: which matched dispatches to capture.
    pub dispatch: Option<String>,
    /// `--capture`, already checked: which arguments, before/after.
    pub capture: Option<String>,
    /// `--arg-sizes`, already checked: extents of pointer arguments.
    pub arg_sizes: Option<String>,
    pub out: PathBuf,
    pub runtime: RuntimeChoice,
    pub command: Vec<String>,
    pub timeout: Option<Duration>,
}

/// An empty `--kernel` matches nothing: refused before anything runs.
/// `flag` (`--kernel`, `--opt-kernel`) names a kernel: not empty, and a
/// `re:` pattern (`--kernel-regex`) is a regular expression.
fn kernel_given(flag: &str, kernel: &str) -> Result<()> {
    if kernel.trim().is_empty() {
        bail!("{flag} is empty: name the kernel to capture (`ditto kernels FILE` lists them)");
    }
    if let Err(e) = ditto_kernels::matching::query_regex(kernel) {
        bail!("{e}");
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
        capture: opts.capture.clone(),
        arg_sizes: opts.arg_sizes.clone(),
        runtime_dir: runtime.library_dir().map(Path::to_path_buf),
        app_stdout_to_stderr: false,
        extra_env: vec![],
        cwd: None,
        timeout: opts.timeout,
    };
    let (exit, pending) = run_one(&collector, &opts.command, &env)?;
    if !collector.settle(SETTLE_GRACE) {
        log::warn(&format!(
            "a process still holds a connection {SETTLE_GRACE:?} after the application exited; stopping"
        ));
    }
    let (reports, uncommitted) = collector.stop_and_commit();
    if !uncommitted.is_empty() {
        bail!("{}", uncommitted.join("; "));
    }
    let line = check_run(RunOutcome {
        label: "the application",
        command: &opts.command,
        kernel_query: &opts.kernel,
        exit,
        captured: tally(reports.iter()),
        pending,
        dir: &out,
        show_dir: true,
        arg_sizes: opts.arg_sizes.as_deref(),
    })?;
    log::info(&line);
    Ok(Verdict::Valid)
}

pub struct CompareArgs {
    pub reference: PathBuf,
    pub optimized: PathBuf,
    /// `--opt-kernel`: compare only the optimized snapshot's dispatches of
    /// this kernel.
    pub opt_kernel: Option<String>,
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

/// `ditto compare REF_DIR OPT_DIR`.
pub fn compare(args: CompareArgs) -> Result<Verdict> {
    let options = args.compare;
    let reference = Snapshot::load(&args.reference).context("reading the reference snapshot")?;
    let mut optimized =
        Snapshot::load(&args.optimized).context("reading the optimized snapshot")?;
    if let Some(query) = &args.opt_kernel {
        kernel_given("--opt-kernel", query)?;
        optimized = crate::compare::only_kernel(&optimized, query)?;
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
    pub kernel: String,
    /// `--opt-kernel`: the optimized builds' kernel, when renamed.
    pub opt_kernel: Option<String>,
    /// The reference to run; `None` with `reference_snapshot`.
    pub reference: Option<Side>,
    /// `--ref-snapshot DIR`: a stored reference instead of a run.
    pub reference_snapshot: Option<PathBuf>,
    /// One or more optimized builds (`--opt` repeated), each compared
    /// with the reference.
    pub optimized: Vec<Side>,
    pub compare: CompareOptions,
    pub arg_types: Option<String>,
    /// `--dispatch`, already checked; the same selection for every run.
    pub dispatch: Option<String>,
    /// `--capture`, already checked; the same for every run.
    pub capture: Option<String>,
    /// `--arg-sizes`, already checked; the same for every run.
    pub arg_sizes: Option<String>,
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
        if STOP.load(Ordering::SeqCst) {
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
            capture: opts.capture.clone(),
            arg_sizes: opts.arg_sizes.clone(),
            runtime_dir: runtime.library_dir().map(Path::to_path_buf),
            app_stdout_to_stderr: opts.json,
            extra_env: side.env.clone(),
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
            arg_sizes: opts.arg_sizes.as_deref(),
        })?;
        log::info(&line);
    }
    let (_, uncommitted) = collector.stop_and_commit();
    if !uncommitted.is_empty() {
        bail!("{}", uncommitted.join("; "));
    }
    let reference = match stored_reference {
        Some(s) => s,
        None => Snapshot::load(&base.join("ref"))?,
    };
    let mut verdict = Verdict::Valid;
    let mut objects = Vec::new();
    for (label, run_name, cmd, _) in runs.iter().filter(|r| r.1 != "ref") {
        let optimized = Snapshot::load(&base.join(run_name))?;
        let r = compare_snapshots(&reference, &optimized, &options)?;
        if !r.valid() {
            verdict = Verdict::Mismatch;
        }
        if opts.json {
            objects.push(report::render_json(&r));
        } else {
            if several {
                emit_line(&format!("{label}: {}", cmd.join(" ")))?;
            }
            emit(&report::render_human(&r, report::stdout_wants_color()))?;
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
}

/// `ditto collect`: serves until SIGINT/SIGTERM; each run goes to
/// `OUT/<run>/`.
pub fn collect(opts: CollectOptions) -> Result<Verdict> {
    crate::scratch::sweep_stale_temp_dirs();
    let runtime = runtime_choice::resolve(opts.runtime)?;
    let out = absolute(&opts.out)?;
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    catch_stop_signals();
    let mut config = CollectorConfig::new(SnapshotLayout::PerRun(out.clone()));
    config.on_connection_end = Some(Arc::new(|r: &ConnectionReport| log::info(&r.to_string())));
    let collector = start_collector(
        opts.runtime,
        &runtime,
        config,
        SocketPlace::At(opts.socket.clone()),
    )?;
    log::info(&format!(
        "collecting on {} into {}/<run>/ (stop with Ctrl-C)",
        collector.socket_path().display(),
        out.display()
    ));
    while !STOP.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let (reports, uncommitted) = collector.stop_and_commit();
    let failed: Vec<&ConnectionReport> = reports.iter().filter(|r| r.failed()).collect();
    if !uncommitted.is_empty() {
        bail!("{}", uncommitted.join("; "));
    }
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

/// The largest file `ditto kernels` reads (the biggest HIP programs carry
/// fat binaries of a few hundred MiB).
const MAX_PROGRAM_FILE_BYTES: u64 = 4 << 30;

/// The bytes of a regular file of at most [`MAX_PROGRAM_FILE_BYTES`]. It is
/// opened without blocking and checked before anything is read: a FIFO or a
/// device (`/dev/zero`) is refused, never read or waited on.
fn read_program_file(file: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(file)
        .with_context(|| format!("cannot read {}", file.display()))?;
    let meta = f
        .metadata()
        .with_context(|| format!("cannot read {}", file.display()))?;
    if !meta.is_file() {
        anyhow::bail!(
            "{} is not a regular file: give a code object, a HIP program or a bundle file",
            file.display()
        );
    }
    if meta.len() > MAX_PROGRAM_FILE_BYTES {
        anyhow::bail!(
            "{} is {} bytes, more than the {} bytes `ditto kernels` reads",
            file.display(),
            meta.len(),
            MAX_PROGRAM_FILE_BYTES
        );
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    f.by_ref()
        .take(MAX_PROGRAM_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {}", file.display()))?;
    if bytes.len() as u64 > MAX_PROGRAM_FILE_BYTES {
        anyhow::bail!(
            "{} grew past {MAX_PROGRAM_FILE_BYTES} bytes while it was read",
            file.display()
        );
    }
    Ok(bytes)
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
    let listed = crate::kernel_list::list(&bytes, kernel, types.as_deref())
        .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    if listed.is_empty() {
        let all = crate::kernel_list::list(&bytes, None, None)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collector::{ConnectionEnd, ConnectionReport};
    use crate::store::SnapshotWriter;

    fn hello() -> ditto_protocol::Hello {
        ditto_protocol::Hello {
            version: ditto_protocol::PROTOCOL_VERSION,
            pid: 4242,
            run: "storm".into(),
            kernel_query: "storm_fill".into(),
            command_line: vec!["storm".into()],
            working_directory: "/".into(),
            rank: None,
            api: ditto_protocol::Api::Hsa,
        }
    }

    /// What `ditto run` says of a process whose connection was cut in the
    /// middle of a message after dispatch 2500, with or without an error.
    fn verdict(error: Option<&str>) -> String {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SnapshotWriter::create(dir.path(), "storm_fill").unwrap();
        let rank = w.add_run(&hello()).unwrap();
        let cut = "the connection closed in the middle of a message after dispatch 2500";
        w.set_unaccounted(rank, 2501, cut).unwrap();
        drop(w);
        let mut report = ConnectionReport::new();
        report.run = Some("storm".into());
        report.pid = Some(4242);
        report.rank = Some(rank);
        report.dispatches_captured = 2501;
        report.end = ConnectionEnd::Dropped {
            in_flight: Some(2501),
            reason: cut.into(),
        };
        report.errors.extend(error.map(String::from));
        let command = ["storm".to_string()];
        check_run(RunOutcome {
            label: "the application",
            command: &command,
            kernel_query: "storm_fill",
            exit: AppExit::Code(0),
            captured: tally(std::iter::once(&report)),
            pending: Vec::new(),
            dir: dir.path(),
            show_dir: false,
            arg_sizes: None,
        })
        .unwrap_err()
        .to_string()
    }

    #[test]
    fn a_connection_only_cut_short_is_an_incomplete_snapshot_and_one_with_an_error_a_failed_capture()
     {
        let cut = verdict(None);
        assert!(
            cut.contains("but the snapshot is incomplete: pid 4242 (rank 0): its dispatches from index 2501 on are unaccounted"),
            "{cut}"
        );
        let failed = verdict(Some("fingerprint mismatch"));
        assert!(
            failed.contains("capture failed:") && failed.contains("error: fingerprint mismatch"),
            "{failed}"
        );
    }
}
