//! `ditto hipcc`: HIP programs written the way HIP programmers write them
//! (tests/hip/as_written/: `<<<>>>` launches, dynamic shared memory, events,
//! a warp-shuffle reduction, a `__constant__` table filled with
//! hipMemcpyToSymbol, kernel printf, cooperative-group tiles, a static
//! device library), built by `ditto hipcc` in place of hipcc and run
//! unmodified by the real HIP runtime (5.2 here, 6.4 in its chroot) on the
//! CPU runtime; a cooperative launch with grid-wide syncs (and a grid sync
//! outside one, which stops the program saying why); `ditto validate` on
//! them; and the build that must fail: GCN inline assembly under the
//! device-pass macros.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// Far beyond what any of these builds and runs needs.
const LIMIT: Duration = Duration::from_secs(300);

fn source(name: &str) -> PathBuf {
    repo_root().join("tests/hip/as_written").join(name)
}

/// `ditto hipcc --offload-arch=gfx90a -O2 ARGS...` in `dir`.
fn hipcc(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(ditto_bin());
    cmd.current_dir(dir)
        .args(["hipcc", "--offload-arch=gfx90a", "-O2"])
        .args(args);
    output_within(&mut cmd, LIMIT, &format!("ditto hipcc {args:?}"))
}

fn build(dir: &Path, args: &[&str]) {
    let out = hipcc(dir, args);
    assert!(
        out.status.success(),
        "ditto hipcc {args:?} failed:\n{}",
        stderr(&out)
    );
}

fn run(program: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("LD_LIBRARY_PATH", cpu_runtime_dir())
        .env_remove("DITTO_HIP_HOST_KERNELS");
    output_within(&mut cmd, LIMIT, &format!("{}", program.display()))
}

fn assert_runs(program: &Path, args: &[&str], expected: &str) {
    let out = run(program, args);
    assert_eq!(
        (out.status.code(), stdout(&out).as_str()),
        (Some(0), expected),
        "{}; stderr:\n{}",
        program.display(),
        stderr(&out)
    );
}

#[test]
fn a_warp_shuffle_reduction_with_launch_brackets_events_and_a_constant_table_runs() {
    let dir = tempfile::tempdir().unwrap();
    let src = source("warp_reduce.hip");
    build(dir.path(), &[src.to_str().unwrap(), "-o", "warp_reduce"]);
    let program = dir.path().join("warp_reduce");
    assert!(
        dir.path().join("warp_reduce.host.so").is_file(),
        "no host build beside the program"
    );
    // The kernel's printf, the right total (weights from hipMemcpyToSymbol),
    // the events' elapsed time.
    assert_runs(
        &program,
        &[],
        "block_sum: 100000 elements, wavefront of 64\ntotal -17.5 expected -17.5 PASS (timed)\n",
    );
    assert_runs(
        &program,
        &["1000"],
        "block_sum: 1000 elements, wavefront of 64\ntotal -37.5 expected -37.5 PASS (timed)\n",
    );
}

#[test]
fn ditto_validate_passes_the_shuffle_reduction_against_its_baseline_and_names_a_tail_bug() {
    let dir = tempfile::tempdir().unwrap();
    let src = source("warp_reduce.hip");
    let src = src.to_str().unwrap();
    for (flag, name) in [
        ("-DNONE", "opt"),
        ("-DBASELINE", "baseline"),
        ("-DTAIL_BUG", "tail"),
    ] {
        build(
            dir.path(),
            &["-fhip-kernel-arg-name", flag, src, "-o", name],
        );
    }
    let validate = |opt: &str| {
        let mut cmd = Command::new(ditto_bin());
        cmd.current_dir(dir.path())
            .env("LD_LIBRARY_PATH", cpu_runtime_dir())
            .args(["validate", "--kernel", "block_sum", "--hsa-runtime", "cpu"])
            .args(["--ref", "./baseline 20000 --report-only", "--opt"])
            .arg(format!("./{opt} 20000 --report-only"));
        output_within(&mut cmd, LIMIT, "ditto validate")
    };
    let valid = validate("opt");
    assert_eq!(valid.status.code(), Some(0), "{}", stderr(&valid));
    assert!(
        stdout(&valid).contains("PASS block_sum(float const*, float*, int)"),
        "{}",
        stdout(&valid)
    );
    let invalid = validate("tail");
    assert_eq!(invalid.status.code(), Some(1), "{}", stderr(&invalid));
    let report = stdout(&invalid);
    // 20000 elements: 79 blocks, the last element in block 78.
    assert!(report.contains("FAIL block_sum"), "{report}");
    assert!(report.contains("partial_sums"), "{report}");
    assert!(report.contains("Mismatched elements: 1 / 79"), "{report}");
    assert!(report.contains("at index (78,)"), "{report}");
}

