//! `ditto`: argument parsing and exit codes only; the work is in `ditto_cli`.
//! Exit codes: 0 valid, 1 mismatch, 2 error (`ditto: error: ...` on stderr).

use clap::{Args, Parser, Subcommand};
use ditto_cli::commands::{self, Side, Verdict};
use ditto_cli::compare::CompareOptions;
use ditto_cli::runtime_choice::RuntimeChoice;
use ditto_kernels::{ArgSizes, ArgSizesError, KernelQuery};
use ditto_protocol::{CaptureError, CaptureSet, DispatchSelection, SelectionError};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

const MAIN_EXAMPLE: &str = "\
Example:
  ditto validate --kernel reduce_sum --ref ./reduce_sum_baseline --opt ./reduce_sum_optimized
  (PASS and exit 0 when every output array matches; FAIL, the differences and exit 1 otherwise)";

const RUN_EXAMPLE: &str = "\
Example:
  ditto run --kernel 'scale_values<float>' --out snap -- ./scale_values float 1024
  ditto inspect snap";

const COMPARE_EXAMPLE: &str = "\
Example:
  ditto compare snaps/ref snaps/opt --atol 1e-3 --rtol 1e-3 --json";

const VALIDATE_EXAMPLE: &str = "\
Example:
  ditto validate --kernel reduce_sum --ref './baseline 65536' --opt './optimized 65536' \\
      --opt-env HIP_VISIBLE_DEVICES=1 --keep snaps
  ditto validate --kernel reduce_sum --ref-snapshot snaps/ref --opt ./v2 --opt ./v3";

const INSPECT_EXAMPLE: &str = "\
Example:
  ditto inspect snap --dump 1";

const REPLAY_EXAMPLE: &str = "\
Example:
  ditto run --kernel reduce_sum --capture replay --out ref -- ./reduce_sum_baseline
  ditto replay ref                                  (the captured kernel: PASS)
  ditto replay ref --from ./reduce_sum_optimized --iterations 20";

const KERNELS_EXAMPLE: &str = "\
Example:
  ditto kernels ./scale_values
  ditto kernels kernels.co --kernel vector_add_c --arg-types 'const f32*,const f32*,f32*,i32' --json";

const HIPCC_EXAMPLE: &str = "\
Example:
  ditto hipcc --offload-arch=gfx90a -O2 main.hip -o app   (also writes app.host.so)
  ditto hipcc -c lib.hip -o lib.o && ditto hipcc main.o lib.o -o app
  make HIPCC=\"ditto hipcc\"
  ditto run --kernel my_kernel -- ./app                       (runs on the CPU runtime without a GPU)";

const HSA_ENV_EXAMPLE: &str = "\
Example:
  ditto hsa-env --hsa-runtime model
  (HSA_MODEL_LIB=..., HSA_MODEL_TOPOLOGY=..., HSA_ENABLE_INTERRUPT=0,
   GPU_PINNED_MIN_XFER_SIZE=4096: the variables that scripts/ditto-run exports for the
   model before it starts the application)";

