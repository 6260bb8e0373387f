//! `ditto hipcc ARGS...`: hipcc as before, plus the host build that lets
//! the program run on ditto's CPU runtime, where no AMD GPU is.
//!
//! hipcc runs first with ARGS exactly as given (its output is the user's
//! build, untouched but for one unallocated section in `-c` objects); then:
//! - each HIP source it compiled is compiled again by g++ as the host build
//!   (host_compile.rs), registering the kernels of the source's own code
//!   objects (registration.rs);
//! - a compile step (`-c`) carries that object inside hipcc's object
//!   (embedding.rs);
//! - a link step writes `<output>.host.so` beside the program, from the
//!   sources it compiled and the host objects carried by the objects and
//!   static libraries it links (given by path or by -L/-l). The CPU
//!   runtime looks there.
//!
//! `ditto hipcc` is a drop-in compiler: `HIPCC="ditto hipcc"`, a Makefile's
//! compiler variable, or a CMake launcher (`ditto;hipcc`: when the first
//! argument is a compiler path, that compiler is run instead of hipcc).

mod args;
mod embedding;
mod headers;
mod host_compile;
pub mod host_source;
mod registration;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use args::HipccArgs;
use registration::Registration;

/// Runs the command; returns hipcc's exit status when hipcc fails, else 0
/// (an error when the host build fails).
pub fn run(all: Vec<OsString>) -> Result<i32> {
    let (compiler, args) = split_compiler(all);
    let status = Command::new(&compiler)
        .args(&args)
        .status()
        .with_context(|| {
            format!(
                "cannot run {} (set DITTO_HIPCC to hipcc's path, or give the compiler as the \
                 first argument)",
                compiler.to_string_lossy()
            )
        })?;
    if !status.success() {
        return Ok(status.code().unwrap_or(1));
    }
    let parsed = args::parse(&args);
    if parsed.no_output || (parsed.sources.is_empty() && parsed.inputs.is_empty()) {
        return Ok(0);
    }
    host_build(&compiler, &parsed)?;
    Ok(0)
}

/// The compiler to run and its arguments: a first argument that is a
/// compiler (a path whose name has clang, hipcc or c++ in it) is the
/// compiler, as a CMake launcher passes it; else `real_hipcc`.
fn split_compiler(mut all: Vec<OsString>) -> (OsString, Vec<OsString>) {
    if let Some(first) = all.first() {
        let name = Path::new(first)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let looks_like_compiler = !first.to_string_lossy().starts_with('-')
            && ["clang", "hipcc", "c++", "g++"]
                .iter()
                .any(|c| name.contains(c))
            && !name.contains('.');
        if looks_like_compiler {
            let compiler = all.remove(0);
            return (compiler, all);
        }
    }
    (real_hipcc(), all)
}

/// The hipcc that `ditto hipcc` runs: `DITTO_HIPCC`, else `HIPCC` when it
/// names a compiler, else hipcc. A `HIPCC` that is ditto's own command
/// (`make HIPCC="ditto hipcc"` exports it to the commands it runs) or any
/// command with arguments is not a compiler path, and is passed over.
fn real_hipcc() -> OsString {
    if let Some(chosen) = std::env::var_os("DITTO_HIPCC").filter(|v| !v.is_empty()) {
        return chosen;
    }
    std::env::var_os("HIPCC")
        .filter(|v| names_a_compiler(v))
        .unwrap_or_else(|| "hipcc".into())
}

fn names_a_compiler(value: &std::ffi::OsStr) -> bool {
    let text = value.to_string_lossy();
    if text.trim().is_empty() || text.contains(char::is_whitespace) {
        return false;
    }
    let path = Path::new(value);
    if path.file_name().is_some_and(|n| n == "ditto") {
        return false;
    }
    let itself = std::env::current_exe().and_then(std::fs::canonicalize).ok();
    let resolved = if path.components().count() > 1 {
        std::fs::canonicalize(path).ok()
    } else {
        std::env::var_os("PATH").and_then(|dirs| {
            std::env::split_paths(&dirs)
                .map(|d| d.join(path))
                .find(|p| p.is_file())
                .and_then(|p| std::fs::canonicalize(p).ok())
        })
    };
    resolved.is_none() || resolved != itself
}

