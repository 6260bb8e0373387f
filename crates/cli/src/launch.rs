//! Running an application under the tool: the environment that preloads
//! libditto.so and points it at a collector, the child process itself
//! (stdout/stderr pass straight through), and how it ended.
//!
//! Owns the environment contract of the tool library (LD_PRELOAD and
//! HSA_TOOLS_LIB for HSA applications: ROCm 5.2's runtime loads tools only
//! from HSA_TOOLS_LIB, later ones also find a preloaded tool, and since 6.1
//! one with rocprofiler-sdk present loads neither unless
//! HSA_TOOLS_ROCPROFILER_V1_TOOLS=1; the tool starts once however many
//! ways it is found. CUDA_INJECTION64_PATH for CUDA ones, DITTO_KERNEL, DITTO_SOCKET, DITTO_RUN_NAME, DITTO_ARG_TYPES, DITTO_DISPATCH,
//! DITTO_CAPTURE, DITTO_ARG_SIZES,
//! LD_LIBRARY_PATH for the CPU runtime), passing ditto's SIGTERM on to the
//! application, helper processes (the replay process) that die with ditto
//! and are killed, group and all, when it is asked to stop, and the splitting of `--ref 'CMD ARGS'` strings. It never
//! talks to the collector and never reads snapshots.

use ditto_kernels::{ArgSizes, KernelQuery};
use ditto_protocol::{CaptureSet, DispatchSelection};
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// Pid of the application [`run_application`] is waiting for (0: none).
static RUNNING_APPLICATION: AtomicI32 = AtomicI32::new(0);
/// A stop signal to pass on to the application (0: none).
static SIGNAL_TO_FORWARD: AtomicI32 = AtomicI32::new(0);

/// Passes `signal` on to the application being run (now, or as soon as it
/// is started), so that `kill <ditto>` ends the application instead of
/// leaving ditto waiting for it. Async-signal-safe: call it from a handler.
pub fn forward_signal_to_application(signal: libc::c_int) {
    SIGNAL_TO_FORWARD.store(signal, Ordering::SeqCst);
    let pid = RUNNING_APPLICATION.load(Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe; pid is our child, not yet reaped.
        unsafe { libc::kill(pid, signal) };
    }
}

/// Process group of the helper process [`output_of_own_group`] waits
/// for (0: none).
static RUNNING_GROUP: AtomicI32 = AtomicI32::new(0);
/// Set once ditto is asked to stop: helper groups are killed, now and
/// whenever one starts after.
static KILL_GROUPS: AtomicBool = AtomicBool::new(false);

/// Kills (SIGKILL) the process group of the helper process ditto waits
/// for, now or as soon as it is started: a helper (the replay process)
/// holds nothing worth a graceful end, and its whole group goes so that
/// nothing it started runs on. Async-signal-safe: call it from a handler.
pub fn kill_helper_group() {
    KILL_GROUPS.store(true, Ordering::SeqCst);
    let group = RUNNING_GROUP.load(Ordering::SeqCst);
    if group > 0 {
        // SAFETY: kill is async-signal-safe; the group is our child's.
        unsafe { libc::kill(-group, libc::SIGKILL) };
    }
}

/// Has the kernel kill (SIGKILL) `cmd`'s child when this process dies
/// without killing it itself (SIGKILL, a crash). The kernel sends it when
/// the thread that started the child ends: start it from a thread that
/// lives as long as the process (the main thread).
pub fn die_with_this_process(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: getpid cannot fail.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the child between fork and exec and
    // calls only async-signal-safe functions (prctl, getppid, raise).
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            // The parent may have died before the prctl.
            if libc::getppid() != parent {
                libc::raise(libc::SIGKILL);
            }
            Ok(())
        })
    };
}