const MCP_EXAMPLE: &str = "\
Example:
  ditto mcp
  (an MCP client starts it from its configuration, e.g.
   {\"mcpServers\": {\"ditto\": {\"command\": \"ditto\", \"args\": [\"mcp\"]}}})
  ditto mcp --http 8080
  (MCP over streamable HTTP at http://127.0.0.1:8080/mcp until Ctrl-C, for the holder of the
   token it prints, also in $XDG_RUNTIME_DIR/ditto/mcp-127.0.0.1:8080.token; a client's entry:
   {\"mcpServers\": {\"ditto\": {\"type\": \"http\", \"url\": \"http://127.0.0.1:8080/mcp\",
                          \"headers\": {\"Authorization\": \"Bearer TOKEN\"}}}})";

const COLLECT_EXAMPLE: &str = "\
Example:
  ditto collect --socket /tmp/ditto.sock --out snaps &
  mpirun -np 4 scripts/ditto-run --socket /tmp/ditto.sock --kernel reduce_sum --run ref -- ./app
  kill %1; ditto compare snaps/ref snaps/opt
Several nodes (one collector per node, OUT on a shared file system):
  srun --ntasks-per-node=1 ditto collect --socket /tmp/ditto.sock --out /shared/snaps --node &
  srun scripts/ditto-run --socket /tmp/ditto.sock --kernel reduce_sum --run ref -- ./app";

#[derive(Parser)]
#[command(
    name = "ditto",
    version,
    about = "Validate GPU kernels inside unmodified HIP/HSA applications",
    after_help = MAIN_EXAMPLE
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Clone)]
struct Tolerances {
    /// Absolute tolerance (with --rtol; default: per dtype, as torch.testing)
    #[arg(long, requires = "rtol")]
    atol: Option<f64>,
    /// Relative tolerance (with --atol)
    #[arg(long, requires = "atol")]
    rtol: Option<f64>,
    /// Floats match when at most N units in the last place apart (instead of --atol/--rtol)
    #[arg(long, value_name = "N", conflicts_with_all = ["atol", "rtol"])]
    ulp: Option<u64>,
    /// Treat NaN as equal to NaN
    #[arg(long)]
    equal_nan: bool,
}

impl Tolerances {
    fn options(&self) -> anyhow::Result<CompareOptions> {
        Ok(CompareOptions::new(self.atol, self.rtol, self.equal_nan)?.with_ulp(self.ulp)?)
    }
}

fn parse_env(text: &str) -> Result<(String, String), ditto_cli::launch::EnvAssignmentError> {
    ditto_cli::launch::parse_env_assignment(text)
}

/// `--dispatch`, parsed once; its text form goes to the tool as DITTO_DISPATCH.
fn parse_dispatch(text: &str) -> Result<DispatchSelection, SelectionError> {
    DispatchSelection::parse(text)
}

/// `--capture`, parsed once; its text form goes to the tool as DITTO_CAPTURE.
fn parse_capture(text: &str) -> Result<CaptureSet, CaptureError> {
    CaptureSet::parse(text)
}

/// `--arg-sizes`, parsed once; its text form goes to the tool as DITTO_ARG_SIZES.
fn parse_arg_sizes(text: &str) -> Result<ArgSizes, ArgSizesError> {
    ArgSizes::parse(text)
}

/// The longest `--timeout`: ten years (a deadline past what a clock can
/// hold would end the run with an overflow).
const MAX_TIMEOUT_SECS: f64 = 315_360_000.0;

/// A `--timeout` that is not a positive number of seconds up to ten years.
#[derive(Debug, PartialEq, thiserror::Error)]
#[error("`{0}` is not a positive number of seconds of at most {MAX_TIMEOUT_SECS} (ten years)")]
struct TimeoutError(String);

fn parse_seconds(text: &str) -> Result<Duration, TimeoutError> {
    match text.parse::<f64>() {
        Ok(s) if s > 0.0 && s <= MAX_TIMEOUT_SECS => Ok(Duration::from_secs_f64(s)),
        _ => Err(TimeoutError(text.to_string())),
    }
}

// Parsed once per process: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run an application under the tool and snapshot a kernel's buffers
    #[command(after_help = RUN_EXAMPLE)]
    Run {
        /// Kernel to capture: its function name (no namespace or template arguments, e.g.
        /// `vectorized_elementwise_kernel`), a qualified name (`at::native::k`), name<templates>,
        /// full signature or mangled name
        #[arg(long, required_unless_present = "kernel_regex")]
        kernel: Option<String>,
        /// Kernel to capture by a regular expression searched in its demangled signature
        #[arg(long, value_name = "RE", conflicts_with = "kernel")]
        kernel_regex: Option<String>,
        /// Argument types of a kernel without a C++ signature (extern "C"; Triton kernels are typed
        /// from Triton's cache), one per parameter: f16 bf16 f32 f64 i8..i64 u8..u64 bool, `*` for a
        /// pointer, `const` before a pointer only read, e.g. `const f32*,f32*,i32`
        #[arg(long, value_name = "TYPES")]
        arg_types: Option<String>,
        /// Dispatches to capture: all, N, N..M (both included), N.. or a list like 0,3..5
        #[arg(long, value_name = "SEL", value_parser = parse_dispatch)]
        dispatch: Option<DispatchSelection>,
        /// Arguments to capture: outputs (default), inputs,outputs, written (outputs before and after: compared by what the kernels wrote), all, or replay (the outputs plus what `ditto replay` needs: code object, kernel arguments, and the memory the arguments reach, before the kernel; replay-all: every live allocation)
        #[arg(long, value_name = "WHAT", value_parser = parse_capture)]
        capture: Option<CaptureSet>,
        /// Extent of pointer arguments in elements, e.g. `arg2=arg3` or `arg2=arg3*arg4`
        #[arg(long, value_name = "SIZES", value_parser = parse_arg_sizes)]
        arg_sizes: Option<ArgSizes>,
        /// Snapshot directory
        #[arg(long, default_value = "ditto-snapshot")]
        out: PathBuf,
        /// Which HSA runtime runs HSA applications (a CUDA application needs none)
        #[arg(long, value_enum, default_value_t = RuntimeChoice::Auto)]
        hsa_runtime: RuntimeChoice,
        /// Stop the application after SECS seconds and say what was pending
        #[arg(long, value_name = "SECS", value_parser = parse_seconds)]
        timeout: Option<Duration>,
        /// The application and its arguments
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Compare two snapshot directories
    #[command(after_help = COMPARE_EXAMPLE)]
    Compare {
        reference: PathBuf,
        optimized: PathBuf,
        /// The optimized snapshot's kernel when it was renamed (matched like --kernel); dispatches pair by index
        #[arg(long, value_name = "NAME")]
        opt_kernel: Option<String>,
        #[command(flatten)]
        tolerances: Tolerances,
        /// One JSON object on stdout (schema: docs/src/json.md)
        #[arg(long)]
        json: bool,
    },
    /// Run a reference and optimized applications and compare the kernel's buffers
    #[command(after_help = VALIDATE_EXAMPLE)]
    Validate {
        /// Kernel to capture: its function name (no namespace or template arguments, e.g.
        /// `vectorized_elementwise_kernel`), a qualified name (`at::native::k`), name<templates>,
        /// full signature or mangled name
        #[arg(long, required_unless_present = "kernel_regex")]
        kernel: Option<String>,
        /// Kernel to capture by a regular expression searched in its demangled signature
        #[arg(long, value_name = "RE", conflicts_with = "kernel")]
        kernel_regex: Option<String>,
        /// The optimized builds' kernel when it was renamed (e.g. reduce_sum_v2); dispatches pair by index
        #[arg(long, value_name = "NAME")]
        opt_kernel: Option<String>,
        /// Reference command line, e.g. --ref './baseline 1024'
        #[arg(
            long = "ref",
            value_name = "CMD",
            required_unless_present = "ref_snapshot"
        )]
        reference: Option<String>,
        /// Use a stored reference snapshot instead of running one
        #[arg(long, value_name = "DIR", conflicts_with_all = ["reference", "ref_env", "ref_cwd"])]
        ref_snapshot: Option<PathBuf>,
        /// Variable for the reference run only (repeatable)
        #[arg(long, value_name = "NAME=VALUE", value_parser = parse_env)]
        ref_env: Vec<(String, String)>,
        /// Working directory of the reference run
        #[arg(long, value_name = "DIR")]
        ref_cwd: Option<PathBuf>,
        /// Optimized command line; repeat to validate several builds
        #[arg(long = "opt", value_name = "CMD", required = true)]
        optimized: Vec<String>,
        /// Variable for the optimized run(s) only (repeatable)
        #[arg(long, value_name = "NAME=VALUE", value_parser = parse_env)]
        opt_env: Vec<(String, String)>,
        /// Working directory of the optimized run(s)
        #[arg(long, value_name = "DIR")]
        opt_cwd: Option<PathBuf>,
        #[command(flatten)]
        tolerances: Tolerances,
        /// Argument types of a kernel without a C++ signature (extern "C"; Triton kernels are typed
        /// from Triton's cache), one per parameter: f16 bf16 f32 f64 i8..i64 u8..u64 bool, `*` for a
        /// pointer, `const` before a pointer only read, e.g. `const f32*,f32*,i32`
        #[arg(long, value_name = "TYPES")]
        arg_types: Option<String>,
        /// Dispatches to capture in every run: all, N, N..M (both included), N.. or 0,3..5
        #[arg(long, value_name = "SEL", value_parser = parse_dispatch)]
        dispatch: Option<DispatchSelection>,
        /// Arguments to capture: outputs (default), inputs,outputs, written (outputs before and after: compared by what the kernels wrote), all, or replay (the outputs plus what `ditto replay` needs: code object, kernel arguments, and the memory the arguments reach, before the kernel; replay-all: every live allocation)
        #[arg(long, value_name = "WHAT", value_parser = parse_capture)]
        capture: Option<CaptureSet>,
        /// Extent of pointer arguments in elements, e.g. `arg2=arg3` or `arg2=arg3*arg4`
        #[arg(long, value_name = "SIZES", value_parser = parse_arg_sizes)]
        arg_sizes: Option<ArgSizes>,
        /// Which HSA runtime runs HSA applications (a CUDA application needs none)
        #[arg(long, value_enum, default_value_t = RuntimeChoice::Auto)]
        hsa_runtime: RuntimeChoice,
        /// Keep the snapshots in DIR/ref and DIR/opt (DIR/opt-N with several --opt)
        #[arg(long, value_name = "DIR")]
        keep: Option<PathBuf>,
        /// Stop each application after SECS seconds and say what was pending
        #[arg(long, value_name = "SECS", value_parser = parse_seconds)]
        timeout: Option<Duration>,
        /// One JSON object on stdout (schema: docs/src/json.md)
        #[arg(long)]
        json: bool,
    },
    /// List a snapshot's dispatches and arrays (min, max, mean, NaN, inf)
    #[command(after_help = INSPECT_EXAMPLE)]
    Inspect {
        dir: PathBuf,
        /// Also print every value of argument ARG
        #[arg(long, value_name = "ARG")]
        dump: Option<u32>,
        /// One JSON object on stdout
        #[arg(long)]
        json: bool,
        /// With --json: the manifest as read (completed from the journal): every dispatch with
        /// its file and arrays (dtype, shape, fingerprint), what was not captured and why, and
        /// which processes left the snapshot incomplete; reads no tensor file
        #[arg(long, requires = "json", conflicts_with = "dump")]
        manifest: bool,
    },
    /// List the kernels of a code object or HIP program with the arguments ditto would capture
    #[command(after_help = KERNELS_EXAMPLE)]
    Kernels {
        /// AMDGPU code object, HIP executable or library (`.hip_fatbin`), or offload bundle
        file: PathBuf,
        /// Only the kernels this name selects, as `ditto run --kernel` matches
        #[arg(long)]
        kernel: Option<String>,
        /// Argument types of extern "C" kernels (with --kernel: of the kernels it selects), one per
        /// parameter, e.g. `const f32*,f32*,i32`
        #[arg(long, value_name = "TYPES")]
        arg_types: Option<String>,
        /// One JSON object on stdout (schema: docs/src/json.md)
        #[arg(long)]
        json: bool,
    },
    /// Print the environment an application needs to run on an HSA runtime, one NAME=VALUE a line
    #[command(after_help = HSA_ENV_EXAMPLE)]
    HsaEnv {
        /// The runtime, as `ditto run --hsa-runtime` chooses it (model writes its topology once)
        #[arg(long, value_enum, default_value_t = RuntimeChoice::Auto)]
        hsa_runtime: RuntimeChoice,
    },
    /// Run hipcc with ARGS, and make the host build that runs the program on ditto's CPU runtime
    #[command(after_help = HIPCC_EXAMPLE)]
    Hipcc {
        /// hipcc's arguments, unchanged (a first argument that is a compiler path runs that compiler)
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<std::ffi::OsString>,
    },
    /// Serve the Model Context Protocol on stdin/stdout, or over HTTP with --http (tools: validate, capture, compare, replay, kernels)
    #[command(after_help = MCP_EXAMPLE)]
    Mcp {
        /// Serve MCP's streamable HTTP transport at http://ADDR/mcp instead of stdio: a port (on 127.0.0.1), or HOST:PORT with a loopback IP address or localhost, e.g. 8080, 127.0.0.1:8080, [::1]:8080; port 0 picks a free port (the URL is printed on stderr)
        #[arg(long, value_name = "ADDR")]
        http: Option<String>,
        /// Let --http listen on an address other machines can reach (e.g. 0.0.0.0:8080): anyone who reaches it with the token can run programs through the tools, and plain HTTP carries the token unencrypted
        #[arg(long, requires = "http")]
        allow_remote: bool,
    },
    /// Run captured dispatches again on their own (captured with --capture replay) and compare their outputs with the application's
    #[command(after_help = REPLAY_EXAMPLE)]
    Replay {
        /// A snapshot captured with `--capture replay`
        snapshot: PathBuf,
        /// Dispatches to replay: all, N, N..M (both included), N.. or a list like 0,3..5
        #[arg(long, value_name = "SEL", value_parser = parse_dispatch)]
        dispatch: Option<DispatchSelection>,
        /// A code object holding the replacement kernel (same name and argument layout)
        #[arg(long, value_name = "FILE", conflicts_with = "from")]
        kernel_object: Option<PathBuf>,
        /// Take the kernel of the same name from this program's embedded device code (not run)
        #[arg(long, value_name = "PROGRAM")]
        from: Option<PathBuf>,
        /// On ditto's CPU runtime: the captured program's host build (`<program>.host.so`) to load, instead of the copy the snapshot holds
        #[arg(long, value_name = "FILE")]
        host_build: Option<PathBuf>,
        /// Times to run each dispatch (memory restored before each); the report gives the median
        #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100000))]
        iterations: u32,
        #[command(flatten)]
        tolerances: Tolerances,
        /// Which HSA runtime runs HSA applications (a CUDA application needs none)
        #[arg(long, value_enum, default_value_t = RuntimeChoice::Auto)]
        hsa_runtime: RuntimeChoice,
        /// Longest wait for one dispatch to complete, in seconds (a hang is reported, not waited out)
        #[arg(long, value_name = "SECS", default_value = "60", value_parser = parse_seconds)]
        timeout: Duration,
        /// Write a standalone reproducer of the first selected dispatch into DIR (replay.cpp, its data, a CMakeLists.txt) instead of replaying
        #[arg(long, value_name = "DIR")]
        emit: Option<PathBuf>,
        /// Place every captured range at another address, as when its addresses are taken (pointer arguments are rewritten; pointers stored in memory are not)
        #[arg(long)]
        relocate: bool,
        /// One JSON object on stdout (compare's schema, plus "replay")
        #[arg(long)]
        json: bool,
    },
    /// Real ROCr initialised on the model topology of this environment
    /// (started by `--hsa-runtime model` to check DITTO_MODEL_TOPOLOGY)
    #[command(hide = true, name = "model-preflight")]
    ModelPreflight,
    /// The replay process of one dispatch (started by `ditto replay`)
    #[command(hide = true)]
    ReplayDispatch {
        #[arg(long)]
        snapshot: PathBuf,
        #[arg(long)]
        rank: u32,
        #[arg(long)]
        index: u64,
        #[arg(long)]
        work: PathBuf,
        #[arg(long)]
        runtime_library: PathBuf,
        #[arg(long)]
        kernel_object: Option<PathBuf>,
        #[arg(long, default_value_t = 1)]
        iterations: u32,
        #[arg(long, default_value_t = 60_000)]
        timeout_ms: u64,
        #[arg(long)]
        relocate: bool,
    },
    /// Serve a socket for scripts/ditto-run until SIGINT/SIGTERM; each run goes to OUT/<run>/
    #[command(after_help = COLLECT_EXAMPLE)]
    Collect {
        /// The Unix socket to serve, which scripts/ditto-run's --socket names, e.g. /tmp/ditto.sock
        #[arg(long, value_name = "PATH")]
        socket: PathBuf,
        /// Where each run's snapshot goes: OUT/<run>/ (ditto-run's --run names it)
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Which HSA runtime runs HSA applications (a CUDA application needs none)
        #[arg(long, value_enum, default_value_t = RuntimeChoice::Auto)]
        hsa_runtime: RuntimeChoice,
        /// One collector per node of a job writing the same OUT (a shared file
        /// system): this one writes only its processes' ranks, each run into
        /// OUT/<run>/node-NAME/, and compare/inspect of OUT/<run> read every
        /// node's. NAME: letters, digits, '.', '_', '-'; without it, the host
        /// name. Processes need a launcher rank (mpirun, srun). E.g. --node, --node n01
        #[arg(long, value_name = "NAME", num_args = 0..=1, default_missing_value = "")]
        node: Option<String>,
    },
}

