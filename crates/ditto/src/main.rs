//! `ditto`: argument parsing and exit codes only; the work is in `ditto_cli`.
//! Exit codes: 0 valid, 1 mismatch, 2 error (`ditto: error: ...` on stderr).

use clap::{Args, Parser, Subcommand};
use ditto_cli::commands::{self, Verdict};
use ditto_cli::runtime::RuntimeChoice;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "ditto",
    version,
    about = "Validate GPU kernels inside unmodified HIP/HSA applications"
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
    /// Treat NaN as equal to NaN
    #[arg(long)]
    equal_nan: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Run an application under the tool and snapshot a kernel's buffers
    Run {
        /// Kernel to capture: name, name<templates>, full signature or mangled name
        #[arg(long)]
        kernel: String,
        /// Element types of extern "C" kernels, e.g. `const f32*,f32*,i32`
        #[arg(long)]
        arg_types: Option<String>,
        /// Snapshot directory
        #[arg(long, default_value = "ditto-snapshot")]
        out: PathBuf,
        #[arg(long, value_enum, default_value_t = RuntimeChoice::Auto)]
        hsa_runtime: RuntimeChoice,
        /// The application and its arguments
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Compare two snapshot directories
    Compare {
        reference: PathBuf,
        optimized: PathBuf,
        #[command(flatten)]
        tolerances: Tolerances,
        /// One JSON object on stdout
        #[arg(long)]
        json: bool,
    },
    /// Run a reference and an optimized application and compare the kernel's buffers
    Validate {
        #[arg(long)]
        kernel: String,
        /// Reference command line, e.g. --ref './baseline 1024'
        #[arg(long = "ref")]
        reference: String,
        /// Optimized command line
        #[arg(long = "opt")]
        optimized: String,
        #[command(flatten)]
        tolerances: Tolerances,
        #[arg(long)]
        arg_types: Option<String>,
        #[arg(long, value_enum, default_value_t = RuntimeChoice::Auto)]
        hsa_runtime: RuntimeChoice,
        /// Keep the snapshots in DIR/ref and DIR/opt
        #[arg(long, value_name = "DIR")]
        keep: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Serve a socket for scripts/ditto-run until SIGINT/SIGTERM; each run goes to OUT/<run>/
    Collect {
        #[arg(long)]
        socket: PathBuf,
        #[arg(long)]
        out: PathBuf,
        #[arg(long, value_enum, default_value_t = RuntimeChoice::Auto)]
        hsa_runtime: RuntimeChoice,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut json = false;
    let result = match cli.command {
        Command::Run {
            kernel,
            arg_types,
            out,
            hsa_runtime,
            command,
        } => commands::run(commands::RunOptions {
            kernel,
            arg_types,
            out,
            runtime: hsa_runtime,
            command,
        }),
        Command::Compare {
            reference,
            optimized,
            tolerances: t,
            json: j,
        } => {
            json = j;
            commands::compare(commands::CompareArgs {
                reference,
                optimized,
                atol: t.atol,
                rtol: t.rtol,
                equal_nan: t.equal_nan,
                json: j,
            })
        }
        Command::Validate {
            kernel,
            reference,
            optimized,
            tolerances: t,
            arg_types,
            hsa_runtime,
            keep,
            json: j,
        } => {
            json = j;
            commands::validate(commands::ValidateOptions {
                kernel,
                reference,
                optimized,
                atol: t.atol,
                rtol: t.rtol,
                equal_nan: t.equal_nan,
                arg_types,
                runtime: hsa_runtime,
                keep,
                json: j,
            })
        }
        Command::Collect {
            socket,
            out,
            hsa_runtime,
        } => commands::collect(commands::CollectOptions {
            socket,
            out,
            runtime: hsa_runtime,
        }),
    };
    match result {
        Ok(Verdict::Valid) => ExitCode::from(0),
        Ok(Verdict::Mismatch) => ExitCode::from(1),
        Err(e) => {
            let message = format!("{e:#}");
            if json {
                println!("{}", ditto_cli::report::render_json_error(&message));
            }
            eprintln!("ditto: error: {message}");
            ExitCode::from(2)
        }
    }
}
