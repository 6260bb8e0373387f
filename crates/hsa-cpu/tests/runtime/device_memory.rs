//! A GPU pool's memory as a discrete GPU's: CPU threads fault on it (the
//! protection key), system calls given it fail with EFAULT, the runtime's
//! kernels and copies reach it, IPC attachments in another process are as
//! unreachable, and the large-BAR mode opens it and says so.

use crate::common::*;
use crate::ipc::{hex, unhex};
use hsa::*;
use hsa_runtime64 as rt;
use hsa_runtime64::memory::device_access::{self, Protection};
use std::ffi::c_void;

/// The child's exit code when its CPU access faulted with `si_code`.
pub(crate) const FAULT_EXIT_BASE: i32 = 40;
pub(crate) const SEGV_PKUERR: i32 = 4;

extern "C" fn exit_with_fault_code(_sig: i32, info: *mut libc::siginfo_t, _ctx: *mut c_void) {
    // SAFETY: the kernel hands a valid siginfo to an SA_SIGINFO handler;
    // _exit is async-signal-safe.
    unsafe { libc::_exit(FAULT_EXIT_BASE + (*info).si_code) };
}

/// Makes a SIGSEGV end this process with FAULT_EXIT_BASE + si_code.
pub(crate) fn exit_on_fault() {
    // SAFETY: installing a handler that only calls _exit.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = exit_with_fault_code as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO;
        libc::sigaction(libc::SIGSEGV, &action, std::ptr::null_mut());
    }
}

