//! Virtual memory (`hsa_amd_vmem_*`): a handle of a GPU pool mapped into a
//! reserved range is reached by no agent until set_access, then by the
//! runtime's kernels and copies and never by a CPU thread (the GPU memory
//! key); pointer info describes mapped and reserved addresses as ROCr
//! does; a mapping keeps its handle alive; shareable handles carry the
//! memory into another process. A reservation lands at the requested
//! address when it is free, elsewhere (with SUCCESS) when it is not, and
//! refuses bad sizes with ROCr's codes: what replay's restore at the
//! original addresses meets on ROCr.

use crate::common::*;
use crate::device_memory::{FAULT_EXIT_BASE, SEGV_PKUERR, exit_on_fault, faulting_child};
use hsa::*;
use hsa_runtime64 as rt;
use std::ffi::c_void;

const MIB: usize = 1 << 20;

fn reserve(size: usize, alignment: u64) -> *mut u8 {
    let mut va = std::ptr::null_mut();
    // SAFETY: a valid out pointer.
    let st = unsafe { rt::hsa_amd_vmem_address_reserve_align(&mut va, size, 0, alignment, 0) };
    assert_eq!(st, HSA_STATUS_SUCCESS, "reserve");
    va as *mut u8
}

/// `hsa_amd_vmem_address_reserve_align` at `address`: its status and the
/// address it gave.
fn reserve_at(size: usize, address: usize, alignment: u64) -> (hsa_status_t, usize) {
    let mut va = std::ptr::null_mut();
    // SAFETY: a valid out pointer.
    let st = unsafe {
        rt::hsa_amd_vmem_address_reserve_align(&mut va, size, address as u64, alignment, 0)
    };
    (st, va as usize)
}

fn free_reservation(va: usize, size: usize) {
    // SAFETY: plain arguments: a reservation of ours.
    let st = unsafe { rt::hsa_amd_vmem_address_free(va as *mut c_void, size) };
    assert_eq!(st, HSA_STATUS_SUCCESS, "address free");
}

fn create(size: usize) -> hsa_amd_vmem_alloc_handle_t {
    let mut h = hsa_amd_vmem_alloc_handle_t::default();
    // SAFETY: a valid out pointer.
    let st =
        unsafe { rt::hsa_amd_vmem_handle_create(gpu_pool(), size, MEMORY_TYPE_NONE, 0, &mut h) };
    assert_eq!(st, HSA_STATUS_SUCCESS, "handle create");
    h
}

fn map(va: *mut u8, size: usize, h: hsa_amd_vmem_alloc_handle_t) -> hsa_status_t {
    // SAFETY: plain arguments.
    unsafe { rt::hsa_amd_vmem_map(va as *mut c_void, size, 0, h, 0) }
}

fn grant(va: *mut u8, size: usize, agent: hsa_agent_t, permissions: u32) -> hsa_status_t {
    let desc = hsa_amd_memory_access_desc_t {
        permissions,
        agent_handle: agent,
    };
    // SAFETY: one descriptor.
    unsafe { rt::hsa_amd_vmem_set_access(va as *mut c_void, size, &desc, 1) }
}

fn access_of(va: *mut u8, agent: hsa_agent_t) -> u32 {
    let mut p = 99u32;
    // SAFETY: a valid out pointer.
    assert_eq!(
        unsafe { rt::hsa_amd_vmem_get_access(va as *mut c_void, &mut p, agent) },
        HSA_STATUS_SUCCESS
    );
    p
}

/// The inode of handle `h`'s memfd.
fn inode_of(h: hsa_amd_vmem_alloc_handle_t) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut fd = -1;
    // SAFETY: a valid out pointer.
    assert_eq!(
        unsafe { rt::hsa_amd_vmem_export_shareable_handle(&mut fd, h, 0) },
        0
    );
    let inode = std::fs::metadata(format!("/proc/self/fd/{fd}"))
        .unwrap()
        .ino();
    // SAFETY: the duplicate just exported.
    unsafe { libc::close(fd) };
    inode
}

