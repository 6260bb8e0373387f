//! `ditto replay --emit DIR`: a standalone reproducer of one captured
//! dispatch that builds with hipcc alone (a HIP dispatch: `replay.cpp`, on
//! the HIP module API) or nvcc alone (a CUDA dispatch: `replay.cu`, which
//! includes `replay.cpp` on the CUDA driver API): load the code object,
//! allocate and fill the memory, rewrite the pointer arguments, launch,
//! time with events, check the outputs with ditto's tolerances; with
//! `replay.txt` (what to run and check), the data files and a
//! CMakeLists.txt. On ditto's CPU runtime the kernel's host build goes
//! beside it (`kernel.host.so`), where the runtime looks. Owns writing
//! that directory; nothing is run.
//!
//! The directory is written by `--out`'s rules: this user's, not writable
//! by other users, never a link and never under a parent that is a link,
//! new or empty; opened once, and every file created in it through that
//! handle (`openat` with `O_CREAT|O_EXCL|O_NOFOLLOW`), so that a link
//! planted under a name the reproducer writes is refused, never written
//! through.

use super::plan::DispatchPlan;
use crate::compare::CompareOptions;
use crate::store::dir_handle::{DirHandle, is_plain_name};
use crate::store::{Snapshot, StoreError, output_dir};
use anyhow::{Context, Result, bail};
use ditto_protocol::DType;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

/// The reproducer's program, written as `replay.cpp`.
const PROGRAM: &str = include_str!("reproducer.cpp");

/// `replay.cu`: the same program on the CUDA driver API.
const CUDA_PROGRAM: &str = "\
// nvcc -O2 replay.cu -o replay -lcuda   (the program is replay.cpp)
#define DITTO_REPLAY_CUDA 1
#include \"replay.cpp\"
";

const CUDA_CMAKE: &str = "\
cmake_minimum_required(VERSION 3.21)
project(ditto_replay LANGUAGES CXX CUDA)
# Or by hand: nvcc -O2 replay.cu -o replay -lcuda
find_package(CUDAToolkit REQUIRED)
add_executable(replay replay.cu)
target_link_libraries(replay PRIVATE CUDA::cuda_driver)
";

const CMAKE: &str = "\
cmake_minimum_required(VERSION 3.21)
project(ditto_replay LANGUAGES CXX)
# hipcc as the compiler: `CXX=hipcc cmake -B build && cmake --build build`
# (or build by hand: hipcc -O2 replay.cpp -o replay).
add_executable(replay replay.cpp)
target_compile_options(replay PRIVATE -O2)
";

/// The short dtype names `replay.cpp` reads.
fn dtype_word(d: DType) -> &'static str {
    match d {
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::F32 => "f32",
        DType::F64 => "f64",
        DType::I8 => "i8",
        DType::I16 => "i16",
        DType::I32 => "i32",
        DType::I64 => "i64",
        DType::U8 => "u8",
        DType::U16 => "u16",
        DType::U32 => "u32",
        DType::U64 => "u64",
        DType::Bool => "bool",
        DType::Bytes => "bytes",
    }
}

/// What goes into the reproducer besides the snapshot's data.
pub struct EmitSource<'a> {
    /// The code object to load (the captured one or a replacement), as read.
    pub code: &'a [u8],
    /// Its host build, for ditto's CPU runtime (a copy replay made).
    pub host_build: Option<&'a Path>,
}

/// The reproducer's directory `dir`, opened by `--out`'s rules: made when
/// missing (in its parent, which must not be a link), else an empty
/// directory; not a link; this user's and not writable by other users.
pub fn open_reproducer_dir(dir: &Path) -> Result<DirHandle> {
    let refused = |e: StoreError| match e {
        StoreError::ForeignDirectory { path, what } => anyhow::anyhow!(
            "{} cannot take the reproducer (--emit): {what}; give a new directory in a place \
             only you can change",
            path.display()
        ),
        e => e.into(),
    };
    let name = dir
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| is_plain_name(n))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "--emit {}: give a directory by a name that ends in a plain file name",
                dir.display()
            )
        })?;
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    // The parent is opened once, never through a link in its place.
    let parent_handle = DirHandle::open(parent).map_err(|e| {
        anyhow::anyhow!(
            "{} cannot take the reproducer (--emit): its parent {} cannot be used ({e}); give a \
             path without links",
            dir.display(),
            parent.display()
        )
    })?;
    if !parent_handle
        .contains(name)
        .with_context(|| format!("reading {}", parent.display()))?
    {
        parent_handle
            .create_dir(name, 0o755)
            .with_context(|| format!("creating {}", dir.display()))?;
    }
    let handle = output_dir::open(dir).map_err(refused)?;
    output_dir::check_owner_and_mode(&handle).map_err(refused)?;
    if !handle
        .names()
        .with_context(|| format!("reading {}", dir.display()))?
        .is_empty()
    {
        bail!(
            "{} is not empty: --emit writes a new directory (give one that does not exist)",
            dir.display()
        );
    }
    Ok(handle)
}

/// Creates the file `name` of the reproducer in `dir` and writes `bytes`
/// into it: a name that exists, a link included, is refused, never
/// followed or replaced.
pub fn put(dir: &DirHandle, name: &str, bytes: &[u8]) -> Result<()> {
    let shown = dir.shown(name);
    let mut file = dir
        .create_new(name, 0o644)
        .with_context(|| format!("creating {}", shown.display()))?;
    file.write_all(bytes)
        .with_context(|| format!("writing {}", shown.display()))
}