fn dispatch(command: Command) -> anyhow::Result<Verdict> {
    match command {
        Command::Run {
            kernel,
            kernel_regex,
            arg_types,
            dispatch,
            capture,
            arg_sizes,
            out,
            hsa_runtime,
            timeout,
            command,
        } => commands::run(commands::RunOptions {
            kernel: kernel_query(kernel, kernel_regex)?,
            arg_types,
            dispatch,
            capture,
            arg_sizes,
            out,
            runtime: hsa_runtime,
            command,
            timeout,
        }),
        Command::Compare {
            reference,
            optimized,
            opt_kernel,
            tolerances,
            json,
        } => commands::compare(commands::CompareArgs {
            reference,
            optimized,
            compare: tolerances.options()?,
            opt_kernel: opt_kernel.as_deref().map(KernelQuery::parse).transpose()?,
            json,
        }),
        Command::Validate {
            kernel,
            kernel_regex,
            opt_kernel,
            reference,
            ref_snapshot,
            ref_env,
            ref_cwd,
            optimized,
            opt_env,
            opt_cwd,
            tolerances,
            arg_types,
            dispatch,
            capture,
            arg_sizes,
            hsa_runtime,
            keep,
            timeout,
            json,
        } => commands::validate(commands::ValidateOptions {
            // Tolerances first, as before the kernel query was parsed here.
            compare: tolerances.options()?,
            kernel: kernel_query(kernel, kernel_regex)?,
            opt_kernel: opt_kernel.as_deref().map(KernelQuery::parse).transpose()?,
            reference: reference.map(|command| Side {
                command,
                env: ref_env,
                cwd: ref_cwd,
            }),
            reference_snapshot: ref_snapshot,
            optimized: optimized
                .into_iter()
                .map(|command| Side {
                    command,
                    env: opt_env.clone(),
                    cwd: opt_cwd.clone(),
                })
                .collect(),
            arg_types,
            dispatch,
            capture,
            arg_sizes,
            runtime: hsa_runtime,
            keep,
            timeout,
            json,
        }),
        Command::Inspect {
            dir,
            manifest: true,
            ..
        } => commands::inspect_manifest(&dir),
        Command::Inspect {
            dir, dump, json, ..
        } => commands::inspect(&dir, dump, json),
        Command::Mcp { http: None, .. } => ditto_cli::mcp::stdio::serve().map(|()| Verdict::Valid),
        Command::Mcp {
            http: Some(given),
            allow_remote,
        } => ditto_cli::mcp::address::listen_address(&given, allow_remote)
            .map_err(anyhow::Error::from)
            .and_then(|address| ditto_cli::mcp::http::serve(address, allow_remote))
            .map(|()| Verdict::Valid),
        Command::Replay {
            snapshot,
            dispatch,
            kernel_object,
            from,
            host_build,
            iterations,
            tolerances,
            hsa_runtime,
            timeout,
            emit,
            relocate,
            json,
        } => commands::replay(&ditto_cli::replay::ReplayOptions {
            snapshot,
            dispatch,
            kernel_object,
            from,
            host_build,
            iterations,
            compare: tolerances.options()?,
            runtime: hsa_runtime,
            timeout,
            relocate,
            emit,
            json,
        }),
        Command::ReplayDispatch {
            snapshot,
            rank,
            index,
            work,
            runtime_library,
            kernel_object,
            iterations,
            timeout_ms,
            relocate,
        } => ditto_cli::replay::child::replay_dispatch(&ditto_cli::replay::outcome::ChildArgs {
            snapshot,
            rank,
            index,
            work,
            runtime: runtime_library,
            kernel_object,
            iterations,
            timeout: Duration::from_millis(timeout_ms),
            relocate,
        })
        .map(|()| Verdict::Valid),
        Command::Hipcc { .. } => unreachable!("ditto hipcc is run by main"),
        Command::ModelPreflight => unreachable!("ditto model-preflight is run by main"),
        Command::Kernels {
            file,
            kernel,
            arg_types,
            json,
        } => commands::kernels(&file, kernel.as_deref(), arg_types.as_deref(), json),
        Command::HsaEnv { hsa_runtime } => commands::hsa_env(hsa_runtime),
        Command::Collect {
            socket,
            out,
            hsa_runtime,
            node,
        } => commands::collect(commands::CollectOptions {
            socket,
            out,
            runtime: hsa_runtime,
            node,
        }),
    }
}