#[test]
fn cross_lane_operations_give_what_the_isa_says_including_divergent_lanes() {
    let dir = tempfile::tempdir().unwrap();
    build(
        dir.path(),
        &[source("wave_ops.hip").to_str().unwrap(), "-o", "wave_ops"],
    );
    // The program holds the ISA's rules (computed on the host); the ballot
    // of the 32-lane wavefront has bits 0, 3, ..., 30; lane 70 (lane 6 of
    // wavefront 1) reads lane 5 of its own wavefront: work-item 69, 690.
    assert_runs(
        &dir.path().join("wave_ops"),
        &[],
        "wave_ops: 0 mismatches in 2304 checks; ballot of wavefront 1: 49249249; lane 70 reads 690\n",
    );
}

#[test]
fn cooperative_group_tiles_static_and_dynamic_reduce_right() {
    let dir = tempfile::tempdir().unwrap();
    build(
        dir.path(),
        &[source("tiles.hip").to_str().unwrap(), "-o", "tiles"],
    );
    assert_runs(
        &dir.path().join("tiles"),
        &[],
        "tiles: block -78, 16-tiles -78, 32-tiles -78, 0 wrong\n",
    );
}

const HALVES_OUTPUT: &str = "halves: 0 wrong of 512; 2048 + 1 + 1 + 1 in half = 2048; 1 - 1 = 0\n";

/// `__half2` operators and intrinsics, and `__half` operators that round
/// every step as the device pass's half instructions do.
#[test]
fn half_precision_arithmetic_rounds_each_step_to_half() {
    let dir = tempfile::tempdir().unwrap();
    build(
        dir.path(),
        &[source("halves.hip").to_str().unwrap(), "-o", "halves"],
    );
    assert_runs(&dir.path().join("halves"), &[], HALVES_OUTPUT);
}

#[test]
fn a_static_device_library_carries_its_host_build_through_ar_into_the_link() {
    let dir = tempfile::tempdir().unwrap();
    let lib_src = source("device_library/scale.hip");
    build(
        dir.path(),
        &[
            "-fgpu-rdc",
            "-c",
            lib_src.to_str().unwrap(),
            "-o",
            "scale.o",
        ],
    );
    // The object hipcc wrote carries the host build in a section of its own.
    let object = std::fs::read(dir.path().join("scale.o")).unwrap();
    assert!(
        object.windows(14).any(|w| w == b"ditto-host-obj"),
        "scale.o carries no host build"
    );
    let ar = Command::new("ar")
        .current_dir(dir.path())
        .args(["rcs", "libscale.a", "scale.o"])
        .status()
        .unwrap();
    assert!(ar.success());
    let include = source("device_library");
    build(
        dir.path(),
        &[
            "-fgpu-rdc",
            "-I",
            include.to_str().unwrap(),
            source("two_files_main.hip").to_str().unwrap(),
            "-L.",
            "-lscale",
            "-o",
            "two_files",
        ],
    );
    assert_runs(
        &dir.path().join("two_files"),
        &[],
        "two files: sum 3987.00 expected 3987.00 PASS\n",
    );
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// `--genco`: a code object the program loads with hipModuleLoad; its host
/// build (`offsets.co.host.so`) is found beside the program. The program's
/// own `__device__` variable is set through hipGetSymbolAddress. Without
/// the module's host build, the dispatch fails naming the kernel.
#[test]
fn a_module_built_with_genco_runs_and_a_symbol_address_reaches_the_kernel() {
    let dir = tempfile::tempdir().unwrap();
    let module = source("module/offsets.hip");
    build(
        dir.path(),
        &["--genco", module.to_str().unwrap(), "-o", "offsets.co"],
    );
    assert!(dir.path().join("offsets.co.host.so").is_file());
    build(
        dir.path(),
        &[
            source("module/module_main.hip").to_str().unwrap(),
            "-o",
            "module_main",
        ],
    );
    let program = dir.path().join("module_main");
    assert_runs(
        &program,
        &[],
        "module: 1000 values, 0 wrong; bias of 4 bytes set at its symbol address\n",
    );
    std::fs::remove_file(dir.path().join("offsets.co.host.so")).unwrap();
    let out = run(&program, &[]);
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("kernel `offset_by` has no host implementation"),
        "{}",
        stderr(&out)
    );
}

