//! Shared helpers: runtime start-up, packet submission, C code objects.
#![allow(dead_code)]

use hsa::*;
use hsa_runtime64 as rt;
use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn init() {
    // SAFETY: hsa_init has no preconditions; the count stays > 0 for the test process.
    assert_eq!(unsafe { rt::hsa_init() }, HSA_STATUS_SUCCESS);
}

unsafe extern "C" fn collect_agent(agent: hsa_agent_t, data: *mut c_void) -> hsa_status_t {
    // SAFETY: data is the Vec passed by `agents`.
    unsafe { (*(data as *mut Vec<hsa_agent_t>)).push(agent) };
    HSA_STATUS_SUCCESS
}

pub fn agents() -> Vec<hsa_agent_t> {
    init();
    let mut v: Vec<hsa_agent_t> = Vec::new();
    // SAFETY: the callback pushes into v, alive for the call.
    assert_eq!(
        unsafe { rt::hsa_iterate_agents(Some(collect_agent), &mut v as *mut _ as *mut c_void) },
        0
    );
    v
}

pub fn device_type(agent: hsa_agent_t) -> u32 {
    let mut t = 99u32;
    // SAFETY: DEVICE is a uint32_t.
    assert_eq!(
        unsafe {
            rt::hsa_agent_get_info(
                agent,
                HSA_AGENT_INFO_DEVICE,
                &mut t as *mut u32 as *mut c_void,
            )
        },
        0
    );
    t
}

pub fn gpu() -> hsa_agent_t {
    agents()
        .into_iter()
        .find(|a| device_type(*a) == HSA_DEVICE_TYPE_GPU)
        .expect("a GPU-type agent")
}

pub fn cpu() -> hsa_agent_t {
    agents()
        .into_iter()
        .find(|a| device_type(*a) == HSA_DEVICE_TYPE_CPU)
        .expect("a CPU agent")
}

unsafe extern "C" fn collect_pool(pool: hsa_amd_memory_pool_t, data: *mut c_void) -> hsa_status_t {
    // SAFETY: data is the Vec passed by `pools`.
    unsafe { (*(data as *mut Vec<hsa_amd_memory_pool_t>)).push(pool) };
    HSA_STATUS_SUCCESS
}

pub fn pools(agent: hsa_agent_t) -> Vec<hsa_amd_memory_pool_t> {
    let mut v: Vec<hsa_amd_memory_pool_t> = Vec::new();
    // SAFETY: the callback pushes into v, alive for the call.
    let s = unsafe {
        rt::hsa_amd_agent_iterate_memory_pools(
            agent,
            Some(collect_pool),
            &mut v as *mut _ as *mut c_void,
        )
    };
    assert_eq!(s, 0);
    v
}

pub fn gpu_pool() -> hsa_amd_memory_pool_t {
    pools(gpu())[0]
}

pub fn alloc(size: usize) -> *mut u8 {
    let mut p = std::ptr::null_mut();
    // SAFETY: p is a valid out pointer.
    assert_eq!(
        unsafe { rt::hsa_amd_memory_pool_allocate(gpu_pool(), size, 0, &mut p) },
        0
    );
    p as *mut u8
}

/// `n` bytes of GPU memory at `p`, read as a discrete GPU's memory must
/// be: through the runtime's copy (a CPU load faults).
pub fn gpu_read(p: *const u8, n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    // SAFETY: p holds n bytes of runtime memory; out is a host buffer.
    let st = unsafe { rt::hsa_memory_copy(out.as_mut_ptr() as *mut c_void, p as *const c_void, n) };
    assert_eq!(st, HSA_STATUS_SUCCESS, "hsa_memory_copy from GPU memory");
    out
}

