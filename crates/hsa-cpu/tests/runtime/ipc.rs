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

pub(crate) fn hex(h: &hsa_amd_ipc_memory_t) -> String {
    h.handle.iter().map(|w| format!("{w:08x}")).collect()
}

pub(crate) fn unhex(s: &str) -> hsa_amd_ipc_memory_t {
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

/// As ROCr, IPC export covers the runtime's own pool allocations only:
/// locked host memory (hipHostRegister) is refused, while pointer info
/// describes it (type, host base, size), which is how ditto finds it and
/// falls back to copying it.
#[test]
fn locked_host_memory_is_described_but_not_exportable() {
    init();
    let mut host = vec![0u8; 3 * 4096];
    let base = host.as_mut_ptr();
    let mut agent = gpu();
    let mut agent_ptr = std::ptr::null_mut();
    // SAFETY: `host` lives until after the unlock below; valid out pointers.
    unsafe {
        assert_eq!(
            rt::hsa_amd_memory_lock(
                base as *mut c_void,
                host.len(),
                &mut agent,
                1,
                &mut agent_ptr
            ),
            0
        );
        let info = pointer_info(base.add(5000));
        assert_eq!(info.type_, HSA_EXT_POINTER_TYPE_LOCKED);
        assert_eq!(info.hostBaseAddress as usize, base as usize);
        assert_eq!(info.sizeInBytes, host.len());
    }
    for (ptr, len, what) in [
        (base, host.len(), "the locked range, base and exact size"),
        (agent_ptr as *mut u8, host.len(), "its agent address"),
    ] {
        assert_eq!(
            create(ptr, len).err(),
            Some(HSA_STATUS_ERROR_INVALID_ARGUMENT),
            "{what}"
        );
    }
    // SAFETY: the range locked above.
    assert_eq!(unsafe { rt::hsa_amd_memory_unlock(base as *mut c_void) }, 0);
}

#[test]
fn attach_in_the_same_process_maps_afresh_and_detach_unmaps() {
    // In a process of its own: another test's thread of this binary may map
    // something at the address a detach just gave back, and the check that
    // nothing is mapped there would see it.
    run_child(
        "ipc::child_scenario_attach_in_the_same_process_maps_afresh_and_detach_unmaps",
        &[],
    );
}

#[test]
#[ignore = "child scenario"]
fn child_scenario_attach_in_the_same_process_maps_afresh_and_detach_unmaps() {
    init();
    let p = alloc(8000);
    gpu_write(p, &[0x5a; 8000]);
    let h = create(p, 8000).unwrap();
    let a = attach(&h, 8000).unwrap();
    let b = attach(&h, 8000).unwrap();
    assert_ne!(a, b, "no cache: every attach is a new mapping");
    assert_eq!(gpu_read(a, 8000)[7999], 0x5a);
    gpu_write(a, &[0x11]);
    assert_eq!(gpu_read(p, 1)[0], 0x11, "shared mapping");
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
    let pattern: Vec<u8> = (0..n).map(|i| (i * 7 % 251) as u8).collect();
    gpu_write(p, &pattern);
    let h = create(p, n).unwrap();
    run_child(
        "ipc::child_scenario_attach_read_detach",
        &[
            ("DITTO_TEST_IPC_HANDLE", hex(&h)),
            ("DITTO_TEST_IPC_LEN", n.to_string()),
        ],
    );
    // The child wrote its marker through its mapping.
    assert_eq!(
        gpu_read(p, n)[n - 1],
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
        hsa_runtime64::memory::ipc::IpcHandle::decode(&h).pid,
        std::process::id()
    );
    init();
    let p = attach(&h, n).unwrap();
    assert!(mapped_in_self(p));
    let seen = gpu_read(p, n);
    for (i, b) in seen.iter().enumerate() {
        assert_eq!(*b, (i * 7 % 251) as u8, "byte {i}");
    }
    gpu_write(unsafe { p.add(n - 1) }, &[0xee]);
    // SAFETY: p is the attachment made above.
    assert_eq!(
        unsafe { rt::hsa_amd_ipc_memory_detach(p as *mut c_void) },
        0
    );
    assert!(!mapped_in_self(p), "detach removes the mapping");
    assert_eq!(hsa_runtime64::memory::ipc::attachment_count(), 0);
}

/// Maps of this process naming a memfd of the runtime with this inode.
fn mappings_of_inode(inode: u64) -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .filter(|l| l.contains("memfd:hsa-cpu-pool"))
        .filter(|l| l.split_whitespace().nth(4) == Some(&inode.to_string()))
        .count()
}

