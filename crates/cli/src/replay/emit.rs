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

use super::plan::DispatchPlan;
use crate::compare::CompareOptions;
use crate::store::Snapshot;
use anyhow::{Context, Result, bail};
use ditto_protocol::DType;
use std::fmt::Write as _;
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
    /// The code object to load (the captured one or a replacement).
    pub code_object: &'a Path,
    /// Its host build, for ditto's CPU runtime.
    pub host_build: Option<&'a Path>,
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
    if dir.exists()
        && std::fs::read_dir(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .next()
            .is_some()
    {
        bail!(
            "{} is not empty: --emit writes a new directory (give one that does not exist)",
            dir.display()
        );
    }
    let code = std::fs::read(source.code_object)
        .with_context(|| format!("reading {}", source.code_object.display()))?;
    let cuda = super::cuda_child::is_cubin(&code);
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let code_file = if cuda { "kernel.cubin" } else { "kernel.co" };
    std::fs::write(dir.join(code_file), &code)?;
    if let Some(host) = source.host_build {
        std::fs::copy(host, dir.join("kernel.host.so"))
            .with_context(|| format!("copying the host build {}", host.display()))?;
    }
    let arrays = snapshot.load_dispatch(&plan.record)?;
    let symbol = &plan.launch.symbol;
    let kernel = ditto_kernels::parse_code_object(&code)
        .ok()
        .flatten()
        .and_then(|ks| ks.into_iter().find(|k| &k.symbol == symbol));
    // The kernel's own arguments: HIP adds the hidden ones itself.
    let explicit = kernel
        .as_ref()
        .and_then(|k| k.explicit_args().iter().map(|a| a.offset + a.size).max())
        .unwrap_or(plan.kernarg.len() as u64) as usize;
    let explicit = explicit.min(plan.kernarg.len());
    std::fs::write(dir.join("kernarg.bin"), &plan.kernarg[..explicit])?;
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
    for offset in super::child::pointer_offsets(&code, symbol) {
        let _ = writeln!(text, "pointer {offset}");
    }
    for (n, image) in plan.images.iter().enumerate() {
        let file = format!("memory{n}.bin");
        std::fs::write(dir.join(&file), &*arrays[image.position].1.bytes)?;
        match &image.variable {
            Some(v) => {
                let _ = writeln!(text, "variable {v} {:x} {} {file}", image.base, image.size);
            }
            None => {
                let _ = writeln!(text, "image {:x} {} {file}", image.base, image.size);
            }
        }
    }
    for out in &plan.outputs {
        let b = &record.buffers[out.position];
        let dtype = b.dtype()?;
        let t = options.tolerance_for(dtype);
        let file = format!("reference-arg{}.bin", out.arg);
        std::fs::write(dir.join(&file), &*arrays[out.position].1.bytes)?;
        let _ = writeln!(
            text,
            "output {} {:x} {} {} {:e} {:e} {file}",
            out.arg,
            out.address,
            out.extent,
            dtype_word(dtype),
            t.atol,
            t.rtol
        );
    }
    std::fs::write(dir.join("replay.txt"), text)?;
    std::fs::write(dir.join("replay.cpp"), PROGRAM)?;
    if cuda {
        std::fs::write(dir.join("replay.cu"), CUDA_PROGRAM)?;
        std::fs::write(dir.join("CMakeLists.txt"), CUDA_CMAKE)?;
    } else {
        std::fs::write(dir.join("CMakeLists.txt"), CMAKE)?;
    }
    Ok(())
}
