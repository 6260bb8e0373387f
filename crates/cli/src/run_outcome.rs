//! What one application run under the tool delivered, as `ditto run` and
//! `ditto validate` judge it: the totals of its connections' reports
//! ([`tally`]) and the verdict on its snapshot directory ([`check_run`]):
//! the summary line of a good run, or the error that says what went wrong
//! (the application failed or timed out, the capture failed, the tool
//! never connected, the kernel never ran or matched several, dispatches or
//! sized arguments left out) and what was saved. Owns the diagnosis and
//! its wording; it runs nothing and writes nothing (warnings go to the
//! log).

use crate::collector::{ConnectionReport, LiveConnection};
use crate::launch::AppExit;
use crate::log;
use crate::store::{Manifest, Snapshot};
use crate::units::{human_bytes, plural};
use anyhow::{Result, bail};
use ditto_kernels::{ArgSizes, KernelQuery};
use ditto_protocol::MissReason;
use std::path::Path;

/// "reduce_sum(float const*, float*, int)" or the query when nothing ran.
fn kernel_label(manifest: Option<&Manifest>, query: &str) -> String {
    let Some(m) = manifest else {
        return query.to_string();
    };
    // The distinct kernels captured, in order of first capture, with their
    // dispatch counts: a name can select several (instantiations, or
    // functions of one name in several namespaces).
    let mut kernels: Vec<(&str, &str, u64)> = Vec::new();
    for k in m.dispatches.iter().filter_map(|d| d.kernel.as_ref()) {
        match kernels
            .iter_mut()
            .find(|(mangled, _, _)| *mangled == k.mangled)
        {
            Some((_, _, n)) => *n += 1,
            None => kernels.push((&k.mangled, &k.demangled, 1)),
        }
    }
    if kernels.len() > 1 {
        let list: Vec<String> = kernels
            .iter()
            .map(|(_, demangled, n)| format!("{demangled} ×{n}"))
            .collect();
        return format!(
            "{} kernels named `{query}` [{}]",
            kernels.len(),
            list.join("; ")
        );
    }
    m.kernel
        .as_ref()
        .map(|k| k.demangled.clone())
        .unwrap_or_else(|| query.to_string())
}

/// Totals over the reports of one snapshot directory.
pub struct Captured {
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

pub fn tally<'a>(reports: impl Iterator<Item = &'a ConnectionReport>) -> Captured {
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
pub struct RunOutcome<'a> {
    pub label: &'a str,
    pub command: &'a [String],
    pub kernel_query: &'a KernelQuery,
    pub exit: AppExit,
    pub captured: Captured,
    /// Connections still open when a timeout stopped the application.
    pub pending: Vec<LiveConnection>,
    pub dir: &'a Path,
    pub show_dir: bool,
    /// `--arg-sizes`: the arguments it sizes were asked for.
    pub arg_sizes: Option<&'a ArgSizes>,
    /// Where the CPU HSA runtime was chosen and is not there, what to say
    /// of it ([`crate::runtime_choice::ResolvedRuntime::missing`]): said
    /// when the application fails, as an HSA application cannot start
    /// without it (a CUDA application never needs it).
    pub missing_runtime: Option<String>,
}

/// Checks what one application run delivered into its directory; returns
/// the summary line or the error to report.
pub fn check_run(o: RunOutcome) -> Result<String> {
    let manifest = Snapshot::load(o.dir).ok().map(|s| s.manifest);
    // The query as the user wrote it (and as the snapshot records it).
    let query = o.kernel_query.to_string();
    let kernel = kernel_label(manifest.as_ref(), &query);
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
        if let Some(missing) = &o.missing_runtime {
            what_happened.push(format!(
                "if it is an HSA application, it could not load its runtime: {missing}"
            ));
        }
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
        // Why the first one not captured for an error was not: a kernel
        // whose argument types are unknown says what to pass.
        let why = m
            .missing
            .iter()
            .find(|r| r.arg.is_none() && r.reason == MissReason::Error && !r.detail.is_empty())
            .map(|r| format!("; {}", r.detail))
            .unwrap_or_default();
        bail!(
            "{label} ({cmd}) dispatched the kernel matching {:?}, but no dispatch of it was \
             captured: {}{why} (listed under \"missing\" in {}; `ditto inspect` shows why; \
             check --dispatch)",
            query,
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
        bail!("{label} ({cmd}) never dispatched a kernel matching {query:?}; {what_ran}{renamed}");
    }
    // A pattern is meant to pick one kernel: more is an error naming each.
    if let Some(m) = manifest.as_ref()
        && let KernelQuery::Regex(re) = o.kernel_query
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
    if let (Some(sized), Some(m)) = (o.arg_sizes, manifest.as_ref()) {
        let text = sized.to_string();
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
            kernel_query: &KernelQuery::Name("storm_fill".into()),
            exit: AppExit::Code(0),
            captured: tally(std::iter::once(&report)),
            pending: Vec::new(),
            dir: dir.path(),
            show_dir: false,
            arg_sizes: None,
            missing_runtime: None,
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
