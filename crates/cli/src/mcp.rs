//! `ditto mcp`: the Model Context Protocol server (rmcp) through which
//! agents validate kernels.
//!
//! Owns the MCP surface only: the tools `validate`, `capture`, `compare`,
//! `replay` and `kernels`, their argument schemas, and turning a result into
//! structured JSON plus the human summary. The transports are submodules
//! and carry messages only, never a tool of their own: `stdio` (one
//! JSON-RPC message a line, framed by `lines`) and `http` (MCP's streamable
//! HTTP, listening where `address` allows, to the holder of `token` on a
//! connection `peer` does not place with another uid); both serve this one
//! [`DittoServer`]. Every call runs this same
//! `ditto` executable as a child with `--json`: the engine is the CLI's,
//! the application's own output never reaches the protocol stream,
//! and a crashing application cannot take the server down. A child lives
//! no longer than its call: it is killed when the client cancels the call
//! (`notifications/cancelled`, which clients send when their own timeout
//! for a call passes), when the server stops, and, on Linux, when the
//! server dies however it dies (even by SIGKILL). Its own application
//! goes with it (`ditto run` asks the same of its application).

pub mod address;
pub mod http;
mod lines;
mod peer;
pub mod stdio;
pub mod token;

use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, schemars, tool, tool_handler, tool_router};
use serde::Deserialize;
use serde_json::{Value, json};
use std::path::PathBuf;

/// Tolerances, as `ditto compare` takes them.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub struct Tolerances {
    /// Absolute tolerance; give together with rtol (default: per dtype, as torch.testing)
    pub atol: Option<f64>,
    /// Relative tolerance; give together with atol
    pub rtol: Option<f64>,
    /// Floats match when at most this many units in the last place apart (instead of atol/rtol)
    pub ulp: Option<u64>,
    /// NaN equals NaN
    #[serde(default)]
    pub equal_nan: bool,
}

/// What to capture, as `ditto run` takes it.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub struct CaptureOptions {
    /// Dispatches to capture: all (default), N, N..M, N.. or a list like 0,3..5
    pub dispatch: Option<String>,
    /// outputs (default), inputs,outputs, written (outputs before and after, compared by what the kernels wrote), all, or replay / replay-all (also what `ditto replay` needs to run the dispatch again)
    pub capture: Option<String>,
    /// Element types of an extern "C" kernel, e.g. `const f32*,f32*,i32`
    pub arg_types: Option<String>,
    /// Extents of pointer arguments in elements, e.g. `arg2=arg3`
    pub arg_sizes: Option<String>,
    /// auto (default), cpu or system
    pub hsa_runtime: Option<String>,
    /// Stop the application after this many seconds
    pub timeout_secs: Option<f64>,
}

// The field docs are the tools' schema descriptions, served to agents as
// written (`name<templates>` is text there, not an HTML tag).
#[allow(rustdoc::invalid_html_tags)]
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ValidateRequest {
    /// Kernel: bare name, name<templates>, full signature or mangled name (matched exactly), or `re:PATTERN` searched in the demangled signature
    pub kernel: String,
    /// The optimized build's kernel when it was renamed (e.g. reduce_sum_v2); dispatches pair by index
    pub opt_kernel: Option<String>,
    /// Reference command: program and arguments, one string each
    pub reference: Vec<String>,
    /// Optimized command: program and arguments, one string each
    pub optimized: Vec<String>,
    /// Working directory of both runs (default: the server's)
    pub working_directory: Option<String>,
    /// Keep the snapshots in this directory (ref/ and opt/)
    pub keep: Option<String>,
    #[serde(flatten)]
    pub tolerances: Tolerances,
    #[serde(flatten)]
    pub capture: CaptureOptions,
}