/// Descriptors and mappings of this process holding the file `inode`.
fn holders_of(inode: u64) -> usize {
    use std::os::unix::fs::MetadataExt;
    let fds = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter(|e| std::fs::metadata(e.as_ref().unwrap().path()).is_ok_and(|m| m.ino() == inode))
        .count();
    let maps = std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.split_whitespace().nth(4) == Some(&inode.to_string()))
        .count();
    fds + maps
}

#[test]
fn a_mapped_handle_is_reached_by_kernels_and_copies_after_set_access_and_described_as_rocr_does() {
    init();
    let va = reserve(4 * MIB, 2 * MIB as u64);
    assert_eq!(va as usize % (2 * MIB), 0, "aligned as asked");
    let h = create(2 * MIB);
    let mapped = unsafe { va.add(2 * MIB) };
    assert_eq!(
        map(mapped, MIB, h),
        HSA_STATUS_ERROR_INVALID_ARGUMENT,
        "a handle maps whole"
    );
    assert_eq!(map(mapped, 2 * MIB, h), HSA_STATUS_SUCCESS);
    assert_eq!(
        access_of(mapped, gpu()),
        HSA_ACCESS_PERMISSION_NONE,
        "no agent yet"
    );

    // Pointer info: ROCr gives a mapped address itself as the base.
    let interior = unsafe { mapped.add(12345) };
    let info = pointer_info(interior);
    assert_eq!(info.type_, HSA_EXT_POINTER_TYPE_HSA_VMEM);
    assert_eq!(info.agentBaseAddress as usize, interior as usize);
    assert_eq!(info.sizeInBytes, 2 * MIB);
    assert_eq!(info.agentOwner, gpu());
    let reserved = pointer_info(unsafe { va.add(100) });
    assert_eq!(reserved.type_, HSA_EXT_POINTER_TYPE_RESERVED_ADDR);
    assert_eq!(reserved.agentBaseAddress as usize, va as usize);
    assert_eq!(reserved.sizeInBytes, 4 * MIB);

    let bogus = hsa_agent_t { handle: 7 };
    assert_eq!(
        grant(mapped, 2 * MIB, bogus, HSA_ACCESS_PERMISSION_RW),
        HSA_STATUS_ERROR_INVALID_AGENT
    );
    assert_eq!(
        grant(mapped, 2 * MIB, gpu(), HSA_ACCESS_PERMISSION_RW),
        HSA_STATUS_SUCCESS
    );
    assert_eq!(access_of(mapped, gpu()), HSA_ACCESS_PERMISSION_RW);
    assert_eq!(access_of(mapped, cpu()), HSA_ACCESS_PERMISSION_NONE);

    // A kernel writes it; a copy reads it.
    let k = test_kernels();
    let fill = kernel_object(k.executable, "_Z4fillPjj.kd");
    let out = unsafe { mapped.add(4096) } as *mut u32;
    let q = queue(64);
    run_fill(q, fill, out, 256, 7);
    let expected: Vec<u32> = (0..256).map(|i| 7 + i).collect();
    assert_eq!(gpu_read_u32(out, 256), expected);

    // SAFETY: plain arguments.
    unsafe {
        assert_eq!(
            rt::hsa_amd_vmem_address_free(va as *mut c_void, 4 * MIB),
            HSA_STATUS_ERROR_RESOURCE_FREE,
            "a range with a mapping is still in use"
        );
        assert_eq!(rt::hsa_amd_vmem_unmap(mapped as *mut c_void, 2 * MIB), 0);
        assert_eq!(rt::hsa_amd_vmem_handle_release(h), 0);
        assert_eq!(rt::hsa_amd_vmem_address_free(va as *mut c_void, 4 * MIB), 0);
        rt::hsa_queue_destroy(q);
    }
}

#[test]
fn a_cpu_load_of_a_mapping_of_gpu_memory_faults() {
    init();
    if !crate::device_memory::keys_here() {
        return;
    }
    let (code, text) = faulting_child("vmem::child_scenario_cpu_load_of_a_mapping", &[]);
    assert_eq!(code, Some(FAULT_EXIT_BASE + SEGV_PKUERR), "{text}");
}

