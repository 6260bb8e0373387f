//! A model topology the user names (`DITTO_MODEL_TOPOLOGY=DIR`, e.g. a
//! copy of a real machine's /sys/class/kfd/kfd/topology) checked against
//! real ROCr before the application starts. Owns the check: a child
//! process (`ditto model-preflight`, hidden) runs the system's ROCr in
//! model mode on the topology (hsa_init, every agent, each GPU's cache
//! sizes as HIP's first device query reads them) and reports what ROCr
//! said or how it died; ditto then names the topology, ROCr's words and
//! what to change ([`diagnose`], the rejections known from ROCr 7.2.4).
//!
//! Only a topology the user names is checked: ditto's own (written by
//! `ditto_hsa_model::topology`) is known good, and a run on it pays
//! nothing. The check costs one ROCr initialisation on the model (about a
//! second on two cores), once: a topology that passed is not checked
//! again until its files, the model library or ROCr change.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The variable naming the user's topology.
pub const TOPOLOGY_VAR: &str = "DITTO_MODEL_TOPOLOGY";

/// The file (SONAME) of the HSA runtime the child loads.
const HSA_RUNTIME_SONAME: &str = "libhsa-runtime64.so.1";

/// Why a topology did not pass: the whole message, naming the topology,
/// what ROCr said and what to change.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Rejected(pub String);

/// The hidden subcommand that runs the check's child.
pub const SUBCOMMAND: &str = "model-preflight";

/// Longest a healthy ROCr takes to initialise on the model, many times over.
const PREFLIGHT_LIMIT: Duration = Duration::from_secs(30);

/// `HSA_AGENT_INFO_CACHE_SIZE` (hsa.h): four uint32_t, L1 to L4.
const AGENT_INFO_CACHE_SIZE: hsa::hsa_agent_info_t = 18;

/// Runs ROCr on `topology` with the model library `gpu` in a child
/// process; Err names the topology, what ROCr said, and what to do. A
/// topology that passed is marked (by the hash of its files, the model
/// library's and ROCr's identity) in ditto's private directory, and not
/// checked again while it stays the same. `rocr` is the ROCr file the
/// loader finds (part of what a mark depends on), `marks` the private
/// directory marks go in; without either nothing is marked.
pub fn check(
    gpu: &Path,
    topology: &Path,
    rocr: Option<PathBuf>,
    marks: Option<PathBuf>,
) -> Result<(), Rejected> {
    let mark = marks.and_then(|dir| {
        Some(dir.join(format!(
            "checked-{:016x}",
            fingerprint(gpu, topology, rocr?)?
        )))
    });
    if mark.as_ref().is_some_and(|m| m.exists()) {
        return Ok(());
    }
    run_child(gpu, topology)?;
    if let Some(mark) = mark {
        let _ = std::fs::write(mark, format!("{}\n", topology.display()));
    }
    Ok(())
}

/// What a passed check depends on: every file of the topology (path and
/// contents), the model library's path, size and modification time, and
/// the same of the ROCr the loader finds. None where any cannot be read.
fn fingerprint(gpu: &Path, topology: &Path, rocr: PathBuf) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let mut stack = vec![topology.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for path in entries {
            path.hash(&mut h);
            if path.is_dir() {
                stack.push(path);
            } else {
                std::fs::read(&path).ok()?.hash(&mut h);
            }
        }
    }
    for file in [gpu.to_path_buf(), rocr] {
        let meta = std::fs::metadata(&file).ok()?;
        (file, meta.len(), meta.modified().ok()).hash(&mut h);
    }
    Some(h.finish())
}

