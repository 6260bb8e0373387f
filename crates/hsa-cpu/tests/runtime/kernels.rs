//! Code objects, executables and symbols; running a host kernel.

use crate::common::*;
use hsa::*;
use hsa_runtime64 as rt;
use std::ffi::c_void;

fn info_u32(sym: hsa_executable_symbol_t, attr: hsa_executable_symbol_info_t) -> u32 {
    let mut v = 0u32;
    // SAFETY: the attribute is a uint32_t.
    assert_eq!(
        unsafe { rt::hsa_executable_symbol_get_info(sym, attr, &mut v as *mut u32 as *mut c_void) },
        0
    );
    v
}

#[test]
fn symbols_keep_the_kd_suffix_and_describe_the_kernel() {
    let k = test_kernels();
    let sym = symbol(k.executable, "_Z4fillPjj.kd");
    assert_eq!(
        info_u32(sym, HSA_EXECUTABLE_SYMBOL_INFO_TYPE),
        HSA_SYMBOL_KIND_KERNEL
    );
    let len = info_u32(sym, HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH) as usize;
    assert_eq!(len, "_Z4fillPjj.kd".len());
    let mut name = vec![0xffu8; len + 1];
    // SAFETY: name has room for len bytes (+1 sentinel).
    assert_eq!(
        unsafe {
            rt::hsa_executable_symbol_get_info(
                sym,
                HSA_EXECUTABLE_SYMBOL_INFO_NAME,
                name.as_mut_ptr() as *mut c_void,
            )
        },
        0
    );
    assert_eq!(&name[..len], b"_Z4fillPjj.kd");
    assert_eq!(
        name[len], 0xff,
        "as ROCr, NAME writes exactly NAME_LENGTH bytes"
    );
    assert_eq!(
        info_u32(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE),
        16
    );
    assert_eq!(
        info_u32(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE),
        256
    );
    let mut agent = hsa_agent_t::default();
    // SAFETY: AGENT is an hsa_agent_t.
    unsafe {
        rt::hsa_executable_symbol_get_info(
            sym,
            HSA_EXECUTABLE_SYMBOL_INFO_AGENT,
            &mut agent as *mut _ as *mut c_void,
        )
    };
    assert_eq!(agent, gpu());
    let missing = std::ffi::CString::new("_Z4fillPjj").unwrap();
    let mut s = hsa_executable_symbol_t::default();
    // SAFETY: valid pointers; a null agent matches any agent.
    let status = unsafe {
        rt::hsa_executable_get_symbol_by_name(
            k.executable,
            missing.as_ptr(),
            std::ptr::null(),
            &mut s,
        )
    };
    assert_eq!(
        status, HSA_STATUS_ERROR_INVALID_SYMBOL_NAME,
        "the name without .kd is not a symbol"
    );
}

unsafe extern "C" fn count_symbol(
    _e: hsa_executable_t,
    _s: hsa_executable_symbol_t,
    data: *mut c_void,
) -> hsa_status_t {
    // SAFETY: data is the counter passed below.
    unsafe { *(data as *mut u32) += 1 };
    HSA_STATUS_SUCCESS
}

#[test]
fn iterate_symbols_visits_every_kernel() {
    let k = test_kernels();
    let mut n = 0u32;
    // SAFETY: the callback increments n, alive for the call.
    assert_eq!(
        unsafe {
            rt::hsa_executable_iterate_symbols(
                k.executable,
                Some(count_symbol),
                &mut n as *mut u32 as *mut c_void,
            )
        },
        0
    );
    assert_eq!(n, 3);
}

#[test]
fn kernel_writes_its_output_buffer() {
    let k = test_kernels();
    let fill = kernel_object(k.executable, "_Z4fillPjj.kd");
    let out = alloc(1000 * 4) as *mut u32;
    let q = queue(64);
    run_fill(q, fill, out, 1000, 100);
    let got = gpu_read_u32(out, 1000);
    assert!(
        got.iter().enumerate().all(|(i, v)| *v == 100 + i as u32),
        "first values {:?}",
        &got[..4]
    );
    free(out as *mut u8);
    // SAFETY: q is live.
    unsafe { rt::hsa_queue_destroy(q) };
}

#[test]
fn amdgpu_and_garbage_code_objects_are_refused() {
    init();
    // A minimal ELF64 header for EM_AMDGPU (224), as hipcc emits.
    let mut amdgpu = vec![0u8; 64];
    amdgpu[..4].copy_from_slice(b"\x7fELF");
    amdgpu[4] = 2;
    amdgpu[5] = 1;
    amdgpu[6] = 1;
    amdgpu[16..18].copy_from_slice(&3u16.to_le_bytes());
    amdgpu[18..20].copy_from_slice(&224u16.to_le_bytes());
    assert_eq!(
        load_code_object(&amdgpu),
        Err(HSA_STATUS_ERROR_INVALID_CODE_OBJECT)
    );
    assert_eq!(
        load_code_object(b"not an elf at all"),
        Err(HSA_STATUS_ERROR_INVALID_CODE_OBJECT)
    );
    // A host shared object without ditto_cpu_code_object_kernels.
    let dir = tempfile::tempdir().unwrap();
    let so = compile_shared(dir.path(), "plain", "int plain(void) { return 1; }\n", &[]);
    assert_eq!(
        load_code_object(&std::fs::read(so).unwrap()),
        Err(HSA_STATUS_ERROR_INVALID_CODE_OBJECT)
    );
}

#[test]
fn destroyed_executable_kernels_are_no_longer_dispatchable() {
    let k = test_kernels();
    let record = kernel_object(k.executable, "record.kd");
    // SAFETY: the executable is live.
    assert_eq!(unsafe { rt::hsa_executable_destroy(k.executable) }, 0);
    let mut log = RecordLog::new();
    let q = queue(64);
    let done = signal(1);
    submit(q, &[dispatch(record, log.kernarg(1), 1, done, true)]);
    assert_eq!(wait_eq(done, 0), 0);
    assert!(
        log.entries().is_empty(),
        "a stale kernel object must not run"
    );
    // SAFETY: q is live.
    unsafe { rt::hsa_queue_destroy(q) };
}

#[test]
fn failing_kernel_reports_an_exception() {
    let k = test_kernels();
    let fail = kernel_object(k.executable, "fail.kd");
    static STATUS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    unsafe extern "C" fn cb(status: hsa_status_t, _q: *mut hsa_queue_t, _d: *mut c_void) {
        STATUS.store(status, std::sync::atomic::Ordering::SeqCst);
    }
    let mut q = std::ptr::null_mut();
    // SAFETY: valid out pointer.
    assert_eq!(
        unsafe { rt::hsa_queue_create(gpu(), 64, 0, Some(cb), std::ptr::null_mut(), 0, 0, &mut q) },
        0
    );
    let done = signal(1);
    let arg = [0u64; 1];
    submit(
        q,
        &[dispatch(fail, arg.as_ptr() as *mut c_void, 1, done, true)],
    );
    assert_eq!(wait_eq(done, 0), 0);
    assert_eq!(
        STATUS.load(std::sync::atomic::Ordering::SeqCst),
        HSA_STATUS_ERROR_EXCEPTION
    );
    // SAFETY: q is live.
    unsafe { rt::hsa_queue_destroy(q) };
}