#[test]
#[ignore = "child scenario"]
fn child_scenario_cpu_load_of_a_mapping() {
    init();
    let va = reserve(2 * MIB, 0);
    let h = create(2 * MIB);
    assert_eq!(map(va, 2 * MIB, h), 0);
    // Even granted to the CPU: a discrete GPU's memory without a large BAR.
    assert_eq!(grant(va, 2 * MIB, gpu(), HSA_ACCESS_PERMISSION_RW), 0);
    assert_eq!(grant(va, 2 * MIB, cpu(), HSA_ACCESS_PERMISSION_RW), 0);
    exit_on_fault();
    // SAFETY: deliberately a CPU load of GPU memory.
    let v = unsafe { va.read_volatile() };
    println!("NO FAULT: read {v}");
}

#[test]
fn a_mapping_keeps_a_released_handle_until_it_is_unmapped() {
    init();
    let va = reserve(2 * MIB, 0);
    let h = create(2 * MIB);
    let inode = inode_of(h);
    assert_eq!(holders_of(inode), 1, "the handle's descriptor");
    assert_eq!(map(va, 2 * MIB, h), 0);
    assert_eq!(grant(va, 2 * MIB, gpu(), HSA_ACCESS_PERMISSION_RW), 0);
    gpu_write(va, &[0x42; 64]);
    // SAFETY: plain arguments.
    assert_eq!(unsafe { rt::hsa_amd_vmem_handle_release(h) }, 0);
    assert_eq!(
        gpu_read(va, 64),
        vec![0x42; 64],
        "still mapped, still there"
    );
    let mut again = hsa_amd_vmem_alloc_handle_t::default();
    // SAFETY: valid pointers.
    unsafe {
        assert_eq!(
            rt::hsa_amd_vmem_retain_alloc_handle(&mut again, va.add(100) as *mut c_void),
            0
        );
        assert_eq!(again, h, "the handle that was mapped");
        let (mut pool, mut kind) = (hsa_amd_memory_pool_t::default(), 99u32);
        assert_eq!(
            rt::hsa_amd_vmem_get_alloc_properties_from_handle(again, &mut pool, &mut kind),
            0
        );
        assert_eq!((pool, kind), (gpu_pool(), MEMORY_TYPE_NONE));
        assert_eq!(rt::hsa_amd_vmem_handle_release(again), 0);
        assert_eq!(rt::hsa_amd_vmem_unmap(va as *mut c_void, 2 * MIB), 0);
        assert_eq!(
            rt::hsa_amd_vmem_handle_release(h),
            HSA_STATUS_ERROR_INVALID_ARGUMENT,
            "gone with its last reference"
        );
        assert_eq!(rt::hsa_amd_vmem_address_free(va as *mut c_void, 2 * MIB), 0);
    }
    assert_eq!(
        holders_of(inode),
        0,
        "no descriptor or mapping of it is left"
    );
}

#[test]
fn a_shareable_handle_carries_the_memory_into_another_process() {
    init();
    let va = reserve(2 * MIB, 0);
    let h = create(2 * MIB);
    assert_eq!(map(va, 2 * MIB, h), 0);
    assert_eq!(grant(va, 2 * MIB, gpu(), HSA_ACCESS_PERMISSION_RW), 0);
    gpu_write(va, &[0x5a; 4096]);
    let mut fd = -1;
    // SAFETY: a valid out pointer.
    assert_eq!(
        unsafe { rt::hsa_amd_vmem_export_shareable_handle(&mut fd, h, 0) },
        0
    );
    let path = format!("/proc/{}/fd/{fd}", std::process::id());
    run_child(
        "vmem::child_scenario_import",
        &[("DITTO_TEST_VMEM_FD_PATH", path)],
    );
    assert_eq!(
        gpu_read(va, 1),
        vec![0xee],
        "the importer's write is the exporter's memory"
    );
    // SAFETY: our descriptor and mapping.
    unsafe {
        libc::close(fd);
        assert_eq!(rt::hsa_amd_vmem_unmap(va as *mut c_void, 2 * MIB), 0);
        assert_eq!(rt::hsa_amd_vmem_handle_release(h), 0);
        assert_eq!(rt::hsa_amd_vmem_address_free(va as *mut c_void, 2 * MIB), 0);
    }
}