fn run_child(gpu: &Path, topology: &Path) -> Result<(), Rejected> {
    let reject = |said: String| {
        Rejected(format!(
            "--hsa-runtime model: the model topology {} ({TOPOLOGY_VAR}) is one real ROCr \
             rejects: {said}; {}; or unset {TOPOLOGY_VAR} to run on the topology ditto writes",
            topology.display(),
            diagnose(topology).join("; ")
        ))
    };
    let exe = std::env::current_exe().map_err(|e| {
        reject(format!(
            "the check could not find the ditto executable: {e}"
        ))
    })?;
    let mut child = Command::new(exe)
        .arg(SUBCOMMAND)
        .env("HSA_MODEL_LIB", gpu)
        .env("HSA_MODEL_TOPOLOGY", topology)
        .env("HSA_ENABLE_INTERRUPT", "0")
        .env_remove("HSA_TOOLS_LIB")
        .env_remove("LD_PRELOAD")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| reject(format!("the check could not start: {e}")))?;
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if start.elapsed() < PREFLIGHT_LIMIT => {
                std::thread::sleep(Duration::from_millis(10))
            }
            _ => {
                let _ = child.kill();
                break None;
            }
        }
    };
    let out = child
        .wait_with_output()
        .map_err(|e| reject(format!("the check could not be read: {e}")))?;
    let said = last_lines(&out.stdout, &out.stderr);
    match status {
        Some(s) if s.success() => Ok(()),
        Some(s) => {
            use std::os::unix::process::ExitStatusExt;
            let how = match s.signal() {
                Some(6) => "ROCr aborted (SIGABRT) initialising on it".to_string(),
                Some(n) => format!("ROCr was killed by signal {n} initialising on it"),
                None => "ROCr refused it".to_string(),
            };
            Err(reject(format!("{how}, saying: {said}")))
        }
        None => Err(reject(format!(
            "ROCr did not finish initialising on it within {} s (stopped); it said: {said}",
            PREFLIGHT_LIMIT.as_secs()
        ))),
    }
}

/// What the child printed, its last lines joined, or "nothing".
fn last_lines(stdout: &[u8], stderr: &[u8]) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(stdout),
        String::from_utf8_lossy(stderr)
    );
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if lines.is_empty() {
        return "nothing".into();
    }
    format!("\"{}\"", lines[lines.len().saturating_sub(6)..].join(" / "))
}

/// The child (`ditto model-preflight`), run with the model's environment:
/// the system's ROCr initialised, every agent listed, each GPU's cache
/// sizes read. Prints why on failure (ROCr's own aborts print themselves).
pub fn child() -> Result<(), String> {
    use hsa::*;
    let lib = cuda_abi::Library::open(HSA_RUNTIME_SONAME)
        .map_err(|e| format!("cannot load {HSA_RUNTIME_SONAME}: {e}"))?;
    let sym = |name: &str| {
        lib.symbol(name)
            .ok_or_else(|| format!("{HSA_RUNTIME_SONAME} lacks {name}"))
    };
    // SAFETY (the transmutes): each symbol is the HSA function of that
    // name, whose C signature crates/hsa declares.
    let init: HsaInitFn = unsafe { std::mem::transmute(sym("hsa_init")?) };
    let iterate: HsaIterateAgentsFn = unsafe { std::mem::transmute(sym("hsa_iterate_agents")?) };
    let get_info: HsaAgentGetInfoFn = unsafe { std::mem::transmute(sym("hsa_agent_get_info")?) };
    let shut_down: HsaShutDownFn = unsafe { std::mem::transmute(sym("hsa_shut_down")?) };
    let status_string: HsaStatusStringFn =
        unsafe { std::mem::transmute(sym("hsa_status_string")?) };
    let describe = |st: hsa_status_t| {
        let mut text: *const std::ffi::c_char = std::ptr::null();
        // SAFETY: ROCr's own status string, NUL-terminated and static.
        if unsafe { status_string(st, &mut text) } == HSA_STATUS_SUCCESS && !text.is_null() {
            // SAFETY: as above.
            let s = unsafe { std::ffi::CStr::from_ptr(text) };
            format!("0x{st:x} ({})", s.to_string_lossy())
        } else {
            format!("0x{st:x}")
        }
    };
    // SAFETY: hsa_init takes no arguments.
    let st = unsafe { init() };
    if st != HSA_STATUS_SUCCESS {
        return Err(format!("hsa_init returned {}", describe(st)));
    }
    // SAFETY: the runtime is initialised; these are its functions.
    let agents = unsafe { hsa::discover::agents(iterate) }
        .map_err(|st| format!("hsa_iterate_agents returned {}", describe(st)))?;
    let mut gpus = 0;
    for agent in agents {
        // SAFETY: as above.
        if unsafe { hsa::discover::device_type(get_info, agent) } == Some(HSA_DEVICE_TYPE_GPU) {
            gpus += 1;
            let mut sizes = [0u32; 4];
            // SAFETY: CACHE_SIZE writes four uint32_t (ROCr asserts when
            // the node has no caches: what HIP's first query meets).
            let st = unsafe { get_info(agent, AGENT_INFO_CACHE_SIZE, sizes.as_mut_ptr().cast()) };
            if st != HSA_STATUS_SUCCESS {
                return Err(format!(
                    "hsa_agent_get_info(CACHE_SIZE) returned {}",
                    describe(st)
                ));
            }
        }
    }
    if gpus == 0 {
        return Err("ROCr found no GPU agent in it".into());
    }
    // SAFETY: balanced with the hsa_init above.
    unsafe { shut_down() };
    Ok(())
}

