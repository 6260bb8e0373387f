//! Builds the C++ test applications of tests/apps/ with g++ (or $CXX).
//!
//! Each application is one source compiled twice (see
//! include/ditto_hip_cpu.hpp): a device pass that produces the CPU code
//! object (`<name>.co`, an x86-64 shared object), and a host pass that embeds
//! it and links against libhsa-runtime64 (ROCm's real HSA headers; at run
//! time LD_LIBRARY_PATH picks ditto's CPU runtime). Results go to
//! target/<profile>/apps/: `<name>` (the executable) and `<name>.co`, plus
//! code objects of test-only kernel files (`KERNEL_FILES`).
//!
//! The hipcc-built applications of tests/hip/ go to target/<profile>/apps/hip/
//! (build/hip.rs).
//!
//! This script only compiles; it never runs what it builds.

#[path = "build/hip.rs"]
mod hip;

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;

/// Applications: (executable name, source in tests/apps/).
const APPS: &[(&str, &str)] = &[
    ("reduce_sum_baseline", "reduce_sum_baseline.cpp"),
    ("reduce_sum_optimized", "reduce_sum_optimized.cpp"),
    ("reduce_sum_wrong", "reduce_sum_wrong.cpp"),
    ("reduce_sum_renamed", "reduce_sum_renamed.cpp"),
    ("vector_add", "vector_add.cpp"),
    ("scale_values", "scale_values.cpp"),
    ("scale_twice", "scale_twice.cpp"),
    ("no_dispatch", "no_dispatch.cpp"),
    ("parallel_groups", "parallel_groups.cpp"),
    ("caching_allocator", "caching_allocator.cpp"),
    ("host_output", "host_output.cpp"),
    ("dispatch_storm", "dispatch_storm.cpp"),
    ("many_queues", "many_queues.cpp"),
    ("address_reuse", "address_reuse.cpp"),
    ("spawns_children", "spawns_children.cpp"),
    ("large_output", "large_output.cpp"),
    ("queue_churn", "queue_churn.cpp"),
    ("large_output_ranks", "large_output_ranks.cpp"),
    ("host_reads_device", "host_reads_device.cpp"),
    ("vmem_output", "vmem_output.cpp"),
    ("kernel_time", "kernel_time.cpp"),
];

/// Kernel-only sources (device pass only), for tests that run code objects
/// directly without a runtime.
const KERNEL_FILES: &[(&str, &str)] = &[("kernel_checks", "kernel_checks.cpp")];

const HSA_HEADER: &str = "/usr/include/hsa/hsa.h";

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let repo = manifest_dir
        .parent()
        .and_then(Path::parent)
        .expect("crates/test-apps sits two levels below the repository root")
        .to_path_buf();
    let include_dir = repo.join("include");
    let apps_src = repo.join("tests").join("apps");

    println!("cargo:rerun-if-changed={}", apps_src.display());
    println!(
        "cargo:rerun-if-changed={}",
        include_dir.join("ditto_hip_cpu.hpp").display()
    );
    println!(
        "cargo:rerun-if-changed={}",
        include_dir.join("ditto_hsa_cpu.h").display()
    );
    println!("cargo:rerun-if-changed={HSA_HEADER}");
    println!("cargo:rerun-if-env-changed=CXX");
    println!("cargo:rerun-if-env-changed=HIPCC");
    let hip_src = repo.join("tests").join("hip");
    println!("cargo:rerun-if-changed={}", hip_src.display());
    println!(
        "cargo:rerun-if-changed={}",
        include_dir.join("ditto_hip_host").display()
    );

    if !Path::new(HSA_HEADER).exists() {
        panic!(
            "ROCm's HSA headers are missing: run scripts/install-deps (installs Debian's libhsa-runtime-dev)"
        );
    }

    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let apps_dir = apps_dir_from_out_dir(&out_dir);
    std::fs::create_dir_all(&apps_dir).unwrap_or_else(|e| {
        panic!(
            "cannot create the apps directory {}: {e}",
            apps_dir.display()
        )
    });
    println!("cargo:rustc-env=DITTO_TEST_APPS_DIR={}", apps_dir.display());

    let cxx = env::var("CXX").unwrap_or_else(|_| "g++".to_string());
    let hip_build = hip::HipBuild {
        hipcc: env::var("HIPCC").unwrap_or_else(|_| "hipcc".to_string()),
        cxx: cxx.clone(),
        include_dir: include_dir.clone(),
        hip_src,
        out_dir: out_dir.clone(),
    };
    println!("cargo:rerun-if-env-changed={}", hip::WITHOUT_HIPCC_VAR);
    let with_hip = env::var(hip::WITHOUT_HIPCC_VAR).as_deref() != Ok("1");
    if !with_hip {
        println!(
            "cargo:warning={}=1: the hipcc-built applications of tests/hip are not built; \
             tests/real_hip.rs fails",
            hip::WITHOUT_HIPCC_VAR
        );
    } else if let Err(e) = hip_build.check_hipcc() {
        panic!("{e}");
    }
    let hip_apps_dir = apps_dir.join("hip");
    std::fs::create_dir_all(&hip_apps_dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", hip_apps_dir.display()));
    let compiler = Compiler {
        cxx,
        include_dir,
        apps_src,
    };

    let mut jobs: Vec<Job> = Vec::new();
    for &(name, source) in APPS {
        jobs.push(Job {
            name,
            source,
            host: true,
            hip: false,
            hip_flags: &[],
        });
    }
    for &(name, source) in KERNEL_FILES {
        jobs.push(Job {
            name,
            source,
            host: false,
            hip: false,
            hip_flags: &[],
        });
    }
    for &(name, source, flags) in hip::HIP_APPS.iter().filter(|_| with_hip) {
        jobs.push(Job {
            name,
            source,
            host: false,
            hip: true,
            hip_flags: flags,
        });
    }

    let parallel = env::var("NUM_JOBS")
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(1)
        .max(1);
    let mut failures = Vec::new();
    for chunk in jobs.chunks(parallel) {
        let results: Vec<Result<(), String>> = thread::scope(|scope| {
            let handles: Vec<_> = chunk
                .iter()
                .map(|job| {
                    let compiler = &compiler;
                    let apps_dir = &apps_dir;
                    let hip_build = &hip_build;
                    let hip_apps_dir = &hip_apps_dir;
                    scope.spawn(move || {
                        if job.hip {
                            hip_build.build(job.name, job.source, job.hip_flags, hip_apps_dir)
                        } else {
                            compiler.build(job, apps_dir)
                        }
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("build thread panicked".into()))
                })
                .collect()
        });
        failures.extend(results.into_iter().filter_map(Result::err));
    }
    if !failures.is_empty() {
        panic!(
            "building the test applications failed:\n{}",
            failures.join("\n")
        );
    }
}

/// OUT_DIR is target/<profile>/build/test-apps-<hash>/out (also under a
/// CARGO_TARGET_DIR or a --target triple): the apps go to target/<profile>/apps.
fn apps_dir_from_out_dir(out_dir: &Path) -> PathBuf {
    let profile_dir = out_dir
        .ancestors()
        .nth(3)
        .unwrap_or_else(|| panic!("unexpected OUT_DIR layout: {}", out_dir.display()));
    profile_dir.join("apps")
}

struct Job {
    name: &'static str,
    source: &'static str,
    /// Also build the host executable (apps); kernel files only get a code object.
    host: bool,
    /// A hipcc-built application of tests/hip/ (build/hip.rs).
    hip: bool,
    /// Its hipcc flags beyond the usual ones.
    hip_flags: &'static [&'static str],
}