fn dev_shm() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn fragment_handles_carry_their_offset_and_die_with_the_allocation() {
    init();
    let keep = alloc(4096); // keeps the 2 MiB block alive
    let p = alloc(3 * 4096);
    assert_ne!(p, keep);
    gpu_write(p, &[0x3c; 3 * 4096]);
    let h = create(p, 3 * 4096).unwrap();
    let decoded = rt::memory::ipc::IpcHandle::decode(&h);
    let hk = rt::memory::ipc::IpcHandle::decode(&create(keep, 4096).unwrap());
    assert_eq!(decoded.inode, hk.inode, "one 2 MiB block");
    assert_eq!(
        decoded.offset as usize,
        p as usize - keep as usize + hk.offset as usize,
        "offset inside the block, in the handle"
    );
    let a = attach(&h, 3 * 4096).unwrap();
    assert_eq!(gpu_read(a, 3 * 4096)[3 * 4096 - 1], 0x3c);
    // SAFETY: a is an attachment.
    assert_eq!(
        unsafe { rt::hsa_amd_ipc_memory_detach(a as *mut c_void) },
        0
    );
    free(p);
    let mut sentinel = 0x1234usize as *mut c_void;
    // SAFETY: valid pointers.
    let s =
        unsafe { rt::hsa_amd_ipc_memory_attach(&h, 3 * 4096, 0, std::ptr::null(), &mut sentinel) };
    assert_eq!(
        s, HSA_STATUS_ERROR_INVALID_ARGUMENT,
        "freed fragment of a live block"
    );
    assert_eq!(sentinel as usize, 0x1234, "no memory returned");
    // Reuse of the same pages by a new allocation does not revive the handle.
    let q = alloc(3 * 4096);
    assert_eq!(q, p, "first fit reuses the pages");
    assert_eq!(
        attach(&h, 3 * 4096).err(),
        Some(HSA_STATUS_ERROR_INVALID_ARGUMENT)
    );
    free(q);
    free(keep);
}

/// Spawns a child scenario with stdout piped; returns it once it printed
/// `HANDLE=<hex>` (the handle).
fn spawn_exporter(scenario: &str) -> (std::process::Child, hsa_amd_ipc_memory_t) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            scenario,
            "--nocapture",
            "--test-threads=1",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(out).lines();
    let handle = loop {
        let line = lines.next().expect("child printed its handle").unwrap();
        // The harness may print "test <name> ... " on the same line.
        if let Some((_, h)) = line.split_once("HANDLE=") {
            break unhex(&h[..64]);
        }
    };
    // Keep draining so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (child, handle)
}

const EXPORT_LEN: usize = 3 << 20;

/// Exports a 3 MiB buffer of 0x77, prints its handle; if DITTO_TEST_LINGER
/// is set waits (to be killed), else exits at once (freeing everything).
#[test]
#[ignore = "child process of the IPC exporter tests"]
fn child_scenario_export_and_linger() {
    init();
    let p = alloc(EXPORT_LEN);
    gpu_write(p, &vec![0x77; EXPORT_LEN]);
    let h = create(p, EXPORT_LEN).unwrap();
    println!("HANDLE={}", hex(&h));
    if std::env::var("DITTO_TEST_LINGER").is_ok() {
        std::thread::sleep(std::time::Duration::from_secs(60));
    }
}

#[test]
fn attach_after_the_exporter_exited_fails_and_returns_no_memory() {
    init();
    let (mut child, h) = spawn_exporter("ipc::child_scenario_export_and_linger");
    assert!(child.wait().unwrap().success());
    let mut sentinel = 0x5678usize as *mut c_void;
    // SAFETY: valid pointers.
    let s = unsafe {
        rt::hsa_amd_ipc_memory_attach(&h, EXPORT_LEN, 0, std::ptr::null(), &mut sentinel)
    };
    assert_eq!(s, HSA_STATUS_ERROR_INVALID_ARGUMENT);
    assert_eq!(sentinel as usize, 0x5678, "no memory returned");
}

#[test]
#[ignore = "child process of the IPC exporter tests"]
fn child_scenario_export_and_linger_forever() {
    // SAFETY: setting an environment variable before any thread reads it.
    unsafe { std::env::set_var("DITTO_TEST_LINGER", "1") };
    child_scenario_export_and_linger();
}