/// What ditto sees wrong in the topology `dir`, each with what to do, by
/// the rejections known from ROCr 7.2.4's model mode; a pointer to a
/// known-good layout when it sees nothing.
pub fn diagnose(dir: &Path) -> Vec<String> {
    let good = "`cargo run -p hsa-model --example write_topology DIR` writes one that works";
    if !dir.is_dir() {
        return vec![format!("it is not a directory; {good}")];
    }
    let nodes = dir.join("nodes");
    let read = |path: &Path| std::fs::read_to_string(path).ok();
    if read(&nodes.join("0").join("properties")).is_none() {
        return vec![format!(
            "it holds no nodes/0/properties: a topology is laid out as \
             /sys/class/kfd/kfd/topology (generation_id, system_properties, nodes/N/{{gpu_id,\
             properties,mem_banks,caches,io_links}}); {good}"
        )];
    }
    let mut found = Vec::new();
    for node in 0u32.. {
        let at = nodes.join(node.to_string());
        let Some(properties) = read(&at.join("properties")) else {
            break;
        };
        let gpu_id: u64 = read(&at.join("gpu_id"))
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        if gpu_id == 0 {
            continue;
        }
        let file = |name: &str| at.join(name).display().to_string();
        if gpu_id != u64::from(node) + 1 {
            found.push(format!(
                "{} is {gpu_id}: model mode needs a GPU's gpu_id to be its node + 1 (write {})",
                file("gpu_id"),
                node + 1
            ));
        }
        let property = |key: &str| {
            properties.lines().find_map(|l| {
                let (k, v) = l.split_once(' ')?;
                (k == key).then(|| v.trim().parse::<u64>().ok()).flatten()
            })
        };
        let version = property("gfx_target_version").unwrap_or(0);
        let (major, minor) = (version / 10000, version / 100 % 100);
        if !(major >= 11 || major == 7 || (major == 9 && minor == 4)) {
            found.push(format!(
                "{}: gfx_target_version {version}: for this target ROCr binds a trap handler, \
                 an ioctl model mode does not implement (it aborts: \"model: Unimplemented KFD \
                 ioctl\"); use 90402 (gfx942)",
                file("properties")
            ));
        }
        let capability = property("capability").unwrap_or(0);
        if (capability >> 12) & 3 != 2 {
            found.push(format!(
                "{}: capability {capability} lacks the 64-bit doorbell type (bits 12-13 = 2, \
                 i.e. add 8192); ROCr refuses the GPU",
                file("properties")
            ));
        }
        if capability & (1 << 30) != 0 {
            found.push(format!(
                "{}: capability {capability} has bit 30 (the debugger runtime), which model mode \
                 does not implement; clear it",
                file("properties")
            ));
        }
        let caches = std::fs::read_dir(at.join("caches")).map_or(0, |d| d.count());
        if property("caches_count").unwrap_or(0) == 0 || caches == 0 {
            found.push(format!(
                "{} has no caches (caches_count and caches/M/properties): ROCr asserts \"GPU \
                 cache info missing\" on HIP's first device query; copy a GPU node's caches",
                at.display()
            ));
        }
    }
    if found.is_empty() {
        found.push(format!("ditto sees none of the known causes in it; {good}"));
    }
    found
}