// The field docs are the tools' schema descriptions, served to agents as
// written (`name<templates>` is text there, not an HTML tag).
#[allow(rustdoc::invalid_html_tags)]
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct CaptureRequest {
    /// Kernel: bare name, name<templates>, full signature or mangled name (matched exactly), or `re:PATTERN` searched in the demangled signature
    pub kernel: String,
    /// The application: program and arguments, one string each
    pub command: Vec<String>,
    /// Snapshot directory to write
    pub out: String,
    /// Working directory of the run (default: the server's)
    pub working_directory: Option<String>,
    #[serde(flatten)]
    pub capture: CaptureOptions,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct CompareRequest {
    /// Reference snapshot directory
    pub reference: String,
    /// Optimized snapshot directory
    pub optimized: String,
    /// Compare only the optimized snapshot's dispatches of this kernel (a renamed kernel)
    pub opt_kernel: Option<String>,
    #[serde(flatten)]
    pub tolerances: Tolerances,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ReplayRequest {
    /// A snapshot directory captured with capture `replay` (or `replay-all`)
    pub snapshot: String,
    /// A program whose embedded device code holds the replacement kernel (same name and arguments); not run
    pub from: Option<String>,
    /// A code object holding the replacement kernel
    pub kernel_object: Option<String>,
    /// Dispatches to replay: all (default), N, N..M, N.. or a list like 0,3..5
    pub dispatch: Option<String>,
    /// Times to run each dispatch, memory restored before each (default 1); the median is reported
    pub iterations: Option<u32>,
    /// auto (default), cpu or system
    pub hsa_runtime: Option<String>,
    /// Longest wait for one dispatch, in seconds (default 60)
    pub timeout_secs: Option<f64>,
    #[serde(flatten)]
    pub tolerances: Tolerances,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct KernelsRequest {
    /// An AMDGPU code object, or a HIP executable or library with a .hip_fatbin section
    pub file: String,
    /// Element types for extern "C" kernels, e.g. `const f32*,f32*,i32`
    pub arg_types: Option<String>,
}

/// Quotes one word for `split_command` (POSIX single quotes).
fn quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// Why a call could not get its answer from a `ditto` child (the child's
/// own errors are in its answer: [`error_of`]).
#[derive(Debug, thiserror::Error)]
enum CallError {
    #[error("{what} is empty: give the program and its arguments, one string each")]
    EmptyCommand { what: &'static str },
    #[error("cannot find the ditto executable to run: {0}")]
    NoExecutable(std::io::Error),
    #[error("cannot run ditto {args}: {error}")]
    Run { args: String, error: std::io::Error },
    #[error("the call was cancelled; its `ditto {command}` was stopped")]
    Cancelled { command: String },
}

fn command_line(words: &[String], what: &'static str) -> Result<String, CallError> {
    if words.is_empty() {
        return Err(CallError::EmptyCommand { what });
    }
    Ok(words.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" "))
}

fn tolerance_args(t: &Tolerances, args: &mut Vec<String>) {
    if let Some(a) = t.atol {
        args.extend(["--atol".into(), a.to_string()]);
    }
    if let Some(r) = t.rtol {
        args.extend(["--rtol".into(), r.to_string()]);
    }
    if let Some(u) = t.ulp {
        args.extend(["--ulp".into(), u.to_string()]);
    }
    if t.equal_nan {
        args.push("--equal-nan".into());
    }
}

fn capture_args(c: &CaptureOptions, args: &mut Vec<String>) {
    for (flag, value) in [
        ("--dispatch", &c.dispatch),
        ("--capture", &c.capture),
        ("--arg-types", &c.arg_types),
        ("--arg-sizes", &c.arg_sizes),
        ("--hsa-runtime", &c.hsa_runtime),
    ] {
        if let Some(v) = value {
            args.extend([flag.to_string(), v.clone()]);
        }
    }
    if let Some(s) = c.timeout_secs {
        args.extend(["--timeout".into(), s.to_string()]);
    }
}

/// What one `ditto ... --json` child said.
struct Outcome {
    code: i32,
    json: Option<Value>,
    stderr: String,
}

/// Runs `ditto ARGS` for the call `call` and waits for it; a cancelled
/// call kills it (SIGKILL) and is an error.
async fn ditto(
    args: Vec<String>,
    cwd: Option<&str>,
    call: &RequestContext<RoleServer>,
) -> Result<Outcome, CallError> {
    use std::process::Stdio;
    let exe = std::env::current_exe().map_err(CallError::NoExecutable)?;
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Dropped unfinished (a cancelled call, the server stopping with
        // the call under way): killed.
        .kill_on_drop(true);
    die_with_this_process(&mut cmd);
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    let failed = |error| CallError::Run {
        args: args.join(" "),
        error,
    };
    let child = cmd.spawn().map_err(failed)?;
    let out = tokio::select! {
        out = child.wait_with_output() => out.map_err(failed)?,
        () = call.ct.cancelled() => {
            return Err(CallError::Cancelled {
                command: args.first().cloned().unwrap_or_default(),
            });
        }
    };
    Ok(Outcome {
        code: out.status.code().unwrap_or(2),
        json: serde_json::from_slice(&out.stdout).ok(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// Has the kernel kill (SIGKILL) `cmd`'s child when this process dies
/// without killing it itself (SIGKILL, a crash): [`crate::launch::die_with_this_process`].
/// The kernel sends it when the thread that started the child ends:
/// children are started by the tasks of the transport's runtime
/// ([`stdio::serve`], [`http::serve`]), a current-thread runtime that runs
/// them on the thread that called it (the main thread, in `ditto mcp`)
/// until the server stops.
fn die_with_this_process(cmd: &mut tokio::process::Command) {
    crate::launch::die_with_this_process(cmd.as_std_mut());
}

/// The error text of a failed child: its JSON "error", else its
/// `ditto: error:` lines.
fn error_of(o: &Outcome) -> String {
    if let Some(e) = o.json.as_ref().and_then(|j| j["error"].as_str()) {
        return e.to_string();
    }
    let lines: Vec<&str> = o
        .stderr
        .lines()
        .skip_while(|l| !l.starts_with("ditto: error: "))
        .collect();
    if lines.is_empty() {
        o.stderr.trim().to_string()
    } else {
        lines
            .join("\n")
            .trim_start_matches("ditto: error: ")
            .to_string()
    }
}

/// Structured JSON for programs plus a summary for people; an error is a
/// tool-level error the agent sees, with the CLI's message.
fn answer(structured: Value, summary: String) -> CallToolResult {
    let mut r = CallToolResult::structured(structured);
    r.content.insert(0, ContentBlock::text(summary));
    r
}

fn failure(message: String) -> CallToolResult {
    CallToolResult::structured_error(json!({"valid": false, "error": message}))
}

#[derive(Debug, Clone)]
pub struct DittoServer {
    #[allow(dead_code)] // read by the tool_handler macro
    tool_router: ToolRouter<Self>,
}

impl Default for DittoServer {
    fn default() -> Self {
        DittoServer {
            tool_router: Self::tool_router(),
        }
    }
}

#[tool_router]
impl DittoServer {
    #[tool(
        description = "Run a reference and an optimized build of a GPU application under ditto, capture the named kernel's buffers in both and compare them with numeric tolerances (torch.testing defaults). Returns valid (true/false), the mismatching arrays (named by argument where the build kept names) with their greatest differences, both sides' kernel times with the speedup, and a human summary."
    )]
    async fn validate(
        &self,
        Parameters(r): Parameters<ValidateRequest>,
        call: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let (reference, optimized) = match (
            command_line(&r.reference, "reference"),
            command_line(&r.optimized, "optimized"),
        ) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => return Ok(failure(e.to_string())),
        };
        let mut args = vec![
            "validate".into(),
            "--kernel".into(),
            r.kernel,
            "--ref".into(),
            reference,
            "--opt".into(),
            optimized,
            "--json".into(),
        ];
        tolerance_args(&r.tolerances, &mut args);
        capture_args(&r.capture, &mut args);
        if let Some(k) = r.keep {
            args.extend(["--keep".into(), k]);
        }
        if let Some(k) = r.opt_kernel {
            args.extend(["--opt-kernel".into(), k]);
        }
        Ok(comparison(
            ditto(args, r.working_directory.as_deref(), &call).await,
        ))
    }

    #[tool(
        description = "Run one application under ditto and snapshot the named kernel's buffers into a directory. Returns what was captured per dispatch (grid, block, kernel time, per-array dtype, element count, min, max, mean, NaN and inf counts)."
    )]
    async fn capture(
        &self,
        Parameters(r): Parameters<CaptureRequest>,
        call: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        if r.command.is_empty() {
            return Ok(failure(
                "command is empty: give the program and its arguments, one string each".into(),
            ));
        }
        let out_dir = match &r.working_directory {
            Some(dir) => PathBuf::from(dir).join(&r.out),
            None => PathBuf::from(&r.out),
        };
        let mut args = vec![
            "run".into(),
            "--kernel".into(),
            r.kernel,
            "--out".into(),
            r.out.clone(),
        ];
        capture_args(&r.capture, &mut args);
        args.push("--".into());
        args.extend(r.command);
        let ran = match ditto(args, r.working_directory.as_deref(), &call).await {
            Ok(o) => o,
            Err(e) => return Ok(failure(e.to_string())),
        };
        if ran.code != 0 {
            return Ok(failure(error_of(&ran)));
        }
        let inspect = vec![
            "inspect".into(),
            out_dir.display().to_string(),
            "--json".into(),
        ];
        match ditto(inspect, None, &call).await {
            Ok(o) if o.code == 0 && o.json.is_some() => {
                let summary = ran
                    .stderr
                    .lines()
                    .filter(|l| l.starts_with("ditto: "))
                    .collect::<Vec<_>>()
                    .join("\n");
                Ok(answer(o.json.unwrap_or_default(), summary))
            }
            Ok(o) => Ok(failure(error_of(&o))),
            Err(e) => Ok(failure(e.to_string())),
        }
    }

    #[tool(
        description = "Compare two ditto snapshot directories (reference, optimized) element by element. Returns valid, the mismatching arrays and a human summary."
    )]
    async fn compare(
        &self,
        Parameters(r): Parameters<CompareRequest>,
        call: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let mut args = vec!["compare".into(), r.reference, r.optimized, "--json".into()];
        tolerance_args(&r.tolerances, &mut args);
        if let Some(k) = r.opt_kernel {
            args.extend(["--opt-kernel".into(), k]);
        }
        Ok(comparison(ditto(args, None, &call).await))
    }

    #[tool(
        description = "Run captured dispatches again on their own, without the application (the snapshot must come from a capture with capture `replay`), with the captured kernel or a replacement taken from another program (`from`) or a code object, and compare the outputs with the application's own. Returns valid, the mismatching arrays, and under `replay` the kernel times (median, min, max, per iteration), with a replacement the captured kernel's median and the speedup, and whether the captured kernel reproduced its own outputs."
    )]
    async fn replay(
        &self,
        Parameters(r): Parameters<ReplayRequest>,
        call: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let mut args = vec!["replay".into(), r.snapshot, "--json".into()];
        tolerance_args(&r.tolerances, &mut args);
        for (flag, value) in [
            ("--from", r.from),
            ("--kernel-object", r.kernel_object),
            ("--dispatch", r.dispatch),
            ("--hsa-runtime", r.hsa_runtime),
            ("--iterations", r.iterations.map(|n| n.to_string())),
            ("--timeout", r.timeout_secs.map(|s| s.to_string())),
        ] {
            if let Some(v) = value {
                args.extend([flag.to_string(), v]);
            }
        }
        Ok(match ditto(args, None, &call).await {
            Ok(o) if (o.code == 0 || o.code == 1) && o.json.is_some() => {
                let v = o.json.unwrap_or_default();
                let mut summary = v["summary"].as_str().unwrap_or_default().to_string();
                let replay = &v["replay"];
                if let Some(median) = replay["median_ns"].as_u64() {
                    summary.push_str(&format!("\nreplay: median {median} ns"));
                }
                if let Some(speedup) = replay["speedup"].as_f64() {
                    summary.push_str(&format!(", speedup {speedup:.2}x over the captured kernel"));
                }
                answer(v, summary)
            }
            Ok(o) => failure(error_of(&o)),
            Err(e) => failure(e.to_string()),
        })
    }

    #[tool(
        description = "List the kernels of an AMDGPU code object or a HIP executable's fat binary, each with its argument layout exactly as ditto would capture it (index, offset, size, kind, dtype, const)."
    )]
    async fn kernels(
        &self,
        Parameters(r): Parameters<KernelsRequest>,
        call: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let mut args = vec!["kernels".into(), r.file, "--json".into()];
        if let Some(t) = r.arg_types {
            args.extend(["--arg-types".into(), t]);
        }
        Ok(match ditto(args, None, &call).await {
            Ok(o) if o.code == 0 && o.json.is_some() => {
                let v = o.json.unwrap_or_default();
                let names: Vec<String> = v["kernels"]
                    .as_array()
                    .map(|ks| {
                        ks.iter()
                            .filter_map(|k| k["name"].as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                let summary = format!("{} kernel(s): {}", names.len(), names.join(", "));
                answer(v, summary)
            }
            Ok(o) => failure(error_of(&o)),
            Err(e) => failure(e.to_string()),
        })
    }
}

/// A compare/validate child's answer: exit 0 valid, 1 mismatch, else an error.
fn comparison(ran: Result<Outcome, CallError>) -> CallToolResult {
    match ran {
        Ok(o) if (o.code == 0 || o.code == 1) && o.json.is_some() => {
            let v = o.json.unwrap_or_default();
            let summary = v["summary"].as_str().unwrap_or_default().to_string();
            answer(v, summary)
        }
        Ok(o) => failure(error_of(&o)),
        Err(e) => failure(e.to_string()),
    }
}

#[tool_handler]
impl ServerHandler for DittoServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("ditto", env!("CARGO_PKG_VERSION")))
            .with_instructions(
            "ditto checks that an optimized GPU kernel computes what the reference computed, inside \
             the unmodified application. Use `validate` with the kernel name and both command lines; \
             `kernels` shows what would be captured; `capture` and `compare` work with snapshot \
             directories; `replay` runs a dispatch captured with capture `replay` again on its own, \
             with the kernel or a replacement, in seconds.",
        )
    }
}