/// `--kernel NAME` (which may itself be `re:PATTERN`), or `--kernel-regex
/// RE` (clap makes sure exactly one is given), parsed once. A pattern that
/// is not a regular expression is an error reported as every other (on
/// stderr, and in the `--json` object), before anything runs.
fn kernel_query(
    kernel: Option<String>,
    regex: Option<String>,
) -> Result<KernelQuery, ditto_kernels::KernelQueryError> {
    match (kernel, regex) {
        (Some(k), _) => KernelQuery::parse(&k),
        (None, Some(re)) => KernelQuery::regex(&re),
        (None, None) => Ok(KernelQuery::Name(String::new())),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Hipcc { args } = cli.command {
        // hipcc's own exit status passes through; a failed host build is 1.
        return match ditto_hipcc::run(args) {
            Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
            Err(e) => {
                eprintln!("ditto hipcc: error: {e:#}");
                ExitCode::from(1)
            }
        };
    }
    if let Command::ModelPreflight = cli.command {
        return match ditto_cli::model_preflight::child() {
            Ok(()) => ExitCode::from(0),
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(1)
            }
        };
    }
    let json = match &cli.command {
        Command::Compare { json, .. }
        | Command::Validate { json, .. }
        | Command::Inspect { json, .. }
        | Command::Kernels { json, .. }
        | Command::Replay { json, .. } => *json,
        _ => false,
    };
    match dispatch(cli.command) {
        Ok(Verdict::Valid) => ExitCode::from(0),
        Ok(Verdict::Mismatch) => ExitCode::from(1),
        Err(e) => {
            let message = format!("{e:#}");
            if json {
                let _ = ditto_cli::stdout::emit_line(
                    &ditto_cli::report::render_json_error(&message).to_string(),
                );
            }
            if ditto_cli::log::level() != ditto_cli::log::Level::Off {
                eprintln!("ditto: error: {message}");
            }
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_is_a_positive_number_of_seconds_up_to_ten_years() {
        assert_eq!(parse_seconds("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(
            parse_seconds("315360000"),
            Ok(Duration::from_secs(315_360_000))
        );
        for bad in ["0", "-1", "nan", "inf", "1e19", "1e20", "soon"] {
            let e = parse_seconds(bad).unwrap_err().to_string();
            assert!(
                e.contains(&format!("`{bad}`")) && e.contains("ten years"),
                "{e}"
            );
        }
    }
}
