//! Several GPU agents (DITTO_HSA_CPU_GPUS, agents.rs): each GPU has its own
//! node, UUID and pools; memory of one GPU's pool is owned by that GPU in
//! pointer info, also through an IPC attachment; a peer GPU's pool is
//! DISALLOWED_BY_DEFAULT (what CLR reads as peer access possible), and a
//! kernel of another GPU reaches it only after hsa_amd_agents_allow_access; a code
//! object loaded for one GPU has symbols for that GPU only, and its kernels
//! run on that GPU's queues. The count is read once per process, so every
//! scenario runs in a child process.

use crate::common::*;
use hsa::*;
use hsa_runtime64 as rt;
use std::ffi::c_void;

fn gpus() -> Vec<hsa_agent_t> {
    agents()
        .into_iter()
        .filter(|a| device_type(*a) == HSA_DEVICE_TYPE_GPU)
        .collect()
}

fn info<T: Default>(agent: hsa_agent_t, attribute: u32) -> T {
    let mut v = T::default();
    // SAFETY: the attribute's type is T (the caller picks it from the header).
    let s = unsafe { rt::hsa_agent_get_info(agent, attribute, &mut v as *mut T as *mut c_void) };
    assert_eq!(s, 0, "attribute {attribute:#x}");
    v
}

fn owner(p: *const u8) -> (hsa_agent_t, u32) {
    let info = pointer_info(p);
    (info.agentOwner, info.type_)
}