fn host_build(compiler: &OsString, parsed: &HipccArgs) -> Result<()> {
    let scratch = tempfile::Builder::new()
        .prefix("ditto-hipcc-")
        .tempdir()
        .context("cannot make a scratch directory for the host build")?;
    let include = headers::write(&scratch.path().join("include"))
        .context("cannot write the host-build headers")?;
    let gfx942 = parsed.offload_archs.iter().any(|a| a.starts_with("gfx942"));
    let mut host_objects = Vec::new();
    let mut kernel_count = 0;
    for (index, source) in parsed.sources.iter().enumerate() {
        warn_of_run_time_compilation(source);
        let work = scratch.path().join(format!("source-{index}"));
        std::fs::create_dir_all(&work)?;
        let mut code = source_device_code(compiler, parsed, source, &work)?;
        if !code.unconfirmed_variables.is_empty() {
            let ir = device_ir_code(compiler, parsed, source, &work)?;
            code.confirm_variables(&ir);
        }
        let mut registration = Registration::default();
        for kernel in &code.kernels {
            registration.add(kernel);
        }
        for variable in &code.variables {
            registration.add_variable(variable);
        }
        kernel_count += registration.lines.len();
        for u in &registration.unnamable {
            eprintln!(
                "ditto hipcc: warning: the kernel `{}` of {} has no host build: {}; its dispatches \
                 on ditto's CPU runtime will fail naming it",
                u.kernel,
                source.display(),
                u.why
            );
        }
        let object = work.join("host.o");
        host_compile::HostCompile {
            include: &include,
            scratch: &work,
            preprocessor: &parsed.preprocessor,
            standard: parsed.standard.as_deref(),
            gfx942,
        }
        .compile(source, &|namespaces| registration.text(namespaces), &object)?;
        let bytes = std::fs::read(&object)?;
        if parsed.compile_only {
            embedding::embed(&parsed.object_of(source), &bytes, &work)?;
        } else if parsed.static_library {
            embedding::add_to_archive(&parsed.linked_output(), source, &bytes, &work)?;
        } else {
            host_objects.push(bytes);
        }
    }
    if parsed.compile_only || parsed.static_library {
        return Ok(());
    }
    let output = parsed.linked_output();
    // A program whose sources have no kernels needs a host build only for
    // kernels that objects and libraries carry.
    if kernel_count == 0 {
        host_objects.clear();
    }
    for input in parsed.inputs.iter().cloned().chain(parsed.static_libs()) {
        for object in embedding::carried(&input)? {
            // The same object given twice (directly and in an archive) is
            // linked once.
            if !host_objects.contains(&object) {
                host_objects.push(object);
            }
        }
    }
    if host_objects.is_empty() {
        return Ok(());
    }
    link(&host_objects, &host_library_path(&output), scratch.path())
}

/// Kernels compiled while the program runs (hiprtc) have no host build:
/// said at build time, where it can be known.
fn warn_of_run_time_compilation(source: &Path) {
    let Ok(text) = std::fs::read(source) else {
        return;
    };
    if String::from_utf8_lossy(&text).contains("hiprtcCompileProgram") {
        eprintln!(
            "ditto hipcc: warning: {} compiles kernels while it runs (hiprtc); ditto's CPU runtime \
             cannot run those (no host build can exist for them): it refuses their code objects \
             when the program loads them",
            source.display()
        );
    }
}

/// Where the CPU runtime looks for a program's host build.
pub fn host_library_path(program: &Path) -> PathBuf {
    let mut name = program.as_os_str().to_owned();
    name.push(".host.so");
    PathBuf::from(name)
}