#[test]
#[ignore = "child scenario"]
fn child_scenario_import() {
    init();
    let path = std::env::var("DITTO_TEST_VMEM_FD_PATH").unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    use std::os::fd::AsRawFd;
    let mut h = hsa_amd_vmem_alloc_handle_t::default();
    // SAFETY: a valid fd and out pointer.
    assert_eq!(
        unsafe { rt::hsa_amd_vmem_import_shareable_handle(file.as_raw_fd(), &mut h) },
        0
    );
    let va = reserve(2 * MIB, 0);
    assert_eq!(map(va, 2 * MIB, h), 0);
    assert_eq!(grant(va, 2 * MIB, gpu(), HSA_ACCESS_PERMISSION_RW), 0);
    assert_eq!(gpu_read(va, 4096), vec![0x5a; 4096]);
    gpu_write(va, &[0xee]);
    // A file that is no handle's is refused.
    let other = tempfile::tempfile().unwrap();
    let mut refused = hsa_amd_vmem_alloc_handle_t::default();
    // SAFETY: as above.
    assert_eq!(
        unsafe { rt::hsa_amd_vmem_import_shareable_handle(other.as_raw_fd(), &mut refused) },
        HSA_STATUS_ERROR_INVALID_ARGUMENT
    );
}

#[test]
fn a_reservation_at_a_free_address_is_placed_exactly_there_whatever_the_alignment() {
    init();
    // A free range: reserved, then given back.
    let (st, free) = reserve_at(4 * MIB, 0, 2 * MIB as u64);
    assert_eq!(st, HSA_STATUS_SUCCESS);
    free_reservation(free, 4 * MIB);
    // Page-aligned but not 2 MiB-aligned: ROCr's exact try ignores the
    // alignment (the thunk's fixed mapping) and gives the address asked.
    let wanted = free + 64 * 1024;
    let (st, va) = reserve_at(MIB, wanted, 2 * MIB as u64);
    assert_eq!(st, HSA_STATUS_SUCCESS);
    assert_eq!(va, wanted, "the requested address, exactly");
    free_reservation(va, MIB);
}

#[test]
fn a_reservation_at_a_taken_address_succeeds_elsewhere_as_rocr_does() {
    init();
    // SAFETY: a fresh anonymous page of this test's own.
    let taken = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(taken, libc::MAP_FAILED);
    let taken = taken as usize;
    let (st, va) = reserve_at(64 * 1024, taken, 0);
    assert_eq!(
        st, HSA_STATUS_SUCCESS,
        "ROCr says SUCCESS at another address"
    );
    assert_ne!(va, taken);
    assert!(
        va + 64 * 1024 <= taken || va >= taken + 4096,
        "the range given ({va:#x}) overlaps the page that was there ({taken:#x})"
    );
    // A second reservation at the first one's address goes elsewhere too.
    let (st, again) = reserve_at(64 * 1024, va, 0);
    assert_eq!(st, HSA_STATUS_SUCCESS);
    assert_ne!(again, va);
    free_reservation(again, 64 * 1024);
    free_reservation(va, 64 * 1024);
    // SAFETY: the page mapped above.
    unsafe { libc::munmap(taken as *mut c_void, 4096) };
}

#[test]
fn a_reservation_refuses_bad_sizes_and_alignments_with_rocrs_codes() {
    init();
    assert_eq!(
        reserve_at(0, 0, 0).0,
        HSA_STATUS_ERROR_INVALID_ARGUMENT,
        "size 0"
    );
    // ROCr's thunk refuses both its tries: OUT_OF_RESOURCES, not
    // INVALID_ARGUMENT.
    assert_eq!(
        reserve_at(4097, 0, 0).0,
        HSA_STATUS_ERROR_OUT_OF_RESOURCES,
        "size not a page multiple"
    );
    assert_eq!(
        reserve_at(MIB, 0, 3 * 4096).0,
        HSA_STATUS_ERROR_OUT_OF_RESOURCES,
        "alignment not a power of two"
    );
    assert_eq!(
        reserve_at(MIB, 0, 2048).0,
        HSA_STATUS_ERROR_OUT_OF_RESOURCES,
        "alignment under a page"
    );
    // An address that is not page-aligned is no exact try: elsewhere.
    let (st, va) = reserve_at(MIB, 0x7000_0000_0123, 0);
    assert_eq!(st, HSA_STATUS_SUCCESS);
    assert_eq!(va % 4096, 0);
    free_reservation(va, MIB);
}