/// Runs the helper process `cmd` to its end and collects its output: in
/// a process group of its own that dies with this process
/// ([`die_with_this_process`]) and is killed whole when ditto is asked
/// to stop ([`kill_helper_group`]; the caller then sees it killed by
/// SIGKILL and asks [`crate::stop_signals::stop_requested`]).
pub fn output_of_own_group(cmd: &mut Command) -> std::io::Result<std::process::Output> {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
    die_with_this_process(cmd);
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let group = i32::try_from(child.id()).unwrap_or(0);
    RUNNING_GROUP.store(group, Ordering::SeqCst);
    // A stop that came before the group was published is acted on here.
    if KILL_GROUPS.load(Ordering::SeqCst) && group > 0 {
        // SAFETY: the group our child leads; the child is not yet reaped.
        unsafe { libc::kill(-group, libc::SIGKILL) };
    }
    let out = child.wait_with_output();
    RUNNING_GROUP.store(0, Ordering::SeqCst);
    out
}

/// File name of the tool library.
pub const TOOL_LIBRARY: &str = "libditto.so";

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error(
        "the tool library was not found at {0}: build it with `cargo build --workspace` \
         (it lands next to the ditto executable) or set DITTO_TOOL_LIB"
    )]
    ToolMissing(PathBuf),
    #[error("cannot find the ditto executable's directory: {0}")]
    NoExecutable(std::io::Error),
    #[error("cannot start {program:?}: {error} (check the command and that it is executable)")]
    Spawn {
        program: String,
        error: std::io::Error,
    },
    #[error("waiting for {program:?} failed: {error}")]
    Wait {
        program: String,
        error: std::io::Error,
    },
    #[error("empty command: give the application to run")]
    EmptyCommand,
    #[error("cannot split the command {command:?}: {reason}")]
    BadCommand { command: String, reason: String },
}

/// The tool library: `$DITTO_TOOL_LIB`, else `<dir of ditto>/libditto.so`.
pub fn tool_library() -> Result<PathBuf, LaunchError> {
    let path = match std::env::var_os("DITTO_TOOL_LIB") {
        Some(p) => PathBuf::from(p),
        None => crate::executable_dir()
            .map_err(LaunchError::NoExecutable)?
            .join(TOOL_LIBRARY),
    };
    if !path.exists() {
        return Err(LaunchError::ToolMissing(path));
    }
    Ok(path)
}

/// What the tool inside the application needs to know. The parsed options
/// cross into the application here, and only here, as their text forms
/// (which the tool parses back to the same values).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolEnvironment {
    pub tool_library: PathBuf,
    /// DITTO_KERNEL: the name, or `re:PATTERN`.
    pub kernel: KernelQuery,
    pub socket: PathBuf,
    pub run_name: String,
    pub arg_types: Option<String>,
    /// `--dispatch`: which matched dispatches to capture (DITTO_DISPATCH);
    /// `None`: all.
    pub dispatch: Option<DispatchSelection>,
    /// `--capture`: which arguments, before/after (DITTO_CAPTURE); `None`: outputs.
    pub capture: Option<CaptureSet>,
    /// `--arg-sizes`: extents of pointer arguments (DITTO_ARG_SIZES).
    pub arg_sizes: Option<ArgSizes>,
    /// Put first in LD_LIBRARY_PATH (ditto's CPU runtime).
    pub runtime_dir: Option<PathBuf>,
    /// Send the application's stdout to our stderr, so that our stdout
    /// carries only what ditto prints (the `--json` object).
    pub app_stdout_to_stderr: bool,
    /// Extra variables for this application only (`--ref-env K=V`), set
    /// after ours: the user's word wins.
    pub extra_env: Vec<(String, String)>,
    /// Working directory of the application (`--ref-cwd DIR`); default ours.
    pub cwd: Option<PathBuf>,
    /// Stop the application (SIGTERM, then SIGKILL 2 s later) once it has run this long.
    pub timeout: Option<Duration>,
}

/// A `--ref-env`/`--opt-env` value that is not `NAME=VALUE`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not NAME=VALUE")]
pub struct EnvAssignmentError(pub String);

