//! Pools, fragments, pointer info, locking and copies.

use crate::common::*;
use hsa::*;
use hsa_runtime64 as rt;
use hsa_runtime64::memory::ipc::IpcHandle;
use std::ffi::c_void;
use std::time::Duration;

fn handle_of(p: *mut u8, size: usize) -> IpcHandle {
    let mut h = hsa_amd_ipc_memory_t::default();
    // SAFETY: valid out pointer.
    assert_eq!(
        unsafe { rt::hsa_amd_ipc_memory_create(p as *mut c_void, size, &mut h) },
        0
    );
    IpcHandle::decode(&h)
}

#[test]
fn small_allocations_share_one_2mib_memfd_block() {
    init();
    let a = alloc(1000);
    let b = alloc(5000);
    let (ha, hb) = (handle_of(a, 1000), handle_of(b, 5000));
    assert_eq!((ha.fd, ha.inode), (hb.fd, hb.inode), "same memfd");
    assert_ne!(ha.offset, hb.offset);
    assert_eq!(ha.offset % 4096, 0);
    assert_eq!(hb.offset % 4096, 0);
    assert_eq!(
        b as usize - a as usize,
        (hb.offset - ha.offset) as usize,
        "page offsets match the mapping"
    );
    let target = std::fs::read_link(format!("/proc/self/fd/{}", ha.fd)).unwrap();
    assert!(
        target.to_string_lossy().contains("memfd:hsa-cpu-pool"),
        "{target:?}"
    );
    let size = std::fs::metadata(format!("/proc/self/fd/{}", ha.fd))
        .unwrap()
        .len();
    assert_eq!(
        size,
        2 * (2 << 20) + 4096,
        "a 2 MiB block, its metadata page and its (sparse) shadow"
    );
    let big = alloc(3 << 20);
    let hbig = handle_of(big, 3 << 20);
    assert_ne!(hbig.fd, ha.fd, "large allocations get their own memfd");
    assert_eq!(hbig.offset, 0);
    free(a);
    free(b);
    free(big);
}