fn child_gpu_count(value: &str) -> (usize, String) {
    let out = run_child(
        "gpus::child_scenario_print_gpu_count",
        &[("DITTO_HSA_CPU_GPUS", value.to_string())],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let count = stdout
        .lines()
        .find_map(|l| l.split_once("gpu agents: ").map(|(_, n)| n))
        .expect("the child prints its count")
        .trim()
        .parse()
        .unwrap();
    (count, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn the_gpu_count_comes_from_its_variable_and_a_bad_value_is_named() {
    assert_eq!(child_gpu_count("").0, 1, "unset or empty: one GPU");
    assert_eq!(child_gpu_count("4").0, 4);
    assert_eq!(child_gpu_count("8").0, 8);
    for bad in ["9", "0", "two"] {
        let (count, stderr) = child_gpu_count(bad);
        assert_eq!(count, 1, "{bad}");
        assert!(
            stderr.contains(&format!(
                "DITTO_HSA_CPU_GPUS=\"{bad}\" is not a GPU count from 1 to 8"
            )),
            "{bad}: {stderr}"
        );
    }
}

#[test]
#[ignore = "child scenario"]
fn child_scenario_print_gpu_count() {
    println!("gpu agents: {}", gpus().len());
}

#[test]
fn two_gpus_have_their_own_pools_memory_and_kernels() {
    run_child(
        "gpus::child_scenario_two_gpus",
        &[("DITTO_HSA_CPU_GPUS", "2".to_string())],
    );
}

#[test]
#[ignore = "child scenario"]
fn child_scenario_two_gpus() {
    init();
    let all = agents();
    assert_eq!(all.len(), 3, "the CPU agent and two GPUs");
    assert_eq!(device_type(all[0]), HSA_DEVICE_TYPE_CPU);
    let g = gpus();
    assert_eq!(g.len(), 2);
    let (g0, g1) = (g[0], g[1]);
    assert_ne!(g0, g1);
    let node = |a| info::<u32>(a, HSA_AGENT_INFO_NODE);
    assert_eq!((node(g0), node(g1)), (1, 2));
    let uuid = |a| String::from_utf8_lossy(&info::<[u8; 21]>(a, 0xA011)).into_owned();
    assert_ne!(uuid(g0), uuid(g1));
    let bdf = |a| info::<u32>(a, 0xA006);
    assert_ne!(bdf(g0), bdf(g1));
    let coarse = |a| pools(a)[0];
    let (p0, p1) = (coarse(g0), coarse(g1));
    assert_ne!(p0, p1);
    assert_eq!(pools(g1).len(), 2, "coarse-grained pool and group segment");

    // Peers: allowed once asked; the owner by default; the CPU never (a
    // discrete GPU's memory without a large BAR).
    assert_eq!(
        pool_access(g1, p1),
        HSA_AMD_MEMORY_POOL_ACCESS_ALLOWED_BY_DEFAULT
    );
    assert_eq!(
        pool_access(g0, p1),
        HSA_AMD_MEMORY_POOL_ACCESS_DISALLOWED_BY_DEFAULT
    );
    assert_eq!(
        pool_access(g1, p0),
        HSA_AMD_MEMORY_POOL_ACCESS_DISALLOWED_BY_DEFAULT
    );
    assert_eq!(
        pool_access(cpu(), p1),
        HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED
    );

    let mut buf = std::ptr::null_mut();
    // SAFETY: valid out pointer.
    assert_eq!(
        unsafe { rt::hsa_amd_memory_pool_allocate(p1, 4096, 0, &mut buf) },
        0
    );
    let buf = buf as *mut u32;
    assert_eq!(owner(buf as *const u8), (g1, HSA_EXT_POINTER_TYPE_HSA));
    // SAFETY: one valid agent, a live allocation.
    let allowed = unsafe { rt::hsa_amd_agents_allow_access(1, &g0, std::ptr::null(), buf as _) };
    assert_eq!(allowed, 0);

    // An IPC attachment reports the exporter's GPU, whichever agents map it.
    let mut handle = hsa_amd_ipc_memory_t::default();
    // SAFETY: the base of a live allocation and its size; valid out pointers.
    unsafe {
        assert_eq!(
            rt::hsa_amd_ipc_memory_create(buf as _, 4096, &mut handle),
            0
        );
        let mut mapped = std::ptr::null_mut();
        assert_eq!(
            rt::hsa_amd_ipc_memory_attach(&handle, 4096, 1, &g0, &mut mapped),
            0
        );
        assert_eq!(owner(mapped as *const u8), (g1, HSA_EXT_POINTER_TYPE_IPC));
        assert_eq!(rt::hsa_amd_ipc_memory_detach(mapped), 0);
        let bogus = hsa_agent_t {
            handle: g1.handle + 1,
        };
        let mut unused = std::ptr::null_mut();
        assert_eq!(
            rt::hsa_amd_ipc_memory_attach(&handle, 4096, 1, &bogus, &mut unused),
            HSA_STATUS_ERROR_INVALID_AGENT
        );
    }

    // A code object loaded for GPU 1 only: its symbol is GPU 1's, and its
    // kernel runs on GPU 1's queue into GPU 1's memory.
    let (exe, kernel_object) = fill_kernel_for(g1);
    let name = std::ffi::CString::new("_Z4fillPjj.kd").unwrap();
    let mut sym = hsa_executable_symbol_t::default();
    // SAFETY: plain API calls with valid out pointers.
    unsafe {
        assert_eq!(
            rt::hsa_executable_get_symbol_by_name(exe, name.as_ptr(), &g0, &mut sym),
            HSA_STATUS_ERROR_INVALID_SYMBOL_NAME,
            "not loaded for GPU 0"
        );
    }
    fill_on(g1, kernel_object, buf, 1000);
    let out = gpu_read_u32(buf, 1024);
    assert!(out.iter().enumerate().all(|(i, v)| *v == 1000 + i as u32));
    // SAFETY: the executable and allocation made above, idle.
    unsafe {
        rt::hsa_executable_destroy(exe);
        assert_eq!(rt::hsa_amd_memory_pool_free(buf as _), 0);
    }
}

/// The test code object loaded for `gpu` alone; its `fill` kernel object.
fn fill_kernel_for(gpu: hsa_agent_t) -> (hsa_executable_t, u64) {
    let dir = tempfile::tempdir().unwrap();
    let so = compile_shared(dir.path(), "kernels", KERNELS_C, &[]);
    let bytes = std::fs::read(so).unwrap();
    let name = std::ffi::CString::new("_Z4fillPjj.kd").unwrap();
    let exe = load_code_object_for(gpu, &bytes).expect("load for the GPU");
    let mut sym = hsa_executable_symbol_t::default();
    let mut kernel_object = 0u64;
    // SAFETY: plain API calls with valid out pointers.
    unsafe {
        assert_eq!(
            rt::hsa_executable_get_symbol_by_name(exe, name.as_ptr(), &gpu, &mut sym),
            0
        );
        assert_eq!(
            rt::hsa_executable_symbol_get_info(
                sym,
                HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT,
                &mut kernel_object as *mut u64 as *mut c_void
            ),
            0
        );
    }
    (exe, kernel_object)
}

/// `fill(out, value)` over 1024 work-items on a queue of `gpu`, waited for.
fn fill_on(gpu: hsa_agent_t, kernel_object: u64, out: *mut u32, value: u32) {
    let q = queue_on(gpu, 64, HSA_QUEUE_TYPE_MULTI);
    run_fill(q, kernel_object, out, 1024, value);
    // SAFETY: the queue made above, idle.
    assert_eq!(unsafe { rt::hsa_queue_destroy(q) }, 0);
}

#[test]
fn a_kernel_reaches_another_gpu_s_memory_only_once_access_is_allowed() {
    let two = [("DITTO_HSA_CPU_GPUS", "2".to_string())];
    run_child("gpus::child_scenario_peer_memory", &two);
    let mut never_allowed = two.to_vec();
    never_allowed.push(("DITTO_TEST_NO_ALLOW", "1".to_string()));
    if !crate::device_memory::keys_here() {
        return;
    }
    // GPU 1's kernel faults on GPU 0's memory never opened to it: a GPU's
    // memory access fault (the child's own SIGSEGV handler is not called:
    // the fault is the kernel's), reported as ROCr reports one.
    let out = child_command("gpus::child_scenario_peer_memory", &never_allowed)
        .output()
        .expect("spawn child test process");
    let stderr = String::from_utf8_lossy(&out.stderr);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{stderr}");
    assert!(
        stderr.contains(
            "Memory access fault by GPU node-2 (Agent handle: 0xd170a6e00012) on address"
        ) && stderr.contains("Reason: Page not present or supervisor privilege."),
        "{stderr}"
    );
}

#[test]
#[ignore = "child scenario"]
fn child_scenario_peer_memory() {
    init();
    let g = gpus();
    let (g0, g1) = (g[0], g[1]);
    let mut buf = std::ptr::null_mut();
    // SAFETY: a valid out pointer.
    assert_eq!(
        unsafe { rt::hsa_amd_memory_pool_allocate(pools(g0)[0], 4096, 0, &mut buf) },
        0
    );
    let buf = buf as *mut u32;
    let (_exe, kernel_object) = fill_kernel_for(g1);
    if std::env::var_os("DITTO_TEST_NO_ALLOW").is_some() {
        // The pages were opened to GPU 1 for an allocation since freed: the
        // new allocation in them is closed again.
        // SAFETY: one valid agent; the allocation made above, freed once.
        unsafe {
            assert_eq!(
                rt::hsa_amd_agents_allow_access(1, &g1, std::ptr::null(), buf as _),
                0
            );
            assert_eq!(rt::hsa_amd_memory_pool_free(buf as _), 0);
        }
        let mut again = std::ptr::null_mut();
        // SAFETY: a valid out pointer.
        assert_eq!(
            unsafe { rt::hsa_amd_memory_pool_allocate(pools(g0)[0], 4096, 0, &mut again) },
            0
        );
        assert_eq!(again as usize, buf as usize, "the same pages");
        crate::device_memory::exit_on_fault();
        fill_on(g1, kernel_object, buf, 7);
        println!("NO FAULT");
        return;
    }
    // SAFETY: one valid agent, a live allocation.
    assert_eq!(
        unsafe { rt::hsa_amd_agents_allow_access(1, &g1, std::ptr::null(), buf as _) },
        0
    );
    fill_on(g1, kernel_object, buf, 7);
    let out = gpu_read_u32(buf, 1024);
    assert!(out.iter().enumerate().all(|(i, v)| *v == 7 + i as u32));
}