/// Runs a child scenario that is expected to fault; its exit code.
pub(crate) fn faulting_child(scenario: &str, envs: &[(&str, String)]) -> (Option<i32>, String) {
    let out = child_command(scenario, envs)
        .output()
        .expect("spawn child test process");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// Whether GPU memory is protected here, so that a CPU access faults. The
/// model needs protection keys: on a CPU that has them, their absence
/// fails the test saying why; on a CPU without them (no `pku` flag) the
/// fault cannot happen on this machine, so the test checks instead that
/// the runtime says GPU memory is unprotected and why, notes on stderr
/// that the fault itself was not checked here, and returns false.
pub(crate) fn keys_here() -> bool {
    match device_access::protection() {
        Protection::Keys => true,
        Protection::Unavailable(why) if !crate::cpu_features::cpu_has_protection_keys() => {
            assert!(why.contains("pkey_alloc"), "{why}");
            eprintln!(
                "NOT CHECKED on this machine: its CPU has no protection keys (no `pku` flag), so \
                 a CPU access to GPU memory cannot fault here; checked instead that the runtime \
                 says so: {why}"
            );
            false
        }
        other => panic!("GPU memory is not protected in this process: {other:?}"),
    }
}

#[test]
fn a_cpu_load_of_gpu_memory_faults_with_a_protection_key_error() {
    init();
    if !keys_here() {
        return;
    }
    let (code, text) = faulting_child("device_memory::child_scenario_cpu_load_of_gpu_memory", &[]);
    assert_eq!(
        code,
        Some(FAULT_EXIT_BASE + SEGV_PKUERR),
        "the load faults with SEGV_PKUERR:\n{text}"
    );
}

#[test]
#[ignore = "child scenario"]
fn child_scenario_cpu_load_of_gpu_memory() {
    exit_on_fault();
    init();
    let p = alloc(4096);
    // SAFETY: deliberately a CPU load of GPU memory: it must fault.
    let v = unsafe { std::ptr::read_volatile(p) };
    println!("NO FAULT: read {v}");
}

#[test]
fn a_system_call_given_gpu_memory_fails_with_efault_and_the_runtime_copies_reach_it() {
    init();
    if !keys_here() {
        return;
    }
    let p = alloc(8192);
    gpu_write(p, &[0xab; 8192]);
    let file = tempfile::tempfile().unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: write(2) reads 8192 bytes at p: the kernel refuses them.
    let n = unsafe { libc::write(file.as_raw_fd(), p as *const c_void, 8192) };
    let e = std::io::Error::last_os_error();
    assert_eq!(n, -1, "the write must not read GPU memory");
    assert_eq!(e.raw_os_error(), Some(libc::EFAULT), "{e}");
    assert_eq!(gpu_read(p, 8192), vec![0xab; 8192], "copies reach it");
    assert!(
        !device_access::open_on_this_thread(),
        "a copy leaves the caller's rights as they were"
    );
    free(p);
}

#[test]
fn the_cpu_agent_is_never_allowed_a_gpu_pool() {
    init();
    assert_eq!(
        pool_access(cpu(), gpu_pool()),
        HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED
    );
}

#[test]
fn an_ipc_attachment_of_gpu_memory_faults_in_the_importer_too() {
    init();
    if !keys_here() {
        return;
    }
    let p = alloc(4096);
    gpu_write(p, &[7; 4096]);
    let mut h = hsa_amd_ipc_memory_t::default();
    // SAFETY: p is a live 4096-byte allocation.
    assert_eq!(
        unsafe { rt::hsa_amd_ipc_memory_create(p as *mut c_void, 4096, &mut h) },
        0
    );
    let (code, text) = faulting_child(
        "device_memory::child_scenario_cpu_load_of_an_attachment",
        &[("DITTO_TEST_IPC_HANDLE", hex(&h))],
    );
    assert_eq!(
        code,
        Some(FAULT_EXIT_BASE + SEGV_PKUERR),
        "the importer's load faults with SEGV_PKUERR:\n{text}"
    );
    free(p);
}

#[test]
#[ignore = "child scenario"]
fn child_scenario_cpu_load_of_an_attachment() {
    let h = unhex(&std::env::var("DITTO_TEST_IPC_HANDLE").unwrap());
    init();
    let mut mapped = std::ptr::null_mut();
    // SAFETY: valid pointers.
    let st = unsafe { rt::hsa_amd_ipc_memory_attach(&h, 4096, 0, std::ptr::null(), &mut mapped) };
    assert_eq!(st, 0, "attach");
    let mapped = mapped as *mut u8;
    assert_eq!(gpu_read(mapped, 4096), vec![7; 4096], "the copy reads it");
    exit_on_fault();
    // SAFETY: deliberately a CPU load of an attachment of GPU memory.
    let v = unsafe { std::ptr::read_volatile(mapped) };
    println!("NO FAULT: read {v}");
}

#[test]
fn large_bar_mode_opens_gpu_memory_to_the_cpu_and_says_so() {
    run_child(
        "device_memory::child_scenario_large_bar",
        &[(device_access::LARGE_BAR_ENV, "1".into())],
    );
}

#[test]
#[ignore = "child scenario"]
fn child_scenario_large_bar() {
    init();
    assert_eq!(device_access::protection(), &Protection::LargeBar);
    assert_eq!(
        pool_access(cpu(), gpu_pool()),
        HSA_AMD_MEMORY_POOL_ACCESS_DISALLOWED_BY_DEFAULT
    );
    let p = alloc(4096);
    // SAFETY: large BAR: GPU memory is host-accessible.
    unsafe {
        p.write_volatile(9);
        assert_eq!(p.read_volatile(), 9);
    }
    free(p);
}

/// `n` bytes at `src` copied to the host by an SDMA engine.
fn sdma_read(src: *const u8, n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    let done = signal(1);
    // SAFETY: src holds n bytes of GPU memory; out is a host buffer of n bytes
    // that lives until `done` reads 0.
    let st = unsafe {
        rt::hsa_amd_memory_async_copy(
            out.as_mut_ptr() as *mut c_void,
            cpu(),
            src as *const c_void,
            gpu(),
            n,
            0,
            std::ptr::null(),
            done,
        )
    };
    assert_eq!(st, HSA_STATUS_SUCCESS);
    assert_eq!(wait_eq(done, 0), 0);
    out
}

#[test]
fn an_agent_scope_release_is_seen_by_kernels_and_blits_and_by_sdma_only_after_a_system_release() {
    let k = test_kernels();
    let fill = kernel_object(k.executable, "_Z4fillPjj.kd");
    let n = 1000usize;
    let out = alloc(n * 4);
    gpu_write(out, &vec![0u8; n * 4]);
    // The arguments in device memory too: the command processor reads them
    // there (as CLR places them on a large-BAR system).
    let kernarg = alloc(16);
    let mut args = (out as u64).to_le_bytes().to_vec();
    args.extend_from_slice(&100u32.to_le_bytes());
    args.extend_from_slice(&[0; 4]);
    gpu_write(kernarg, &args);
    let q = queue(64);
    let done = signal(1);
    let mut packet = dispatch(fill, kernarg as *mut c_void, n as u32, done, true);
    let agent_scope = (HSA_PACKET_TYPE_KERNEL_DISPATCH << HSA_PACKET_HEADER_TYPE)
        | (1 << HSA_PACKET_HEADER_BARRIER)
        | (HSA_FENCE_SCOPE_AGENT << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE)
        | (HSA_FENCE_SCOPE_AGENT << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE);
    packet.0[..2].copy_from_slice(&agent_scope.to_le_bytes());
    submit(q, &[packet]);
    assert_eq!(wait_eq(done, 0), 0);
    let written: Vec<u32> = (0..n as u32).map(|i| 100 + i).collect();
    assert_eq!(
        gpu_read_u32(out as *const u32, n),
        written,
        "a blit sees the kernel's writes"
    );
    assert_eq!(
        sdma_read(out, n * 4),
        vec![0u8; n * 4],
        "an SDMA copy sees the bytes from before the dispatch"
    );
    let released = signal(1);
    submit(q, &[barrier_and(&[], released)]);
    assert_eq!(wait_eq(released, 0), 0);
    let seen = sdma_read(out, n * 4);
    let seen: Vec<u32> = seen
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(
        seen, written,
        "after the SYSTEM-scope barrier, SDMA sees them too"
    );
    // SAFETY: q is live and idle.
    unsafe { rt::hsa_queue_destroy(q) };
    free(kernarg);
    free(out);
}