/// The program's globals are constructed and destroyed once: the host
/// build, which compiles the same source, keeps no static initializers.
#[test]
fn the_programs_own_globals_are_constructed_once() {
    let dir = tempfile::tempdir().unwrap();
    let src = write(
        dir.path(),
        "globals.hip",
        "#include <hip/hip_runtime.h>\n\
         #include <cstdio>\n\
         #include <vector>\n\
         struct Greeter {\n\
         \x20 Greeter() { printf(\"constructed\\n\"); fflush(stdout); }\n\
         \x20 ~Greeter() { printf(\"destroyed\\n\"); }\n\
         };\n\
         Greeter greeter;\n\
         std::vector<int> table(16, 3);\n\
         __global__ void fill(int* x) { x[threadIdx.x] = threadIdx.x * 16; }\n\
         int main() {\n\
         \x20 int* d; (void)hipMalloc(&d, 64 * sizeof(int));\n\
         \x20 fill<<<1, 64>>>(d);\n\
         \x20 int h[64]; (void)hipMemcpy(h, d, sizeof h, hipMemcpyDeviceToHost);\n\
         \x20 printf(\"h[63] = %d, table[0] = %d\\n\", h[63], table[0]);\n\
         \x20 return 0;\n\
         }\n",
    );
    build(dir.path(), &[src.to_str().unwrap(), "-o", "globals"]);
    assert_runs(
        &dir.path().join("globals"),
        &[],
        "constructed\nh[63] = 1008, table[0] = 3\ndestroyed\n",
    );
}

/// `make HIPCC="ditto hipcc"`: make exports HIPCC to the commands it runs,
/// so ditto sees its own command there and must still run the real hipcc.
#[test]
fn a_makefile_build_with_hipcc_set_to_ditto_hipcc_works() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(source("halves.hip"), dir.path().join("halves.hip")).unwrap();
    write(
        dir.path(),
        "Makefile",
        "halves: halves.hip\n\t$(HIPCC) --offload-arch=gfx90a -O2 halves.hip -o halves\n",
    );
    let mut make = Command::new("make");
    make.current_dir(dir.path())
        .arg(format!("HIPCC={} hipcc", ditto_bin().display()));
    let out = output_within(&mut make, LIMIT, "make HIPCC=\"ditto hipcc\"");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(dir.path().join("halves.host.so").is_file());
    assert_runs(&dir.path().join("halves"), &[], HALVES_OUTPUT);
}