/// Parses `K=V` as given to `--ref-env`/`--opt-env`.
pub fn parse_env_assignment(text: &str) -> Result<(String, String), EnvAssignmentError> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() && !k.contains('\0') => Ok((k.to_string(), v.to_string())),
        _ => Err(EnvAssignmentError(text.to_string())),
    }
}

pub(crate) fn prepend(first: &Path, rest: Option<OsString>) -> OsString {
    let mut v = first.as_os_str().to_os_string();
    if let Some(rest) = rest.filter(|r| !r.is_empty()) {
        v.push(":");
        v.push(rest);
    }
    v
}

impl ToolEnvironment {
    /// The variables to set, given the current values of LD_PRELOAD,
    /// HSA_TOOLS_LIB and LD_LIBRARY_PATH (ours go first).
    pub fn variables(
        &self,
        ld_preload: Option<OsString>,
        hsa_tools_lib: Option<OsString>,
        ld_library_path: Option<OsString>,
    ) -> Vec<(&'static str, OsString)> {
        let mut tools = self.tool_library.clone().into_os_string();
        if let Some(others) = hsa_tools_lib.filter(|t| !t.is_empty()) {
            // Space-separated, as ROCr reads it.
            tools.push(" ");
            tools.push(others);
        }
        let mut v = vec![
            ("LD_PRELOAD", prepend(&self.tool_library, ld_preload)),
            ("HSA_TOOLS_LIB", tools),
            ("HSA_TOOLS_ROCPROFILER_V1_TOOLS", "1".into()),
            // The CUDA driver loads this one library at cuInit and calls its
            // InitializeInjection (the same file as the preloaded one: loaded once).
            (
                "CUDA_INJECTION64_PATH",
                self.tool_library.clone().into_os_string(),
            ),
            ("DITTO_KERNEL", self.kernel.to_string().into()),
            ("DITTO_SOCKET", self.socket.clone().into_os_string()),
            ("DITTO_RUN_NAME", self.run_name.clone().into()),
        ];
        if let Some(t) = &self.arg_types {
            v.push(("DITTO_ARG_TYPES", t.into()));
        }
        if let Some(d) = &self.dispatch {
            v.push(("DITTO_DISPATCH", d.to_string().into()));
        }
        if let Some(c) = &self.capture {
            v.push(("DITTO_CAPTURE", c.to_string().into()));
        }
        if let Some(a) = &self.arg_sizes {
            v.push(("DITTO_ARG_SIZES", a.to_string().into()));
        }
        if let Some(dir) = &self.runtime_dir {
            v.push(("LD_LIBRARY_PATH", prepend(dir, ld_library_path)));
        }
        v
    }

    fn apply(&self, cmd: &mut Command) {
        for (k, v) in self.variables(
            std::env::var_os("LD_PRELOAD"),
            std::env::var_os("HSA_TOOLS_LIB"),
            std::env::var_os("LD_LIBRARY_PATH"),
        ) {
            cmd.env(k, v);
        }
        if self.arg_types.is_none() {
            cmd.env_remove("DITTO_ARG_TYPES");
        }
        if self.dispatch.is_none() {
            cmd.env_remove("DITTO_DISPATCH");
        }
        if self.capture.is_none() {
            cmd.env_remove("DITTO_CAPTURE");
        }
        if self.arg_sizes.is_none() {
            cmd.env_remove("DITTO_ARG_SIZES");
        }
        for (k, v) in &self.extra_env {
            cmd.env(k, v);
        }
        if let Some(dir) = &self.cwd {
            cmd.current_dir(dir);
        }
    }
}

/// How the application ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppExit {
    Code(i32),
    Signal(i32),
    /// Still running at the timeout; ditto stopped it.
    TimedOut(Duration),
}

impl AppExit {
    pub fn success(self) -> bool {
        self == AppExit::Code(0)
    }
}

/// Grace between SIGTERM and SIGKILL for an application past its timeout.
const KILL_GRACE: Duration = Duration::from_secs(2);