struct Compiler {
    cxx: String,
    include_dir: PathBuf,
    apps_src: PathBuf,
}

impl Compiler {
    fn base(&self) -> Command {
        let mut cmd = Command::new(&self.cxx);
        cmd.args(["-std=c++17", "-O2", "-g", "-Wall", "-Wextra"])
            .arg("-I")
            .arg(&self.include_dir)
            .arg("-I")
            .arg(&self.apps_src);
        cmd
    }

    fn build(&self, job: &Job, apps_dir: &Path) -> Result<(), String> {
        let source = self.apps_src.join(job.source);
        let code_object = apps_dir.join(format!("{}.co", job.name));

        // Device pass: the CPU code object. -Bsymbolic and -fno-gnu-unique keep
        // its kernels and their static locals its own (the host executable
        // exports functions of the same names).
        let mut device = self.base();
        device
            .args([
                "-fPIC",
                "-shared",
                "-DDITTO_DEVICE_PASS",
                "-fno-gnu-unique",
                "-Wl,-Bsymbolic",
            ])
            .arg(&source)
            .arg("-o")
            .arg(&code_object);
        run(device, job.name, "device pass")?;

        if !job.host {
            return Ok(());
        }
        let path_text = code_object
            .to_str()
            .ok_or_else(|| format!("{}: non-UTF-8 build path", job.name))?;
        if path_text.contains(['"', '\\', '\n']) {
            return Err(format!(
                "{}: the build path {path_text} contains a quote, backslash or newline, which .incbin cannot take; \
                 build in another directory (CARGO_TARGET_DIR)",
                job.name
            ));
        }
        let mut host = self.base();
        host.arg(format!("-DDITTO_CODE_OBJECT_PATH=\"{path_text}\""))
            .arg("-rdynamic")
            .arg(&source)
            .arg("-o")
            .arg(apps_dir.join(job.name))
            .arg("-lhsa-runtime64")
            .arg("-lpthread");
        run(host, job.name, "host pass")
    }
}

fn run(mut cmd: Command, name: &str, pass: &str) -> Result<(), String> {
    let output = cmd
        .output()
        .map_err(|e| format!("{name} ({pass}): cannot run {:?}: {e}", cmd.get_program()))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        return Err(format!(
            "{name} ({pass}) failed ({}): {cmd:?}\n{stderr}",
            output.status
        ));
    }
    for line in stderr.lines().filter(|l| !l.trim().is_empty()) {
        println!("cargo:warning={name} ({pass}): {line}");
    }
    Ok(())
}