/// Sources as found in public examples: an extern "C" kernel declared in a
/// namespace, a class's `constexpr` members the device pass emits as
/// read-only variables (private: no registration may name them), a
/// parameter named `blockIdx`, and std::string used with no include but
/// hip_runtime.h (clang's HIP wrapper brings it in under hipcc).
#[test]
fn namespaced_extern_c_kernels_private_constants_and_shadowed_ids_build() {
    let dir = tempfile::tempdir().unwrap();
    let src = write(
        dir.path(),
        "burn.hip",
        "#include <hip/hip_runtime.h>\n\
         namespace burn {\n\
         class Kernel {\n\
         \x20public:\n\
         \x20 int run(int* d);\n\
         \x20private:\n\
         \x20 static constexpr unsigned cBlock = 16;\n\
         };\n\
         constexpr unsigned Kernel::cBlock;\n\
         __device__ unsigned row_of(unsigned blockIdx, unsigned width) { return blockIdx * width; }\n\
         extern \"C\" __global__ void burn_kernel(int* d) {\n\
         \x20 d[row_of(blockIdx.x, blockDim.x) + threadIdx.x] = 3;\n\
         }\n\
         int Kernel::run(int* d) {\n\
         \x20 hipLaunchKernelGGL(burn_kernel, dim3(4), dim3(cBlock), 0, 0, d);\n\
         \x20 return cBlock;\n\
         }\n\
         }  // namespace burn\n\
         std::string label() { return \"burn\"; }\n\
         int main() {\n\
         \x20 int* d; (void)hipMalloc(&d, 64 * sizeof(int));\n\
         \x20 burn::Kernel k; k.run(d);\n\
         \x20 int h[64]; (void)hipMemcpy(h, d, sizeof h, hipMemcpyDeviceToHost);\n\
         \x20 int sum = 0; for (int v : h) sum += v;\n\
         \x20 printf(\"%s %d\\n\", label().c_str(), sum);\n\
         \x20 return 0;\n\
         }\n",
    );
    build(dir.path(), &[src.to_str().unwrap(), "-o", "burn"]);
    assert_runs(&dir.path().join("burn"), &[], "burn 192\n");
}

/// `hipcc --emit-static-lib`: a host library whose kernel and launcher are
/// in the archive; the program (a .cpp without kernels) only calls the
/// launcher.
#[test]
fn a_library_made_with_emit_static_lib_carries_its_host_build_into_the_program() {
    let dir = tempfile::tempdir().unwrap();
    let lib = write(
        dir.path(),
        "squares.hip",
        "#include <hip/hip_runtime.h>\n\
         __global__ void squares(int* out, int n) {\n\
         \x20 int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
         \x20 if (i < n) out[i] = i * i;\n\
         }\n\
         long long sum_of_squares(int n) {\n\
         \x20 int* d; (void)hipMalloc(&d, n * sizeof(int));\n\
         \x20 squares<<<(n + 63) / 64, 64>>>(d, n);\n\
         \x20 int* h = new int[n];\n\
         \x20 (void)hipMemcpy(h, d, n * sizeof(int), hipMemcpyDeviceToHost);\n\
         \x20 long long s = 0; for (int i = 0; i < n; ++i) s += h[i];\n\
         \x20 delete[] h; (void)hipFree(d); return s;\n\
         }\n",
    );
    build(
        dir.path(),
        &[
            "--emit-static-lib",
            "-fPIC",
            lib.to_str().unwrap(),
            "-o",
            "libsquares.a",
        ],
    );
    let members = Command::new("ar")
        .current_dir(dir.path())
        .args(["t", "libsquares.a"])
        .output()
        .unwrap();
    assert!(
        stdout(&members).contains("ditto-host-build-squares.o"),
        "{}",
        stdout(&members)
    );
    let main = write(
        dir.path(),
        "main.cpp",
        "#include <cstdio>\n\
         long long sum_of_squares(int n);\n\
         int main() { printf(\"%lld\\n\", sum_of_squares(1000)); return 0; }\n",
    );
    build(
        dir.path(),
        &[main.to_str().unwrap(), "-L.", "-lsquares", "-o", "squares"],
    );
    assert_runs(&dir.path().join("squares"), &[], "332833500\n");
}

#[test]
fn gcn_inline_assembly_under_the_device_pass_macros_fails_the_build_naming_kernel_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let src = write(
        dir.path(),
        "transpose.hip",
        "#include <hip/hip_runtime.h>\n\
         __global__ void transpose(float* out, const float* in) {\n\
         \x20 const int i = threadIdx.x;\n\
         #if defined(__gfx90a__)\n\
         \x20 asm volatile(\"v_mov_b32_e32 %0, %1\" : \"=v\"(out[i]) : \"v\"(in[i]));\n\
         #else\n\
         \x20 out[i] = in[i];\n\
         #endif\n\
         }\n\
         int main() { return 0; }\n",
    );
    let out = hipcc(dir.path(), &[src.to_str().unwrap(), "-o", "transpose"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("`transpose(float*, float const*)`"),
        "the kernel is not named: {err}"
    );
    assert!(
        err.contains("transpose.hip:5)"),
        "the line is not named: {err}"
    );
    assert!(err.contains("GCN inline assembly"), "{err}");
    assert!(err.contains("v_mov_b32_e32"), "{err}");
    // hipcc's own build is there; no host build that would compute else.
    assert!(dir.path().join("transpose").is_file());
    assert!(!dir.path().join("transpose.host.so").exists());
}

