//! IPC: export rules, attach/detach in this process and in a child process.

use crate::common::*;
use hsa::*;
use hsa_runtime64 as rt;
use std::ffi::c_void;

fn create(p: *mut u8, len: usize) -> Result<hsa_amd_ipc_memory_t, hsa_status_t> {
    let mut h = hsa_amd_ipc_memory_t::default();
    // SAFETY: valid out pointer.
    match unsafe { rt::hsa_amd_ipc_memory_create(p as *mut c_void, len, &mut h) } {
        0 => Ok(h),
        e => Err(e),
    }
}

fn attach(h: &hsa_amd_ipc_memory_t, len: usize) -> Result<*mut u8, hsa_status_t> {
    let mut p = std::ptr::null_mut();
    // SAFETY: valid pointers.
    match unsafe { rt::hsa_amd_ipc_memory_attach(h, len, 0, std::ptr::null(), &mut p) } {
        0 => Ok(p as *mut u8),
        e => Err(e),
    }
}

fn hex(h: &hsa_amd_ipc_memory_t) -> String {
    h.handle.iter().map(|w| format!("{w:08x}")).collect()
}

fn unhex(s: &str) -> hsa_amd_ipc_memory_t {
    let mut h = hsa_amd_ipc_memory_t::default();
    for (i, w) in h.handle.iter_mut().enumerate() {
        *w = u32::from_str_radix(&s[i * 8..i * 8 + 8], 16).unwrap();
    }
    h
}

fn mapped_in_self(p: *mut u8) -> bool {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines().any(|l| {
        let range = l.split_whitespace().next().unwrap();
        let (a, b) = range.split_once('-').unwrap();
        let (a, b) = (
            usize::from_str_radix(a, 16).unwrap(),
            usize::from_str_radix(b, 16).unwrap(),
        );
        (a..b).contains(&(p as usize))
    })
}

#[test]
fn create_requires_the_allocation_base_and_its_exact_size() {
    init();
    let p = alloc(3000);
    assert_eq!(
        create(unsafe { p.add(8) }, 2992).err(),
        Some(HSA_STATUS_ERROR_INVALID_ARGUMENT),
        "interior pointer"
    );
    assert_eq!(
        create(p, 4096).err(),
        Some(HSA_STATUS_ERROR_INVALID_ARGUMENT),
        "wrong size"
    );
    let local = [0u8; 64];
    assert_eq!(
        create(local.as_ptr() as *mut u8, 64).err(),
        Some(HSA_STATUS_ERROR_INVALID_ARGUMENT),
        "not pool memory"
    );
    assert!(create(p, 3000).is_ok());
    free(p);
}

#[test]
fn attach_in_the_same_process_maps_afresh_and_detach_unmaps() {
    init();
    let p = alloc(8000);
    // SAFETY: p holds 8000 bytes.
    unsafe { std::ptr::write_bytes(p, 0x5a, 8000) };
    let h = create(p, 8000).unwrap();
    let a = attach(&h, 8000).unwrap();
    let b = attach(&h, 8000).unwrap();
    assert_ne!(a, b, "no cache: every attach is a new mapping");
    // SAFETY: a maps the same 8000 bytes.
    unsafe {
        assert_eq!(*a.add(7999), 0x5a);
        *a = 0x11;
        assert_eq!(*p, 0x11, "shared mapping");
    }
    // SAFETY: valid pointers.
    unsafe {
        assert_eq!(rt::hsa_amd_ipc_memory_detach(a as *mut c_void), 0);
        assert!(!mapped_in_self(a));
        assert_eq!(
            rt::hsa_amd_ipc_memory_detach(a as *mut c_void),
            HSA_STATUS_ERROR_INVALID_ARGUMENT
        );
        assert_eq!(rt::hsa_amd_ipc_memory_detach(b as *mut c_void), 0);
    }
    free(p);
}

#[test]
fn stale_handle_of_a_freed_allocation_is_refused() {
    init();
    let p = alloc(4 << 20);
    let h = create(p, 4 << 20).unwrap();
    free(p);
    // Another memfd may now sit at the same fd number: the inode differs.
    let q = alloc(4 << 20);
    assert_eq!(
        attach(&h, 4 << 20).err(),
        Some(HSA_STATUS_ERROR_INVALID_ARGUMENT)
    );
    free(q);
}

#[test]
fn child_process_attaches_reads_and_detaches() {
    init();
    let n = 100_000usize;
    let p = alloc(n);
    // SAFETY: p holds n bytes.
    unsafe {
        for i in 0..n {
            *p.add(i) = (i * 7 % 251) as u8;
        }
    }
    let h = create(p, n).unwrap();
    run_child(
        "ipc::child_scenario_attach_read_detach",
        &[
            ("DITTO_TEST_IPC_HANDLE", hex(&h)),
            ("DITTO_TEST_IPC_LEN", n.to_string()),
        ],
    );
    // SAFETY: p holds n bytes; the child wrote its marker through its mapping.
    assert_eq!(
        unsafe { *p.add(n - 1) },
        0xee,
        "the child's write is visible to the owner"
    );
    free(p);
}

#[test]
#[ignore = "child process of child_process_attaches_reads_and_detaches"]
fn child_scenario_attach_read_detach() {
    let h = unhex(&std::env::var("DITTO_TEST_IPC_HANDLE").unwrap());
    let n: usize = std::env::var("DITTO_TEST_IPC_LEN")
        .unwrap()
        .parse()
        .unwrap();
    assert_ne!(
        hsa_runtime64::ipc::IpcHandle::decode(&h).pid,
        std::process::id()
    );
    init();
    let p = attach(&h, n).unwrap();
    assert!(mapped_in_self(p));
    // SAFETY: p maps n bytes.
    unsafe {
        for i in 0..n {
            assert_eq!(*p.add(i), (i * 7 % 251) as u8, "byte {i}");
        }
        *p.add(n - 1) = 0xee;
        assert_eq!(rt::hsa_amd_ipc_memory_detach(p as *mut c_void), 0);
    }
    assert!(!mapped_in_self(p), "detach removes the mapping");
    assert_eq!(hsa_runtime64::ipc::attachment_count(), 0);
}