#[test]
fn exporter_killed_while_attached_leaves_nothing_after_detach() {
    init();
    let shm = dev_shm();
    let (mut child, h) = spawn_exporter("ipc::child_scenario_export_and_linger_forever");
    let inode = rt::memory::ipc::IpcHandle::decode(&h).inode;
    let a = attach(&h, EXPORT_LEN).unwrap();
    assert_eq!(mappings_of_inode(inode), 1);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // SAFETY: the mapping outlives the exporter: memfd memory is refcounted.
    assert_eq!(gpu_read(a, EXPORT_LEN)[EXPORT_LEN - 1], 0x77);
    // SAFETY: a is an attachment.
    assert_eq!(
        unsafe { rt::hsa_amd_ipc_memory_detach(a as *mut c_void) },
        0
    );
    assert_eq!(
        mappings_of_inode(inode),
        0,
        "no mapping left in the survivor"
    );
    assert_eq!(
        attach(&h, EXPORT_LEN).err(),
        Some(HSA_STATUS_ERROR_INVALID_ARGUMENT),
        "the dead exporter's handle is refused"
    );
    assert_eq!(dev_shm(), shm, "nothing in /dev/shm");
}

/// Attaches the handle in DITTO_TEST_IPC_HANDLE, says ATTACHED, waits to be killed.
#[test]
#[ignore = "child process of importer_killed_while_attached_leaves_nothing_in_the_exporter"]
fn child_scenario_attach_and_linger() {
    let h = unhex(&std::env::var("DITTO_TEST_IPC_HANDLE").unwrap());
    init();
    let p = attach(&h, EXPORT_LEN).unwrap();
    gpu_write(p, &[0x99]);
    println!("HANDLE={}", hex(&h));
    std::thread::sleep(std::time::Duration::from_secs(60));
}

#[test]
fn importer_killed_while_attached_leaves_nothing_in_the_exporter() {
    use std::io::BufRead;
    init();
    let shm = dev_shm();
    let p = alloc(EXPORT_LEN);
    let h = create(p, EXPORT_LEN).unwrap();
    let inode = rt::memory::ipc::IpcHandle::decode(&h).inode;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "ipc::child_scenario_attach_and_linger",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("DITTO_TEST_IPC_HANDLE", hex(&h))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(
        lines.any(|l| l.unwrap().contains("HANDLE=")),
        "child attached"
    );
    // The child wrote through its mapping.
    assert_eq!(gpu_read(p, 1)[0], 0x99);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert_eq!(
        mappings_of_inode(inode),
        1,
        "only the exporter's own mapping"
    );
    free(p);
    assert_eq!(mappings_of_inode(inode), 0, "freed: no mapping left");
    let fds_left = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::metadata(e.ok()?.path()).ok())
        .filter(|m| std::os::unix::fs::MetadataExt::ino(m) == inode)
        .count();
    assert_eq!(fds_left, 0, "the memfd is closed");
    assert_eq!(dev_shm(), shm, "nothing in /dev/shm");
}

#[test]
fn stale_attach_fault_serves_the_previous_export() {
    run_child(
        "ipc::child_scenario_stale_attach",
        &[("DITTO_HSA_CPU_FAULT", "stale-ipc-attach".to_string())],
    );
}

#[test]
#[ignore = "child process of stale_attach_fault_serves_the_previous_export"]
fn child_scenario_stale_attach() {
    init();
    assert!(rt::memory::ipc::stale_attach_fault());
    let n = 8000;
    let bufs: Vec<*mut u8> = (1..=3u8)
        .map(|v| {
            let p = alloc(n);
            gpu_write(p, &vec![v; n]);
            p
        })
        .collect();
    let hs: Vec<_> = bufs.iter().map(|p| create(*p, n).unwrap()).collect();
    let first = |h: &hsa_amd_ipc_memory_t, len: usize| {
        let p = attach(h, len).unwrap();
        let bytes = gpu_read(p, len);
        let (b0, last) = (bytes[0], bytes[len - 1]);
        assert_eq!(b0, last);
        // SAFETY: p is an attachment.
        assert_eq!(
            unsafe { rt::hsa_amd_ipc_memory_detach(p as *mut c_void) },
            0
        );
        b0
    };
    assert_eq!(first(&hs[0], n), 1, "first attach of the process: correct");
    assert_eq!(first(&hs[1], n), 1, "export 2 served with export 1's bytes");
    assert_eq!(first(&hs[2], n), 2, "export 3 served with export 2's bytes");
    assert_eq!(first(&hs[2], n), 3, "same handle again: correct");
    assert_eq!(first(&hs[0], 4096), 1, "another length: correct");
    // A freed export still fails, stale or not.
    free(bufs[1]);
    assert_eq!(
        attach(&hs[1], n).err(),
        Some(HSA_STATUS_ERROR_INVALID_ARGUMENT)
    );
    assert_eq!(
        rt::memory::ipc::attachment_count(),
        0,
        "detach unmapped every stale mapping"
    );
    free(bufs[0]);
    free(bufs[2]);
}