const GRID_SYNC_OUTPUT: &str = "cooperative: 110 groups, 0 with the wrong total\n\
    is_valid: ordinary launch 0 0, cooperative launch 1 1\n\
    a grid of 450560 groups: hipErrorCooperativeLaunchTooLarge\n";

#[test]
fn a_cooperative_launch_syncs_the_whole_grid() {
    let dir = tempfile::tempdir().unwrap();
    build(
        dir.path(),
        &[source("grid_sync.hip").to_str().unwrap(), "-o", "grid_sync"],
    );
    assert_runs(&dir.path().join("grid_sync"), &[], GRID_SYNC_OUTPUT);
}

#[test]
fn a_grid_wide_sync_outside_a_cooperative_launch_stops_the_program_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let src = write(
        dir.path(),
        "grid.hip",
        "#include <hip/hip_runtime.h>\n\
         #include <hip/hip_cooperative_groups.h>\n\
         __global__ void two_phases(int* x) {\n\
         \x20 x[blockIdx.x] = 1;\n\
         \x20 cooperative_groups::this_grid().sync();\n\
         \x20 x[blockIdx.x] += x[0];\n\
         }\n\
         int main() {\n\
         \x20 int* x; (void)hipMalloc(&x, 8 * sizeof(int));\n\
         \x20 two_phases<<<8, 64>>>(x);\n\
         \x20 (void)hipDeviceSynchronize();\n\
         \x20 return 0;\n\
         }\n",
    );
    build(dir.path(), &[src.to_str().unwrap(), "-o", "grid"]);
    let out = run(&dir.path().join("grid"), &[]);
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&out.status),
        Some(libc::SIGABRT),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains(
            "a grid-wide sync (cooperative_groups::grid_group::sync) in a kernel not launched \
             with hipLaunchCooperativeKernel"
        ),
        "{}",
        stderr(&out)
    );
}