fn signal_name(sig: i32) -> String {
    // SAFETY: strsignal returns a pointer to a static or thread-local string (or null).
    let p = unsafe { libc::strsignal(sig) };
    if p.is_null() {
        return format!("signal {sig}");
    }
    // SAFETY: non-null NUL-terminated string.
    let name = unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy();
    format!("signal {sig} ({name})")
}

impl std::fmt::Display for AppExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AppExit::Code(c) => write!(f, "exit status {c}"),
            AppExit::Signal(s) => write!(f, "killed by {}", signal_name(*s)),
            AppExit::TimedOut(t) => write!(
                f,
                "no exit within the {} s timeout (ditto stopped it)",
                t.as_secs_f64()
            ),
        }
    }
}

/// Runs `argv` under the tool and waits for it; its stdin, stdout and
/// stderr are ours (its stdout goes to our stderr when
/// `env.app_stdout_to_stderr`).
/// With `env.timeout`, `at_timeout` is called once the time is up and
/// before the application is stopped (to note what was pending).
pub fn run_application(argv: &[String], env: &ToolEnvironment) -> Result<AppExit, LaunchError> {
    run_application_noting(argv, env, &mut || {})
}

/// [`run_application`], calling `at_timeout` when `env.timeout` is reached,
/// before the application is stopped.
pub fn run_application_noting(
    argv: &[String],
    env: &ToolEnvironment,
    at_timeout: &mut dyn FnMut(),
) -> Result<AppExit, LaunchError> {
    let (program, args) = argv.split_first().ok_or(LaunchError::EmptyCommand)?;
    let mut cmd = Command::new(program);
    cmd.args(args);
    env.apply(&mut cmd);
    // If ditto dies (even by SIGKILL), the application does not run on
    // without it.
    die_with_this_process(&mut cmd);
    if env.app_stdout_to_stderr {
        use std::os::fd::AsFd;
        let stderr = std::io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|source| LaunchError::Spawn {
                program: program.clone(),
                error: source,
            })?;
        cmd.stdout(std::process::Stdio::from(stderr));
    }
    let mut child = cmd.spawn().map_err(|source| LaunchError::Spawn {
        program: program.clone(),
        error: source,
    })?;
    let pid = i32::try_from(child.id()).unwrap_or(0);
    RUNNING_APPLICATION.store(pid, Ordering::SeqCst);
    // A signal that came before the pid was published is forwarded here.
    let pending = SIGNAL_TO_FORWARD.load(Ordering::SeqCst);
    if pending != 0 && pid > 0 {
        // SAFETY: pid is our child, not yet reaped.
        unsafe { libc::kill(pid, pending) };
    }
    let waited = match env.timeout {
        None => child.wait(),
        Some(limit) => {
            let deadline = Instant::now() + limit;
            loop {
                match child.try_wait() {
                    Ok(Some(status)) => break Ok(status),
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    Ok(None) => {
                        at_timeout();
                        let killed = stop_child(&mut child);
                        RUNNING_APPLICATION.store(0, Ordering::SeqCst);
                        killed.map_err(|source| LaunchError::Wait {
                            program: program.clone(),
                            error: source,
                        })?;
                        return Ok(AppExit::TimedOut(limit));
                    }
                    Err(e) => break Err(e),
                }
            }
        }
    };
    RUNNING_APPLICATION.store(0, Ordering::SeqCst);
    let status = waited.map_err(|source| LaunchError::Wait {
        program: program.clone(),
        error: source,
    })?;
    Ok(match (status.code(), status.signal()) {
        (Some(c), _) => AppExit::Code(c),
        (None, Some(s)) => AppExit::Signal(s),
        (None, None) => AppExit::Code(-1),
    })
}