/// The kernels and variables of `source`'s own code objects: from hipcc's
/// output when it holds exactly this source's device code, else from the
/// device pass run again for the source.
fn source_device_code(
    compiler: &OsString,
    parsed: &HipccArgs,
    source: &Path,
    work: &Path,
) -> Result<registration::DeviceCode> {
    let own_output = if parsed.static_library {
        None
    } else if parsed.compile_only && !parsed.relocatable_device_code {
        Some(parsed.object_of(source))
    } else if (parsed.code_object_only && parsed.sources.len() == 1)
        || (!parsed.compile_only
            && parsed.sources.len() == 1
            && parsed.inputs.is_empty()
            && parsed.static_libs().is_empty()
            && !parsed.relocatable_device_code)
    {
        Some(parsed.linked_output())
    } else {
        None
    };
    let Some(file) = own_output else {
        return device_ir_code(compiler, parsed, source, work);
    };
    let bytes = std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
    registration::device_code_in(&bytes)
        .map_err(|e| anyhow::anyhow!("cannot list the kernels of {}: {e}", file.display()))
}

/// The kernels and variables of one source from the LLVM IR of its device
/// pass (for one
/// target): works for relocatable device code, whose objects hold bitcode
/// and whose kernels may call device functions of other files.
fn device_ir_code(
    compiler: &OsString,
    parsed: &HipccArgs,
    source: &Path,
    work: &Path,
) -> Result<registration::DeviceCode> {
    let ir = work.join("device.ll");
    let flags = parsed.compile_flags.iter().filter(|f| {
        let f = f.to_string_lossy();
        !(f.starts_with("--offload-arch=") || f.starts_with("--amdgpu-target="))
    });
    let arch = parsed
        .offload_archs
        .first()
        .cloned()
        .unwrap_or_else(|| "gfx90a".to_string());
    let output = Command::new(compiler)
        .args(flags)
        .arg(format!("--offload-arch={arch}"))
        .args(["--cuda-device-only", "-S", "-emit-llvm"])
        .arg(source)
        .arg("-o")
        .arg(&ir)
        .output()
        .with_context(|| format!("cannot run {}", compiler.to_string_lossy()))?;
    if !output.status.success() {
        bail!(
            "the device pass of {} (run again to list its kernels) failed:\n{}",
            source.display(),
            String::from_utf8_lossy(&output.stderr).trim_end()
        );
    }
    let text =
        std::fs::read_to_string(&ir).with_context(|| format!("cannot read {}", ir.display()))?;
    Ok(registration::device_code_in_ir(&text))
}

fn link(objects: &[Vec<u8>], library: &Path, scratch: &Path) -> Result<()> {
    let mut command = Command::new(host_compile::host_cxx());
    command.args([
        "-shared",
        "-fPIC",
        "-Wl,-Bsymbolic",
        "-Wl,--gc-sections",
        "-o",
    ]);
    let partial = scratch.join("host.so");
    command.arg(&partial);
    for (i, object) in objects.iter().enumerate() {
        let path = scratch.join(format!("linked-{i}.o"));
        std::fs::write(&path, object)?;
        command.arg(path);
    }
    command.arg("-lm");
    let output = command
        .output()
        .context("cannot run g++ to link the host build")?;
    if !output.status.success() {
        bail!(
            "linking the host build {} failed:\n{}",
            library.display(),
            String::from_utf8_lossy(&output.stderr).trim_end()
        );
    }
    // Beside the program, replaced whole (a running program keeps its copy).
    let staged = library.with_extension("so.partial");
    std::fs::copy(&partial, &staged)
        .with_context(|| format!("cannot write {}", staged.display()))?;
    std::fs::rename(&staged, library)
        .with_context(|| format!("cannot write {}", library.display()))?;
    Ok(())
}