#[test]
fn hipcc_s_own_failure_passes_through_with_its_exit_status() {
    let dir = tempfile::tempdir().unwrap();
    let src = write(
        dir.path(),
        "broken.hip",
        "int main() { return undeclared; }\n",
    );
    let out = hipcc(dir.path(), &[src.to_str().unwrap(), "-o", "broken"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("undeclared"), "{}", stderr(&out));
    assert!(!stderr(&out).contains("host build"), "{}", stderr(&out));
}

#[test]
fn the_programs_run_unmodified_on_hip_6_4_built_by_its_hipcc() {
    let chroot = repo_root().join("scripts/rocm-chroot");
    let versions = Command::new(&chroot)
        .args(["versions", "6.4"])
        .output()
        .unwrap();
    assert!(
        versions.status.success(),
        "the ROCm 6.4 chroot is missing: run `scripts/rocm-chroot create 6.4` as root \
         (scripts/install-deps does it): {}",
        stderr(&versions)
    );
    let dir = tempfile::tempdir().unwrap();
    let ditto = ditto_bin();
    let script = format!(
        "set -e; cd {dir}; \
         {ditto} hipcc --offload-arch=gfx90a -O2 {wr} -o warp_reduce; ./warp_reduce; \
         {ditto} hipcc --offload-arch=gfx90a -O2 {wo} -o wave_ops; ./wave_ops; \
         {ditto} hipcc --offload-arch=gfx90a -O2 {tiles} -o tiles; ./tiles; \
         {ditto} hipcc --offload-arch=gfx90a -O2 {grid} -o grid_sync; ./grid_sync; \
         {ditto} hipcc --offload-arch=gfx90a -O2 {halves} -o halves; ./halves; \
         {ditto} hipcc --offload-arch=gfx90a -O2 {vm} -o virtual_memory; ./virtual_memory; \
         {ditto} run --kernel fill_mapped --out snap -- ./virtual_memory",
        dir = dir.path().display(),
        ditto = ditto.display(),
        wr = source("warp_reduce.hip").display(),
        wo = source("wave_ops.hip").display(),
        tiles = source("tiles.hip").display(),
        grid = source("grid_sync.hip").display(),
        halves = source("halves.hip").display(),
        vm = source("virtual_memory.hip").display(),
    );
    let mut cmd = Command::new(&chroot);
    cmd.args(["run", "6.4", "--bind"]).arg(repo_root());
    let profile = profile_dir();
    if !profile.starts_with(repo_root()) {
        cmd.arg("--bind").arg(&profile);
    }
    cmd.arg("--bind-rw")
        .arg(dir.path())
        .arg("--env")
        .arg(format!("LD_LIBRARY_PATH={}", cpu_runtime_dir().display()))
        .args(["--env", "DITTO_HSA_CPU_ABI=6.4", "--", "sh", "-c"])
        .arg(&script);
    let out = output_within(&mut cmd, LIMIT, "ditto hipcc in the ROCm 6.4 chroot");
    let expected = format!(
        "block_sum: 100000 elements, wavefront of 64\ntotal -17.5 expected -17.5 PASS (timed)\n\
         wave_ops: 0 mismatches in 2304 checks; ballot of wavefront 1: 49249249; lane 70 reads 690\n\
         tiles: block -78, 16-tiles -78, 32-tiles -78, 0 wrong\n{GRID_SYNC_OUTPUT}{HALVES_OUTPUT}\
         {VIRTUAL_MEMORY_OUTPUT}{VIRTUAL_MEMORY_OUTPUT}"
    );
    assert_eq!(
        (out.status.code(), stdout(&out).as_str()),
        (Some(0), expected.as_str()),
        "stderr:\n{}",
        stderr(&out)
    );
    // HIP's hipMemMap output, captured: the tool knows the mapping from
    // its hsa_amd_vmem_map wrap and copies it out through the copy engine.
    let snap = dir.path().join("snap");
    let m = snapshot_manifest(&snap);
    let d = &m["dispatches"][0];
    assert_eq!(d["buffers"][0]["extent"], 4096, "{m}");
    let values = f32_tensor(&snap, d["file"].as_str().unwrap(), "arg0");
    assert_eq!(values.len(), 1024);
    assert_eq!((values[0], values[1023]), (5.0, 1028.0));
}

/// What tests/hip/as_written/virtual_memory.hip prints (HIP 6.4 and later:
/// HIP 5.2 has no virtual memory management).
const VIRTUAL_MEMORY_OUTPUT: &str = "virtual_memory: 0 wrong of 1024, last 1028\n";

#[test]
fn one_process_on_two_gpus_is_captured_from_each_gpu_s_own_memory() {
    let dir = tempfile::tempdir().unwrap();
    build(
        dir.path(),
        &[
            source("two_devices.hip").to_str().unwrap(),
            "-o",
            "two_devices",
        ],
    );
    let mut cmd = Command::new(ditto_bin());
    cmd.current_dir(dir.path())
        .env("DITTO_HSA_CPU_GPUS", "2")
        .env("DITTO_LOG", "debug")
        .args(["run", "--kernel", "fill_on_device", "--hsa-runtime", "cpu"])
        .args(["--out", "snap", "--", "./two_devices"]);
    let out = output_within(&mut cmd, LIMIT, "ditto run two_devices");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "two_devices: 0 wrong\n");
    // Each 2 MiB buffer goes by IPC, attached on the GPU that owns it (no
    // CPU read of either GPU's memory, in the application or the collector).
    let log = stderr(&out);
    let attached: Vec<&str> = attach_lines(&log, 0);
    assert_eq!(attached.len(), 2, "{log}");
    assert!(attached[0].ends_with("on the GPU of node 1"), "{log}");
    assert!(attached[1].ends_with("on the GPU of node 2"), "{log}");
    let snap = dir.path().join("snap");
    let m = snapshot_manifest(&snap);
    for (d, base) in m["dispatches"]
        .as_array()
        .unwrap()
        .iter()
        .zip([0.0f32, 1000.0])
    {
        assert_eq!(d["buffers"][0]["transport"], "ipc", "{d}");
        let values = f32_tensor(&snap, d["file"].as_str().unwrap(), "arg0");
        assert_eq!(values.len(), 1 << 19);
        for i in [0usize, 1, (1 << 19) - 1] {
            assert_eq!(values[i], base + i as f32, "{d}");
        }
    }
}