#[test]
fn one_set_access_covers_a_contiguous_run_of_mappings_as_rocr_does() {
    init();
    let va = reserve(6 * MIB, 2 * MIB as u64);
    let (first, second) = (create(2 * MIB), create(2 * MIB));
    let after = unsafe { va.add(2 * MIB) };
    assert_eq!(map(va, 2 * MIB, first), HSA_STATUS_SUCCESS);
    assert_eq!(map(after, 2 * MIB, second), HSA_STATUS_SUCCESS);
    // Both mappings in one call.
    assert_eq!(
        grant(va, 4 * MIB, gpu(), HSA_ACCESS_PERMISSION_RW),
        HSA_STATUS_SUCCESS
    );
    assert_eq!(access_of(va, gpu()), HSA_ACCESS_PERMISSION_RW);
    assert_eq!(access_of(after, gpu()), HSA_ACCESS_PERMISSION_RW);
    // A run with a hole (the last 2 MiB are reserved, not mapped).
    assert_eq!(
        grant(va, 6 * MIB, gpu(), HSA_ACCESS_PERMISSION_RW),
        HSA_STATUS_ERROR_INVALID_ALLOCATION
    );
    // A range that starts inside a mapping.
    assert_eq!(
        grant(unsafe { va.add(MIB) }, MIB, gpu(), HSA_ACCESS_PERMISSION_RW),
        HSA_STATUS_ERROR_INVALID_ALLOCATION
    );
    // Past the reservation's end.
    assert_eq!(
        grant(va, 8 * MIB, gpu(), HSA_ACCESS_PERMISSION_RW),
        HSA_STATUS_ERROR_INVALID_ARGUMENT
    );
    // No descriptor at all.
    let desc = hsa_amd_memory_access_desc_t {
        permissions: HSA_ACCESS_PERMISSION_RW,
        agent_handle: gpu(),
    };
    // SAFETY: a valid descriptor, counted as none.
    let none = unsafe { rt::hsa_amd_vmem_set_access(va as *mut c_void, 4 * MIB, &desc, 0) };
    assert_eq!(none, HSA_STATUS_ERROR_INVALID_ARGUMENT);
    // SAFETY: plain arguments: our mappings, handles and reservation.
    unsafe {
        assert_eq!(rt::hsa_amd_vmem_unmap(va as *mut c_void, 2 * MIB), 0);
        assert_eq!(rt::hsa_amd_vmem_unmap(after as *mut c_void, 2 * MIB), 0);
        assert_eq!(rt::hsa_amd_vmem_handle_release(first), 0);
        assert_eq!(rt::hsa_amd_vmem_handle_release(second), 0);
    }
    free_reservation(va as usize, 6 * MIB);
}

#[test]
fn a_handle_is_made_of_a_gpus_memory_only_as_rocr_does() {
    init();
    let mut h = hsa_amd_vmem_alloc_handle_t::default();
    for system in pools(cpu()) {
        // SAFETY: a valid out pointer.
        let st =
            unsafe { rt::hsa_amd_vmem_handle_create(system, 2 * MIB, MEMORY_TYPE_NONE, 0, &mut h) };
        assert_eq!(st, HSA_STATUS_ERROR_INVALID_ARGUMENT, "a system pool");
    }
    // SAFETY: a valid out pointer.
    let st = unsafe { rt::hsa_amd_vmem_handle_create(gpu_pool(), 2 * MIB, 2, 0, &mut h) };
    assert_eq!(
        st, HSA_STATUS_ERROR_INVALID_ARGUMENT,
        "a memory type ROCr does not know"
    );
    // SAFETY: a valid out pointer.
    let st = unsafe {
        rt::hsa_amd_vmem_handle_create(gpu_pool(), 2 * MIB, MEMORY_TYPE_PINNED, 0, &mut h)
    };
    assert_eq!(st, HSA_STATUS_SUCCESS, "a GPU pool, pinned");
    // SAFETY: the handle made above.
    assert_eq!(
        unsafe { rt::hsa_amd_vmem_handle_release(h) },
        HSA_STATUS_SUCCESS
    );
}