/// Writes the reproducer of `plan` (a dispatch of `snapshot`) into `dir`,
/// which must not exist or be empty.
pub fn emit(
    snapshot: &Snapshot,
    plan: &DispatchPlan,
    source: &EmitSource<'_>,
    options: &CompareOptions,
    dir: &Path,
) -> Result<()> {
    let code = source.code;
    let cuda = super::cuda_child::is_cubin(code);
    let out = open_reproducer_dir(dir)?;
    let code_file = if cuda { "kernel.cubin" } else { "kernel.co" };
    put(&out, code_file, code)?;
    if let Some(host) = source.host_build {
        let bytes = super::inputs::named_file(host, "a host build")?;
        put(&out, "kernel.host.so", &bytes)?;
    }
    let arrays = snapshot.load_dispatch(&plan.record)?;
    let symbol = &plan.launch.symbol;
    let kernel = ditto_kernels::parse_code_object(code)
        .ok()
        .flatten()
        .and_then(|ks| ks.into_iter().find(|k| &k.symbol == symbol));
    // The kernel's own arguments: HIP adds the hidden ones itself.
    let explicit = kernel
        .as_ref()
        .and_then(|k| k.explicit_args().iter().map(|a| a.offset + a.size).max())
        .unwrap_or(plan.kernarg.len() as u64) as usize;
    let explicit = explicit.min(plan.kernarg.len());
    put(&out, "kernarg.bin", &plan.kernarg[..explicit])?;
    let record = &plan.record;
    let name = record
        .kernel
        .as_ref()
        .map_or_else(|| symbol.clone(), |k| k.demangled.clone());
    let mut text = String::new();
    let _ = writeln!(text, "kernel {}", symbol.trim_end_matches(".kd"));
    let _ = writeln!(text, "name {name}");
    let [gx, gy, gz] = record.grid;
    let [bx, by, bz] = record.block;
    let _ = writeln!(text, "grid {gx} {gy} {gz}");
    let _ = writeln!(text, "block {bx} {by} {bz}");
    let _ = writeln!(text, "group {}", plan.launch.group_segment_size);
    let _ = writeln!(text, "kernarg {explicit}");
    if cuda {
        // The grid counts blocks, the shared memory is the dynamic part;
        // the argument block has no layout here: every 8-byte word that
        // points into an image is rewritten.
        let _ = writeln!(text, "cuda-launch");
        let _ = writeln!(text, "relocate-every-word");
    }
    for offset in super::child::pointer_offsets(code, symbol) {
        let _ = writeln!(text, "pointer {offset}");
    }
    for (n, image) in plan.images.iter().enumerate() {
        let file = format!("memory{n}.bin");
        put(&out, &file, &arrays[image.position].1.bytes)?;
        match &image.variable {
            Some(v) => {
                let _ = writeln!(text, "variable {v} {:x} {} {file}", image.base, image.size);
            }
            None => {
                let _ = writeln!(text, "image {:x} {} {file}", image.base, image.size);
            }
        }
    }
    for output in &plan.outputs {
        let b = &record.buffers[output.position];
        let dtype = b.dtype()?;
        let t = options.tolerance_for(dtype);
        let file = format!("reference-arg{}.bin", output.arg);
        put(&out, &file, &arrays[output.position].1.bytes)?;
        let _ = writeln!(
            text,
            "output {} {:x} {} {} {:e} {:e} {file}",
            output.arg,
            output.address,
            output.extent,
            dtype_word(dtype),
            t.atol,
            t.rtol
        );
    }
    put(&out, "replay.txt", text.as_bytes())?;
    put(&out, "replay.cpp", PROGRAM.as_bytes())?;
    if cuda {
        put(&out, "replay.cu", CUDA_PROGRAM.as_bytes())?;
        put(&out, "CMakeLists.txt", CUDA_CMAKE.as_bytes())?;
    } else {
        put(&out, "CMakeLists.txt", CMAKE.as_bytes())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reproducer_file_is_never_written_through_a_link_or_over_a_file() {
        let root = tempfile::tempdir().unwrap();
        let victim = root.path().join("victim");
        std::fs::write(&victim, "someone's file\n").unwrap();
        let repro = root.path().join("repro");
        let out = open_reproducer_dir(&repro).unwrap();
        put(&out, "kernel.co", b"code").unwrap();
        assert_eq!(std::fs::read(repro.join("kernel.co")).unwrap(), b"code");
        // Planted after the directory was opened (another user's race):
        // a link under a name the reproducer writes is refused, not followed.
        std::os::unix::fs::symlink(&victim, repro.join("CMakeLists.txt")).unwrap();
        let e = put(&out, "CMakeLists.txt", CMAKE.as_bytes()).unwrap_err();
        assert!(format!("{e:#}").contains("repro/CMakeLists.txt"), "{e:#}");
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "someone's file\n"
        );
        // Nor is a file that is there replaced.
        assert!(put(&out, "kernel.co", b"other").is_err());
        assert_eq!(std::fs::read(repro.join("kernel.co")).unwrap(), b"code");
        // The directory, now holding files, is not taken again.
        let e = open_reproducer_dir(&repro).unwrap_err().to_string();
        assert!(e.contains("is not empty"), "{e}");
    }
}