/// A kernel without a C++ signature that Triton compiled is typed from
/// Triton's cache (`TRITON_CACHE_DIR`), with no --arg-types: here the
/// module's `extern "C"` kernel `offset_by(int* out, int offset, int n)`,
/// with an entry written as Triton 3.x writes one for a ROCm target
/// (metadata, Triton IR, binary). Without the entry its buffer is raw
/// bytes, as for any extern "C" kernel.
#[test]
fn an_extern_c_kernel_triton_compiled_is_typed_from_triton_s_cache() {
    let dir = tempfile::tempdir().unwrap();
    build(
        dir.path(),
        &[
            "--genco",
            source("module/offsets.hip").to_str().unwrap(),
            "-o",
            "offsets.co",
        ],
    );
    build(
        dir.path(),
        &[
            source("module/module_main.hip").to_str().unwrap(),
            "-o",
            "module_main",
        ],
    );
    let cache = dir.path().join("triton-cache");
    let entry = cache.join("2b7c0e");
    std::fs::create_dir_all(&entry).unwrap();
    std::fs::write(
        entry.join("offset_by.json"),
        r#"{"hash": "2b7c0e", "target": {"backend": "hip", "arch": "gfx90a", "warp_size": 64}, "num_warps": 4, "triton_version": "3.6.0", "name": "offset_by"}"#,
    )
    .unwrap();
    std::fs::write(
        entry.join("offset_by.ttir"),
        "module {\n  tt.func public @offset_by(%out_ptr: !tt.ptr<i32> {tt.divisibility = 16 : i32} \
         loc(\"out_ptr\"(#loc)), %offset: i32 loc(\"offset\"(#loc)), %n: i32 loc(\"n\"(#loc))) \
         attributes {noinline = false} {\n\
         \x20   %v = tt.load %out_ptr : !tt.ptr<i32> loc(#loc1)\n\
         \x20   %w = arith.addi %v, %offset : i32 loc(#loc2)\n\
         \x20   tt.store %out_ptr, %w : !tt.ptr<i32> loc(#loc3)\n\
         \x20   tt.return loc(#loc4)\n  } loc(#loc)\n} loc(#loc)\n",
    )
    .unwrap();
    let capture = |cache: &Path, out: &str| {
        let out_dir = dir.path().join(out);
        let o = Command::new(ditto_bin())
            .current_dir(dir.path())
            .args([
                "run",
                "--hsa-runtime",
                "cpu",
                "--kernel",
                "offset_by",
                "--out",
            ])
            .arg(&out_dir)
            .arg("--")
            .arg(dir.path().join("module_main"))
            .env("TRITON_CACHE_DIR", cache)
            .env("NO_COLOR", "1")
            .output()
            .expect("run ditto");
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        (snapshot_manifest(&out_dir), stderr(&o))
    };
    // The entry written above, and the one the installed Triton writes
    // when it compiles the same kernel for gfx942.
    let real = real_triton_cache(dir.path(), "hip", "offset_by");
    for (cache, out) in [(cache, "typed"), (real, "real")] {
        let (m, se) = capture(&cache, out);
        let buffers = m["dispatches"][0]["buffers"].as_array().unwrap();
        assert_eq!(buffers.len(), 1, "{out}: {m}");
        assert_eq!(
            (
                &buffers[0]["arg"],
                &buffers[0]["dtype"],
                &buffers[0]["phase"]
            ),
            (
                &serde_json::json!(0),
                &serde_json::json!("int32"),
                &serde_json::json!("after")
            ),
            "{out}: {m}"
        );
        assert!(!se.contains("raw bytes"), "{out}: {se}");
    }
    // Without Triton's entry: raw bytes, and the warning saying what to pass.
    let (m, se) = capture(&dir.path().join("no-cache"), "untyped");
    assert_eq!(m["dispatches"][0]["buffers"][0]["dtype"], "bytes", "{m}");
    assert!(
        se.contains("raw bytes") && se.contains("--arg-types"),
        "{se}"
    );
}