#[test]
fn pointer_info_resolves_interior_pointers_to_their_allocation() {
    init();
    let p = alloc(10_000);
    let mut info = hsa_amd_pointer_info_t::default();
    let mut n = 0u32;
    // SAFETY: info.size is set by Default; out pointers valid.
    let s = unsafe {
        rt::hsa_amd_pointer_info(
            p.add(4321) as *const c_void,
            &mut info,
            None,
            &mut n,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(s, 0);
    assert_eq!(info.type_, HSA_EXT_POINTER_TYPE_HSA);
    assert_eq!(info.agentBaseAddress as usize, p as usize);
    assert_eq!(info.hostBaseAddress as usize, p as usize);
    assert_eq!(
        info.sizeInBytes, 10_000,
        "the size requested, not the pages"
    );
    assert_eq!(info.agentOwner, gpu());
    assert_eq!(n, 2);
    // One past the end is not inside.
    let mut outside = hsa_amd_pointer_info_t::default();
    // SAFETY: as above.
    unsafe {
        rt::hsa_amd_pointer_info(
            p.add(10_000) as *const c_void,
            &mut outside,
            None,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    assert_ne!(outside.agentBaseAddress as usize, p as usize);
    free(p);
}

#[test]
fn pointer_info_reports_unknown_for_foreign_pointers_and_honours_info_size() {
    init();
    let local = [0u8; 16];
    let mut info = hsa_amd_pointer_info_t::default();
    info.sizeInBytes = 77;
    // SAFETY: valid pointers.
    assert_eq!(
        unsafe {
            rt::hsa_amd_pointer_info(
                local.as_ptr() as *const c_void,
                &mut info,
                None,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        },
        0
    );
    assert_eq!(info.type_, HSA_EXT_POINTER_TYPE_UNKNOWN);
    assert_eq!(info.sizeInBytes, 0);
    // A caller that only knows the first 8 bytes (size + type) gets only those.
    let p = alloc(64);
    let mut short = hsa_amd_pointer_info_t::default();
    short.size = 8;
    short.sizeInBytes = 12345;
    // SAFETY: valid pointers; the runtime writes at most 8 bytes.
    unsafe {
        rt::hsa_amd_pointer_info(
            p as *const c_void,
            &mut short,
            None,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(short.type_, HSA_EXT_POINTER_TYPE_HSA);
    assert_eq!(
        short.sizeInBytes, 12345,
        "bytes past info.size are untouched"
    );
    assert_eq!(short.size, 8);
    free(p);
}

#[test]
fn locked_host_memory_is_its_own_agent_address() {
    init();
    let mut host = vec![0u8; 8192];
    let mut agent = gpu();
    let mut agent_ptr = std::ptr::null_mut();
    // SAFETY: host lives for the test.
    unsafe {
        assert_eq!(
            rt::hsa_amd_memory_lock(
                host.as_mut_ptr() as *mut c_void,
                8192,
                &mut agent,
                1,
                &mut agent_ptr
            ),
            0
        );
        assert_eq!(agent_ptr as usize, host.as_ptr() as usize);
        let info = pointer_info(host.as_ptr().add(100));
        assert_eq!(info.type_, HSA_EXT_POINTER_TYPE_LOCKED);
        assert_eq!(info.sizeInBytes, 8192);
        assert_eq!(
            rt::hsa_amd_memory_unlock(host.as_mut_ptr() as *mut c_void),
            0
        );
        let after = pointer_info(host.as_ptr());
        assert_eq!(after.type_, HSA_EXT_POINTER_TYPE_UNKNOWN);
    }
}

#[test]
fn async_copy_waits_for_dependencies_then_decrements_completion() {
    init();
    let src: Vec<u8> = (0..255).collect();
    let dst = alloc(255);
    let dep = signal(1);
    let done = signal(1);
    // SAFETY: src and dst hold 255 bytes until `done` reads 0.
    unsafe {
        let s = rt::hsa_amd_memory_async_copy(
            dst as *mut c_void,
            gpu(),
            src.as_ptr() as *const c_void,
            cpu(),
            255,
            1,
            &dep,
            done,
        );
        assert_eq!(s, 0);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(load(done), 1, "held by the dependency");
        store(dep, 0);
        assert_eq!(wait_eq(done, 0), 0);
        assert_eq!(gpu_read(dst, 255), src);
    }
    free(dst);
}

#[test]
fn pools_describe_themselves_like_rocr() {
    init();
    let gpu_pools = pools(gpu());
    let cpu_pools = pools(cpu());
    // As ROCr: the GPU agent has its coarse pool and its group segment; the
    // CPU agent fine-grained, kernarg and coarse-grained system memory (the
    // real HIP runtime fails device creation without the group segment).
    assert_eq!((gpu_pools.len(), cpu_pools.len()), (2, 3));
    let flags = |p| {
        let mut f = 0u32;
        // SAFETY: GLOBAL_FLAGS is a uint32_t.
        unsafe {
            rt::hsa_amd_memory_pool_get_info(
                p,
                HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS,
                &mut f as *mut u32 as *mut c_void,
            )
        };
        f
    };
    assert_eq!(
        flags(gpu_pools[0]),
        HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED
    );
    assert_eq!(
        flags(cpu_pools[0]),
        HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED
    );
    assert_eq!(
        flags(cpu_pools[1]),
        HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT | HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED
    );
    assert_eq!(
        flags(cpu_pools[2]),
        HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED
    );
    let (mut segment, mut group_size, mut allowed) = (0u32, 0usize, true);
    let mut refused: *mut c_void = std::ptr::null_mut();
    // SAFETY: SEGMENT is a uint32_t enum, SIZE a size_t, ALLOWED a bool.
    unsafe {
        rt::hsa_amd_memory_pool_get_info(
            gpu_pools[1],
            HSA_AMD_MEMORY_POOL_INFO_SEGMENT,
            &mut segment as *mut u32 as *mut c_void,
        );
        rt::hsa_amd_memory_pool_get_info(
            gpu_pools[1],
            HSA_AMD_MEMORY_POOL_INFO_SIZE,
            &mut group_size as *mut usize as *mut c_void,
        );
        rt::hsa_amd_memory_pool_get_info(
            gpu_pools[1],
            HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED,
            &mut allowed as *mut bool as *mut c_void,
        );
        assert_eq!(
            rt::hsa_amd_memory_pool_allocate(gpu_pools[1], 64, 0, &mut refused),
            HSA_STATUS_ERROR_INVALID_ALLOCATION
        );
    }
    assert_eq!(
        (segment, group_size, allowed),
        (HSA_AMD_SEGMENT_GROUP, 64 << 10, false)
    );
    let mut granule = 0usize;
    // SAFETY: GRANULE is a size_t.
    unsafe {
        rt::hsa_amd_memory_pool_get_info(
            gpu_pools[0],
            HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_GRANULE,
            &mut granule as *mut usize as *mut c_void,
        );
    }
    assert_eq!(granule, 4096);
    assert_eq!(
        pool_access(cpu(), gpu_pools[0]),
        HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED,
        "a discrete GPU's memory, without a large BAR"
    );
}

#[test]
fn agents_allow_access_accepts_pool_and_locked_memory_only() {
    init();
    let p = alloc(5000);
    let agents = [gpu(), cpu()];
    let mut host = vec![0u8; 256];
    let mut agent_ptr = std::ptr::null_mut();
    let foreign = [0u8; 16];
    // SAFETY: valid pointers and counts throughout.
    unsafe {
        let allow = |n: u32, list: *const hsa_agent_t, ptr: *const u8| {
            rt::hsa_amd_agents_allow_access(n, list, std::ptr::null(), ptr as *const c_void)
        };
        assert_eq!(allow(2, agents.as_ptr(), p), 0);
        assert_eq!(
            allow(1, agents.as_ptr(), p.add(4999)),
            0,
            "interior pointer"
        );
        assert_eq!(
            allow(2, agents.as_ptr(), foreign.as_ptr()),
            HSA_STATUS_ERROR_INVALID_ARGUMENT,
            "not runtime memory"
        );
        assert_eq!(
            allow(0, agents.as_ptr(), p),
            HSA_STATUS_ERROR_INVALID_ARGUMENT
        );
        let bogus = [hsa_agent_t { handle: 42 }];
        assert_eq!(allow(1, bogus.as_ptr(), p), HSA_STATUS_ERROR_INVALID_AGENT);
        assert_eq!(
            rt::hsa_amd_memory_lock(
                host.as_mut_ptr() as *mut c_void,
                host.len(),
                std::ptr::null_mut(),
                0,
                &mut agent_ptr
            ),
            0
        );
        assert_eq!(
            allow(1, agents.as_ptr(), host.as_ptr().add(10)),
            0,
            "locked"
        );
        assert_eq!(
            rt::hsa_amd_memory_unlock(host.as_mut_ptr() as *mut c_void),
            0
        );
        assert_eq!(
            allow(1, agents.as_ptr(), host.as_ptr()),
            HSA_STATUS_ERROR_INVALID_ARGUMENT,
            "unlocked again"
        );
    }
    free(p);
}