/// SIGTERM, then SIGKILL after [`KILL_GRACE`]; reaps the child.
fn stop_child(child: &mut std::process::Child) -> std::io::Result<()> {
    let pid = child.id() as i32;
    // SAFETY: pid is our child, not yet reaped.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let deadline = Instant::now() + KILL_GRACE;
    while Instant::now() < deadline {
        if child.try_wait()?.is_some() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill()?;
    child.wait().map(|_| ())
}

/// Splits a command line the way a POSIX shell splits words: blanks
/// separate words; '...' is literal; "..." allows \" \\ \$ \` escapes;
/// a backslash outside quotes escapes the next character. No expansion.
pub fn split_command(command: &str) -> Result<Vec<String>, LaunchError> {
    let bad = |reason: &str| LaunchError::BadCommand {
        command: command.to_string(),
        reason: reason.to_string(),
    };
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = command.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err(bad("unterminated single quote")),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                            Some('\n') => {}
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err(bad("unterminated double quote")),
                        },
                        Some(c) => word.push(c),
                        None => return Err(bad("unterminated double quote")),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some('\n') => {}
                    Some(c) => word.push(c),
                    None => return Err(bad("trailing backslash")),
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    if words.is_empty() {
        return Err(LaunchError::EmptyCommand);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_split_like_a_shell() {
        let s = |c: &str| split_command(c).unwrap();
        assert_eq!(s("./app  --n 4"), ["./app", "--n", "4"]);
        assert_eq!(s("app 'a b' \"c d\" e\\ f"), ["app", "a b", "c d", "e f"]);
        assert_eq!(
            s("app \"say \\\"hi\\\"\" 'it''s'"),
            ["app", "say \"hi\"", "its"]
        );
        assert_eq!(s("app ''"), ["app", ""]);
        assert_eq!(s("app \"a\\nb\""), ["app", "a\\nb"]);
        assert!(matches!(
            split_command("app 'open"),
            Err(LaunchError::BadCommand { .. })
        ));
        assert!(matches!(
            split_command("   "),
            Err(LaunchError::EmptyCommand)
        ));
    }

    #[test]
    fn tool_environment_puts_ours_first_and_keeps_the_rest() {
        let env = ToolEnvironment {
            tool_library: "/t/libditto.so".into(),
            kernel: KernelQuery::Name("reduce_sum".into()),
            socket: "/s/socket".into(),
            run_name: "ref".into(),
            arg_types: Some("f32*,i32".into()),
            dispatch: Some(DispatchSelection::parse("1..3").unwrap()),
            capture: Some(CaptureSet::parse("inputs, outputs").unwrap()),
            arg_sizes: Some(ArgSizes::parse("arg2 = arg3").unwrap()),
            runtime_dir: Some("/t/hsa-cpu".into()),
            app_stdout_to_stderr: false,
            extra_env: vec![],
            cwd: None,
            timeout: None,
        };
        let vars = env.variables(
            Some("/other.so".into()),
            Some("/opt/rocm/lib/librocprofiler64.so".into()),
            Some("/usr/lib".into()),
        );
        let get = |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
        assert_eq!(get("LD_PRELOAD").unwrap(), "/t/libditto.so:/other.so");
        assert_eq!(
            get("HSA_TOOLS_LIB").unwrap(),
            "/t/libditto.so /opt/rocm/lib/librocprofiler64.so"
        );
        assert_eq!(get("HSA_TOOLS_ROCPROFILER_V1_TOOLS").unwrap(), "1");
        assert_eq!(get("CUDA_INJECTION64_PATH").unwrap(), "/t/libditto.so");
        assert_eq!(get("LD_LIBRARY_PATH").unwrap(), "/t/hsa-cpu:/usr/lib");
        assert_eq!(get("DITTO_KERNEL").unwrap(), "reduce_sum");
        assert_eq!(get("DITTO_SOCKET").unwrap(), "/s/socket");
        assert_eq!(get("DITTO_RUN_NAME").unwrap(), "ref");
        assert_eq!(get("DITTO_ARG_TYPES").unwrap(), "f32*,i32");
        assert_eq!(get("DITTO_DISPATCH").unwrap(), "1..3");
        assert_eq!(get("DITTO_CAPTURE").unwrap(), "inputs,outputs");
        assert_eq!(get("DITTO_ARG_SIZES").unwrap(), "arg2=arg3");
        // A pattern crosses as its text form, `re:PATTERN`.
        let by_pattern = ToolEnvironment {
            kernel: KernelQuery::regex("^reduce_sum_v[0-9]+\\(").unwrap(),
            ..env.clone()
        };
        let vars = by_pattern.variables(None, None, None);
        let kernel = vars.iter().find(|(n, _)| *n == "DITTO_KERNEL").unwrap();
        assert_eq!(kernel.1, "re:^reduce_sum_v[0-9]+\\(");
        let system = ToolEnvironment {
            runtime_dir: None,
            arg_types: None,
            dispatch: None,
            capture: None,
            arg_sizes: None,
            ..env
        };
        let vars = system.variables(None, None, Some("/usr/lib".into()));
        assert!(vars.iter().all(|(k, _)| {
            ![
                "LD_LIBRARY_PATH",
                "DITTO_ARG_TYPES",
                "DITTO_DISPATCH",
                "DITTO_CAPTURE",
                "DITTO_ARG_SIZES",
            ]
            .contains(k)
        }));
        assert_eq!(vars[0].1, "/t/libditto.so");
    }

    /// A tool library that always loads (libc), so ld.so stays quiet.
    fn harmless_env() -> ToolEnvironment {
        ToolEnvironment {
            tool_library: "libc.so.6".into(),
            kernel: KernelQuery::Name("k".into()),
            socket: "/nonexistent".into(),
            run_name: "r".into(),
            arg_types: None,
            dispatch: None,
            capture: None,
            arg_sizes: None,
            runtime_dir: None,
            app_stdout_to_stderr: false,
            extra_env: vec![],
            cwd: None,
            timeout: None,
        }
    }

    #[test]
    fn per_run_environment_and_working_directory_reach_the_application() {
        let dir = tempfile::tempdir().unwrap();
        let env = ToolEnvironment {
            extra_env: vec![("DITTO_TEST_SIDE".into(), "opt".into())],
            cwd: Some(dir.path().to_path_buf()),
            ..harmless_env()
        };
        let script = format!(
            "test \"$DITTO_TEST_SIDE\" = opt && test \"$(pwd -P)\" = {:?}",
            dir.path().canonicalize().unwrap()
        );
        let exit = run_application(&["sh".into(), "-c".into(), script], &env).unwrap();
        assert_eq!(exit, AppExit::Code(0));
        assert_eq!(
            parse_env_assignment("A=b=c"),
            Ok(("A".into(), "b=c".into()))
        );
        assert!(parse_env_assignment("=x").is_err() && parse_env_assignment("AB").is_err());
    }

    #[test]
    fn an_application_past_its_timeout_is_stopped_after_noting_what_was_pending() {
        let env = ToolEnvironment {
            timeout: Some(Duration::from_millis(200)),
            ..harmless_env()
        };
        let mut noted = 0;
        let started = Instant::now();
        let exit = run_application_noting(&split_command("sleep 30").unwrap(), &env, &mut || {
            noted += 1
        })
        .unwrap();
        assert_eq!(exit, AppExit::TimedOut(Duration::from_millis(200)));
        assert_eq!(noted, 1);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        assert!(exit.to_string().contains("0.2 s timeout"), "{exit}");
    }

    #[test]
    fn exit_status_and_signal_are_reported() {
        let env = harmless_env();
        let exit = run_application(&split_command("sh -c 'exit 3'").unwrap(), &env).unwrap();
        assert_eq!(exit, AppExit::Code(3));
        let exit = run_application(&split_command("sh -c 'kill -TERM $$'").unwrap(), &env).unwrap();
        assert_eq!(exit, AppExit::Signal(libc::SIGTERM));
        assert!(exit.to_string().starts_with("killed by signal 15"));
        let exit = run_application(
            &split_command("sh -c 'test \"$DITTO_RUN_NAME\" = r'").unwrap(),
            &env,
        )
        .unwrap();
        assert_eq!(exit, AppExit::Code(0));
    }
}
