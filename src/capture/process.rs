//! What the collector is told about this process when a backend connects:
//! the Hello (pid, run name, kernel query, command line, working
//! directory, launcher rank). The same for every backend.

use crate::options::Options;
use ditto_protocol::{Api, Hello, PROTOCOL_VERSION};

/// The Hello of this process, capturing `query` through `api`.
pub fn hello(options: &Options, query: &str, api: Api) -> Hello {
    Hello {
        version: PROTOCOL_VERSION,
        pid: std::process::id(),
        run: options.run_name.clone(),
        kernel_query: query.to_string(),
        command_line: command_line(),
        working_directory: std::env::current_dir()
            .map(|d| d.display().to_string())
            .unwrap_or_default(),
        rank: options.rank,
        api,
    }
}

/// The process's arguments; from /proc/self/cmdline where the standard
/// library has none (a library loaded before `main` on some C libraries).
pub fn command_line() -> Vec<String> {
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if !args.is_empty() {
        return args;
    }
    std::fs::read("/proc/self/cmdline")
        .map(|raw| {
            raw.split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hello_names_this_process_and_its_options() {
        let options = Options::from_lookup(|k| match k {
            "DITTO_RUN_NAME" => Some("ref".into()),
            "SLURM_PROCID" => Some("3".into()),
            _ => None,
        });
        let h = hello(&options, "reduce_sum", Api::Hsa);
        assert_eq!(h.version, PROTOCOL_VERSION);
        assert_eq!(h.pid, std::process::id());
        assert_eq!(
            (h.run.as_str(), h.kernel_query.as_str()),
            ("ref", "reduce_sum")
        );
        assert_eq!(h.rank, Some(3));
        assert_eq!(h.command_line, std::env::args().collect::<Vec<_>>());
        assert_eq!(
            h.working_directory,
            std::env::current_dir().unwrap().display().to_string()
        );
    }
}