/// `n` u32 values of GPU memory at `p` (see [`gpu_read`]).
pub fn gpu_read_u32(p: *const u32, n: usize) -> Vec<u32> {
    gpu_read(p as *const u8, n * 4)
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Writes `bytes` into GPU memory at `p` through the runtime's copy.
pub fn gpu_write(p: *mut u8, bytes: &[u8]) {
    // SAFETY: p holds bytes.len() bytes of runtime memory.
    let st = unsafe {
        rt::hsa_memory_copy(
            p as *mut c_void,
            bytes.as_ptr() as *const c_void,
            bytes.len(),
        )
    };
    assert_eq!(st, HSA_STATUS_SUCCESS, "hsa_memory_copy into GPU memory");
}

/// `agent`'s HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS to `pool`.
pub fn pool_access(agent: hsa_agent_t, pool: hsa_amd_memory_pool_t) -> u32 {
    let mut v = 99u32;
    // SAFETY: ACCESS is an hsa_amd_memory_pool_access_t (u32).
    let s = unsafe {
        rt::hsa_amd_agent_memory_pool_get_info(
            agent,
            pool,
            HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS,
            &mut v as *mut u32 as *mut c_void,
        )
    };
    assert_eq!(s, 0);
    v
}

pub fn free(p: *mut u8) {
    // SAFETY: p came from alloc.
    assert_eq!(unsafe { rt::hsa_amd_memory_pool_free(p as *mut c_void) }, 0);
}

/// `hsa_amd_pointer_info` of `p` (no agent list), which must succeed.
pub fn pointer_info(p: *const u8) -> hsa_amd_pointer_info_t {
    let mut info = hsa_amd_pointer_info_t::default();
    // SAFETY: info.size is set by Default; no agent list is asked for.
    let st = unsafe {
        rt::hsa_amd_pointer_info(
            p as *const c_void,
            &mut info,
            None,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(st, HSA_STATUS_SUCCESS);
    info
}

pub fn signal(v: i64) -> hsa_signal_t {
    let mut s = hsa_signal_t::default();
    // SAFETY: s is a valid out pointer.
    assert_eq!(
        unsafe { rt::hsa_signal_create(v, 0, std::ptr::null(), &mut s) },
        0
    );
    s
}

pub fn load(s: hsa_signal_t) -> i64 {
    // SAFETY: any handle is accepted.
    unsafe { rt::hsa_signal_load_scacquire(s) }
}

pub fn store(s: hsa_signal_t, v: i64) {
    // SAFETY: any handle is accepted.
    unsafe { rt::hsa_signal_store_screlease(s, v) }
}

/// Waits up to 10 s for `s` to read `v`; returns the value seen.
pub fn wait_eq(s: hsa_signal_t, v: i64) -> i64 {
    // SAFETY: any handle is accepted.
    unsafe {
        rt::hsa_signal_wait_scacquire(
            s,
            HSA_SIGNAL_CONDITION_EQ,
            v,
            10_000_000_000,
            HSA_WAIT_STATE_BLOCKED,
        )
    }
}

pub fn queue(size: u32) -> *mut hsa_queue_t {
    queue_on(gpu(), size, HSA_QUEUE_TYPE_MULTI)
}

/// A queue of `type_` on `agent`.
pub fn queue_on(agent: hsa_agent_t, size: u32, type_: hsa_queue_type32_t) -> *mut hsa_queue_t {
    let mut q = std::ptr::null_mut();
    // SAFETY: q is a valid out pointer.
    let s = unsafe {
        rt::hsa_queue_create(
            agent,
            size,
            type_,
            None,
            std::ptr::null_mut(),
            u32::MAX,
            u32::MAX,
            &mut q,
        )
    };
    assert_eq!(s, 0);
    q
}

/// Writes packets as an application does: reserve, wait for room, publish,
/// ring the doorbell with the last index.
pub fn submit(q: *mut hsa_queue_t, packets: &[AqlPacket]) {
    // SAFETY: q is a live queue; slots are reserved through the write index.
    unsafe {
        let n = packets.len() as u64;
        let first = rt::hsa_queue_add_write_index_scacq_screl(q, n);
        let size = (*q).size as u64;
        for (i, p) in packets.iter().enumerate() {
            let index = first + i as u64;
            while index - rt::hsa_queue_load_read_index_scacquire(q) >= size {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            let slot = ((*q).base_address as *mut AqlPacket).add((index % size) as usize);
            packet::publish(slot, p);
        }
        rt::hsa_signal_store_screlease((*q).doorbell_signal, (first + n - 1) as i64);
    }
}

pub fn barrier_and(deps: &[hsa_signal_t], completion: hsa_signal_t) -> AqlPacket {
    let mut b = hsa_barrier_and_packet_t::default();
    b.header = packet::header(HSA_PACKET_TYPE_BARRIER_AND, true);
    b.dep_signal[..deps.len()].copy_from_slice(deps);
    b.completion_signal = completion;
    AqlPacket::from_barrier(&b)
}

pub fn barrier_or(deps: &[hsa_signal_t], completion: hsa_signal_t) -> AqlPacket {
    let mut p = barrier_and(deps, completion);
    p.set_header(packet::header(HSA_PACKET_TYPE_BARRIER_OR, true));
    p
}

pub fn dispatch(
    kernel_object: u64,
    kernarg: *mut c_void,
    grid: u32,
    completion: hsa_signal_t,
    barrier: bool,
) -> AqlPacket {
    let mut d = hsa_kernel_dispatch_packet_t::default();
    d.header = packet::header(HSA_PACKET_TYPE_KERNEL_DISPATCH, barrier);
    d.setup = 1;
    d.workgroup_size_x = 64;
    d.workgroup_size_y = 1;
    d.workgroup_size_z = 1;
    d.grid_size_x = grid;
    d.grid_size_y = 1;
    d.grid_size_z = 1;
    d.kernel_object = kernel_object;
    d.kernarg_address = kernarg;
    d.completion_signal = completion;
    AqlPacket::from_dispatch(&d)
}

pub fn include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include")
}

/// Compiles C source into a shared object with the system C compiler.
pub fn compile_shared(dir: &Path, name: &str, source: &str, defines: &[&str]) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    let out = dir.join(format!("lib{name}.so"));
    std::fs::write(&src, source).unwrap();
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&out)
        .arg(&src)
        .arg(format!("-I{}", include_dir().display()))
        .args(defines)
        .status()
        .expect("run cc (gcc must be installed)");
    assert!(status.success(), "cc failed for {name}");
    out
}

/// The test kernels: `record` appends its id to a log, `fill` writes
/// value+i to out[i] for every work-item, `fail` returns an error.
pub const KERNELS_C: &str = r#"
#include <stdint.h>
#include <string.h>
#include "ditto_hsa_cpu.h"
struct record_args { uint32_t* log; uint32_t* count; uint32_t id; };
static int record_entry(const ditto_cpu_dispatch_t* d) {
  struct record_args a; memcpy(&a, d->kernarg, sizeof a);
  uint32_t n = __atomic_load_n(a.count, __ATOMIC_SEQ_CST);
  a.log[n] = a.id;
  __atomic_store_n(a.count, n + 1, __ATOMIC_SEQ_CST);
  return 0;
}
struct fill_args { uint32_t* out; uint32_t value; };
static int fill_entry(const ditto_cpu_dispatch_t* d) {
  struct fill_args a; memcpy(&a, d->kernarg, sizeof a);
  /* 1-D: the work-items of groups [first_group, first_group + group_count). */
  uint64_t begin = d->first_group * d->workgroup_size[0];
  uint64_t end = (d->first_group + d->group_count) * d->workgroup_size[0];
  for (uint64_t i = begin; i < end && i < d->grid_size[0]; i++) a.out[i] = a.value + (uint32_t)i;
  return 0;
}
static int fail_entry(const ditto_cpu_dispatch_t* d) { (void)d; return 1; }
static const ditto_cpu_kernel_t kernels[] = {
  { "record", sizeof(struct record_args), 8, 0, 0, record_entry },
  { "_Z4fillPjj", sizeof(struct fill_args), 8, 256, 0, fill_entry },
  { "fail", 8, 8, 0, 0, fail_entry },
};
uint32_t ditto_cpu_code_object_abi = DITTO_CPU_CODE_OBJECT_ABI;
const ditto_cpu_kernel_t* ditto_cpu_code_object_kernels(uint32_t* count) {
  *count = sizeof kernels / sizeof kernels[0];
  return kernels;
}
"#;

pub struct LoadedKernels {
    pub executable: hsa_executable_t,
    pub _dir: tempfile::TempDir,
}

pub fn load_code_object(bytes: &[u8]) -> Result<hsa_executable_t, hsa_status_t> {
    load_code_object_for(gpu(), bytes)
}

/// Loads `bytes` into a new, frozen executable for `agent`.
pub fn load_code_object_for(
    agent: hsa_agent_t,
    bytes: &[u8],
) -> Result<hsa_executable_t, hsa_status_t> {
    // SAFETY: plain API calls with valid out pointers.
    unsafe {
        let mut reader = hsa_code_object_reader_t::default();
        let s = rt::hsa_code_object_reader_create_from_memory(
            bytes.as_ptr() as *const c_void,
            bytes.len(),
            &mut reader,
        );
        assert_eq!(s, 0);
        let mut exe = hsa_executable_t::default();
        assert_eq!(
            rt::hsa_executable_create_alt(
                HSA_PROFILE_FULL,
                HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT,
                std::ptr::null(),
                &mut exe
            ),
            0
        );
        let s = rt::hsa_executable_load_agent_code_object(
            exe,
            agent,
            reader,
            std::ptr::null(),
            std::ptr::null_mut(),
        );
        rt::hsa_code_object_reader_destroy(reader);
        if s != 0 {
            rt::hsa_executable_destroy(exe);
            return Err(s);
        }
        assert_eq!(rt::hsa_executable_freeze(exe, std::ptr::null()), 0);
        Ok(exe)
    }
}

pub fn test_kernels() -> LoadedKernels {
    init();
    let dir = tempfile::tempdir().unwrap();
    let so = compile_shared(dir.path(), "kernels", KERNELS_C, &[]);
    let bytes = std::fs::read(&so).unwrap();
    let executable = load_code_object(&bytes).expect("load the test code object");
    LoadedKernels {
        executable,
        _dir: dir,
    }
}

/// Dispatches the test kernels' `fill(out, value)` (`fill`: its kernel
/// object), which writes out[i] = value + i for i < n, on `q` and waits
/// for it.
pub fn run_fill(q: *mut hsa_queue_t, fill: u64, out: *mut u32, n: u32, value: u32) {
    // Kernel arguments are 16-byte aligned, as HSA asks.
    #[repr(C, align(16))]
    struct FillArgs {
        out: *mut u32,
        value: u32,
    }
    let args = FillArgs { out, value };
    let done = signal(1);
    submit(
        q,
        &[dispatch(
            fill,
            &args as *const FillArgs as *mut c_void,
            n,
            done,
            true,
        )],
    );
    assert_eq!(wait_eq(done, 0), 0);
}

pub fn symbol(exe: hsa_executable_t, name: &str) -> hsa_executable_symbol_t {
    let c = std::ffi::CString::new(name).unwrap();
    let mut sym = hsa_executable_symbol_t::default();
    let agent = gpu();
    // SAFETY: valid strings and out pointers.
    let s = unsafe { rt::hsa_executable_get_symbol_by_name(exe, c.as_ptr(), &agent, &mut sym) };
    assert_eq!(s, 0, "symbol {name}");
    sym
}

pub fn kernel_object(exe: hsa_executable_t, name: &str) -> u64 {
    let mut ko = 0u64;
    // SAFETY: KERNEL_OBJECT is a uint64_t.
    let s = unsafe {
        rt::hsa_executable_symbol_get_info(
            symbol(exe, name),
            HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT,
            &mut ko as *mut u64 as *mut c_void,
        )
    };
    assert_eq!(s, 0);
    ko
}

/// Kernarg block of the `record` kernel, plus its log.
#[repr(C)]
pub struct RecordArgs {
    pub log: *mut u32,
    pub count: *mut u32,
    pub id: u32,
}

pub struct RecordLog {
    pub log: Box<[u32; 1024]>,
    pub count: Box<u32>,
    pub args: Vec<Box<RecordArgs>>,
}

impl RecordLog {
    pub fn new() -> Self {
        RecordLog {
            log: Box::new([0; 1024]),
            count: Box::new(0),
            args: Vec::new(),
        }
    }
    /// Kernarg pointer for a `record` dispatch with this id.
    pub fn kernarg(&mut self, id: u32) -> *mut c_void {
        let a = Box::new(RecordArgs {
            log: self.log.as_mut_ptr(),
            count: &mut *self.count,
            id,
        });
        let p = &*a as *const RecordArgs as *mut c_void;
        self.args.push(a);
        p
    }
    pub fn entries(&self) -> Vec<u32> {
        // SAFETY: the kernels have finished (callers wait on a completion signal first).
        let n = unsafe { std::ptr::read_volatile(&*self.count) } as usize;
        self.log[..n].to_vec()
    }
}

/// This test binary, selecting one ignored child scenario, with `envs`.
pub fn child_command(scenario: &str, envs: &[(&str, String)]) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--ignored",
        "--exact",
        scenario,
        "--nocapture",
        "--test-threads=1",
    ]);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd
}

/// Re-runs this test binary selecting one ignored child scenario; it must pass.
pub fn run_child(scenario: &str, envs: &[(&str, String)]) -> std::process::Output {
    let out = child_command(scenario, envs)
        .output()
        .expect("spawn child test process");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child scenario {scenario} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The built shared library (cargo test builds it next to the test binary).
pub fn built_library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    for candidate in [
        deps.join("../libhsa_runtime64.so"),
        deps.join("libhsa_runtime64.so"),
    ] {
        if candidate.exists() {
            return candidate;
        }
    }
    panic!(
        "libhsa_runtime64.so not found next to {}: run `cargo build -p hsa-cpu` first",
        deps.display()
    );
}
