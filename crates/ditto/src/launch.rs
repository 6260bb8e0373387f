//! Running an application under the tool: the environment that preloads
//! libditto.so and points it at a collector, the child process itself
//! (stdout/stderr pass straight through), and how it ended.
//!
//! Owns the environment contract of the tool library (LD_PRELOAD,
//! DITTO_KERNEL, DITTO_SOCKET, DITTO_RUN_NAME, DITTO_ARG_TYPES,
//! LD_LIBRARY_PATH for the CPU runtime), passing ditto's SIGTERM on to the
//! application, and the splitting of `--ref 'CMD ARGS'` strings. It never
//! talks to the collector and never reads snapshots.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};

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
    #[error("cannot start {program:?}: {source} (check the command and that it is executable)")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("waiting for {program:?} failed: {source}")]
    Wait {
        program: String,
        source: std::io::Error,
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

/// What the tool inside the application needs to know.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolEnvironment {
    pub tool_library: PathBuf,
    pub kernel: String,
    pub socket: PathBuf,
    pub run_name: String,
    pub arg_types: Option<String>,
    /// Put first in LD_LIBRARY_PATH (ditto's CPU runtime).
    pub runtime_dir: Option<PathBuf>,
    /// Send the application's stdout to our stderr, so that our stdout
    /// carries only what ditto prints (the `--json` object).
    pub app_stdout_to_stderr: bool,
}

fn prepend(first: &Path, rest: Option<OsString>) -> OsString {
    let mut v = first.as_os_str().to_os_string();
    if let Some(rest) = rest.filter(|r| !r.is_empty()) {
        v.push(":");
        v.push(rest);
    }
    v
}

impl ToolEnvironment {
    /// The variables to set, given the current values of LD_PRELOAD and
    /// LD_LIBRARY_PATH (ours go first).
    pub fn variables(
        &self,
        ld_preload: Option<OsString>,
        ld_library_path: Option<OsString>,
    ) -> Vec<(&'static str, OsString)> {
        let mut v = vec![
            ("LD_PRELOAD", prepend(&self.tool_library, ld_preload)),
            ("DITTO_KERNEL", self.kernel.clone().into()),
            ("DITTO_SOCKET", self.socket.clone().into_os_string()),
            ("DITTO_RUN_NAME", self.run_name.clone().into()),
        ];
        if let Some(t) = &self.arg_types {
            v.push(("DITTO_ARG_TYPES", t.into()));
        }
        if let Some(dir) = &self.runtime_dir {
            v.push(("LD_LIBRARY_PATH", prepend(dir, ld_library_path)));
        }
        v
    }

    fn apply(&self, cmd: &mut Command) {
        for (k, v) in self.variables(
            std::env::var_os("LD_PRELOAD"),
            std::env::var_os("LD_LIBRARY_PATH"),
        ) {
            cmd.env(k, v);
        }
        if self.arg_types.is_none() {
            cmd.env_remove("DITTO_ARG_TYPES");
        }
    }
}

/// How the application ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppExit {
    Code(i32),
    Signal(i32),
}

impl AppExit {
    pub fn success(self) -> bool {
        self == AppExit::Code(0)
    }
}

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
        }
    }
}

/// Runs `argv` under the tool and waits for it; its stdin, stdout and
/// stderr are ours (its stdout goes to our stderr when
/// `env.app_stdout_to_stderr`).
pub fn run_application(argv: &[String], env: &ToolEnvironment) -> Result<AppExit, LaunchError> {
    let (program, args) = argv.split_first().ok_or(LaunchError::EmptyCommand)?;
    let mut cmd = Command::new(program);
    cmd.args(args);
    env.apply(&mut cmd);
    if env.app_stdout_to_stderr {
        use std::os::fd::AsFd;
        let stderr = std::io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|source| LaunchError::Spawn {
                program: program.clone(),
                source,
            })?;
        cmd.stdout(std::process::Stdio::from(stderr));
    }
    let mut child = cmd.spawn().map_err(|source| LaunchError::Spawn {
        program: program.clone(),
        source,
    })?;
    let pid = i32::try_from(child.id()).unwrap_or(0);
    RUNNING_APPLICATION.store(pid, Ordering::SeqCst);
    // A signal that came before the pid was published is forwarded here.
    let pending = SIGNAL_TO_FORWARD.load(Ordering::SeqCst);
    if pending != 0 && pid > 0 {
        // SAFETY: pid is our child, not yet reaped.
        unsafe { libc::kill(pid, pending) };
    }
    let waited = child.wait();
    RUNNING_APPLICATION.store(0, Ordering::SeqCst);
    let status = waited.map_err(|source| LaunchError::Wait {
        program: program.clone(),
        source,
    })?;
    Ok(match (status.code(), status.signal()) {
        (Some(c), _) => AppExit::Code(c),
        (None, Some(s)) => AppExit::Signal(s),
        (None, None) => AppExit::Code(-1),
    })
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
            kernel: "reduce_sum".into(),
            socket: "/s/socket".into(),
            run_name: "ref".into(),
            arg_types: Some("f32*,i32".into()),
            runtime_dir: Some("/t/hsa-cpu".into()),
            app_stdout_to_stderr: false,
        };
        let vars = env.variables(Some("/other.so".into()), Some("/usr/lib".into()));
        let get = |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
        assert_eq!(get("LD_PRELOAD").unwrap(), "/t/libditto.so:/other.so");
        assert_eq!(get("LD_LIBRARY_PATH").unwrap(), "/t/hsa-cpu:/usr/lib");
        assert_eq!(get("DITTO_KERNEL").unwrap(), "reduce_sum");
        assert_eq!(get("DITTO_SOCKET").unwrap(), "/s/socket");
        assert_eq!(get("DITTO_RUN_NAME").unwrap(), "ref");
        assert_eq!(get("DITTO_ARG_TYPES").unwrap(), "f32*,i32");
        let system = ToolEnvironment {
            runtime_dir: None,
            arg_types: None,
            ..env
        };
        let vars = system.variables(None, Some("/usr/lib".into()));
        assert!(
            vars.iter()
                .all(|(k, _)| *k != "LD_LIBRARY_PATH" && *k != "DITTO_ARG_TYPES")
        );
        assert_eq!(vars[0].1, "/t/libditto.so");
    }

    #[test]
    fn exit_status_and_signal_are_reported() {
        let env = ToolEnvironment {
            // A library that always loads, so ld.so stays quiet.
            tool_library: "libc.so.6".into(),
            kernel: "k".into(),
            socket: "/nonexistent".into(),
            run_name: "r".into(),
            arg_types: None,
            runtime_dir: None,
            app_stdout_to_stderr: false,
        };
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
