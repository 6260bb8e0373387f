//! The AMD loader extension (hsa_system_get_major_extension_table with
//! HSA_EXTENSION_AMD_LOADER): the table as ROCm 5.2 defines it, executables,
//! their loaded code objects and what the loader reports about them.

use crate::common::*;
use hsa::*;
use hsa_runtime64 as rt;
use std::ffi::c_void;

fn loader_table() -> hsa_ven_amd_loader_1_03_pfn_t {
    init();
    let mut t = hsa_ven_amd_loader_1_03_pfn_t::default();
    // SAFETY: t has room for the full 1_03 table.
    let s = unsafe {
        rt::hsa_system_get_major_extension_table(
            HSA_EXTENSION_AMD_LOADER,
            1,
            std::mem::size_of_val(&t),
            &mut t as *mut _ as *mut c_void,
        )
    };
    assert_eq!(s, HSA_STATUS_SUCCESS);
    t
}

#[test]
fn loader_table_fills_rocm_5_2_layout_copying_only_the_bytes_asked() {
    init();
    for (len, filled) in [(24usize, 3usize), (40, 5), (48, 6), (56, 7), (64, 7)] {
        let mut buf = [0xABu8; 64];
        // SAFETY: buf holds 64 >= len bytes.
        let s = unsafe {
            rt::hsa_system_get_major_extension_table(
                HSA_EXTENSION_AMD_LOADER,
                1,
                len,
                buf.as_mut_ptr() as *mut c_void,
            )
        };
        assert_eq!(s, HSA_STATUS_SUCCESS, "table_length {len}");
        let words: Vec<u64> = buf
            .chunks(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        for (i, w) in words.iter().enumerate() {
            if i < filled {
                assert!(
                    *w != 0 && *w != 0xABAB_ABAB_ABAB_ABAB,
                    "entry {i} of a {len}-byte table"
                );
            } else {
                assert_eq!(
                    *w,
                    0xABAB_ABAB_ABAB_ABAB,
                    "byte {} written past {len}",
                    i * 8
                );
            }
        }
    }
    let mut t = [0u64; 7];
    let p = t.as_mut_ptr() as *mut c_void;
    // SAFETY: each call gets a 56-byte buffer or null.
    unsafe {
        assert_eq!(
            rt::hsa_system_get_major_extension_table(HSA_EXTENSION_AMD_LOADER, 2, 56, p),
            HSA_STATUS_ERROR
        );
        assert_eq!(
            rt::hsa_system_get_major_extension_table(0x200, 1, 56, p),
            HSA_STATUS_ERROR
        );
        assert_eq!(
            rt::hsa_system_get_major_extension_table(HSA_EXTENSION_AMD_LOADER, 1, 0, p),
            HSA_STATUS_ERROR_INVALID_ARGUMENT
        );
        assert_eq!(
            rt::hsa_system_get_major_extension_table(
                HSA_EXTENSION_AMD_LOADER,
                1,
                56,
                std::ptr::null_mut()
            ),
            HSA_STATUS_ERROR_INVALID_ARGUMENT
        );
    }
    assert_eq!(t, [0; 7], "a refused request writes nothing");
}

unsafe extern "C" fn collect_executable(e: hsa_executable_t, data: *mut c_void) -> hsa_status_t {
    // SAFETY: data is the Vec passed by the test.
    unsafe { (*(data as *mut Vec<hsa_executable_t>)).push(e) };
    HSA_STATUS_SUCCESS
}

unsafe extern "C" fn stop_at_first(_: hsa_executable_t, data: *mut c_void) -> hsa_status_t {
    // SAFETY: data is the counter passed by the test.
    unsafe { *(data as *mut u32) += 1 };
    HSA_STATUS_INFO_BREAK
}

fn executables_now(t: &hsa_ven_amd_loader_1_03_pfn_t) -> Vec<hsa_executable_t> {
    let mut v: Vec<hsa_executable_t> = Vec::new();
    let iterate = t.hsa_ven_amd_loader_iterate_executables.unwrap();
    // SAFETY: the callback pushes into v, alive for the call.
    assert_eq!(
        unsafe { iterate(Some(collect_executable), &mut v as *mut _ as *mut c_void) },
        HSA_STATUS_SUCCESS
    );
    v
}

#[test]
fn iterate_executables_lists_each_live_executable_until_destroyed() {
    let t = loader_table();
    let k = test_kernels();
    let before = executables_now(&t);
    assert!(before.contains(&k.executable));
    let mut calls = 0u32;
    let iterate = t.hsa_ven_amd_loader_iterate_executables.unwrap();
    // SAFETY: the callback counts into `calls`.
    let s = unsafe { iterate(Some(stop_at_first), &mut calls as *mut u32 as *mut c_void) };
    assert_eq!(
        (s, calls),
        (HSA_STATUS_INFO_BREAK, 1),
        "a callback's status ends the walk"
    );
    // SAFETY: no callback is an invalid argument.
    assert_eq!(
        unsafe { iterate(None, std::ptr::null_mut()) },
        HSA_STATUS_ERROR_INVALID_ARGUMENT
    );
    // SAFETY: destroying our own executable.
    assert_eq!(unsafe { rt::hsa_executable_destroy(k.executable) }, 0);
    assert!(!executables_now(&t).contains(&k.executable));
}

unsafe extern "C" fn collect_loaded(
    e: hsa_executable_t,
    l: hsa_loaded_code_object_t,
    data: *mut c_void,
) -> hsa_status_t {
    // SAFETY: data is the Vec passed by the test.
    unsafe { (*(data as *mut Vec<(hsa_executable_t, hsa_loaded_code_object_t)>)).push((e, l)) };
    HSA_STATUS_SUCCESS
}

fn info<T: Copy + Default>(
    t: &hsa_ven_amd_loader_1_03_pfn_t,
    l: hsa_loaded_code_object_t,
    attribute: u32,
) -> T {
    let mut v = T::default();
    let get = t.hsa_ven_amd_loader_loaded_code_object_get_info.unwrap();
    // SAFETY: v has the attribute's documented type.
    let s = unsafe { get(l, attribute, &mut v as *mut T as *mut c_void) };
    assert_eq!(s, HSA_STATUS_SUCCESS, "attribute {attribute}");
    v
}

/// A code object loaded from `bytes`, with the handle the load returned.
struct Loaded {
    executable: hsa_executable_t,
    loaded: hsa_loaded_code_object_t,
}

fn load_with_handle(bytes: &[u8]) -> Loaded {
    // SAFETY: plain API calls with valid out pointers.
    unsafe {
        let mut reader = hsa_code_object_reader_t::default();
        assert_eq!(
            rt::hsa_code_object_reader_create_from_memory(
                bytes.as_ptr() as *const c_void,
                bytes.len(),
                &mut reader
            ),
            0
        );
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
        let mut loaded = hsa_loaded_code_object_t::default();
        assert_eq!(
            rt::hsa_executable_load_agent_code_object(
                exe,
                gpu(),
                reader,
                std::ptr::null(),
                &mut loaded
            ),
            0
        );
        assert_eq!(rt::hsa_code_object_reader_destroy(reader), 0);
        assert_eq!(rt::hsa_executable_freeze(exe, std::ptr::null()), 0);
        Loaded {
            executable: exe,
            loaded,
        }
    }
}

fn code_object_bytes() -> (tempfile::TempDir, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let so = compile_shared(dir.path(), "kernels", KERNELS_C, &[]);
    let bytes = std::fs::read(so).unwrap();
    (dir, bytes)
}

#[test]
fn loaded_code_object_reports_the_readers_bytes_and_where_it_is_mapped() {
    let t = loader_table();
    let (_dir, bytes) = code_object_bytes();
    let l = load_with_handle(&bytes);

    let mut found: Vec<(hsa_executable_t, hsa_loaded_code_object_t)> = Vec::new();
    let iterate = t
        .hsa_ven_amd_loader_executable_iterate_loaded_code_objects
        .unwrap();
    // SAFETY: the callback pushes into `found`.
    let s = unsafe {
        iterate(
            l.executable,
            Some(collect_loaded),
            &mut found as *mut _ as *mut c_void,
        )
    };
    assert_eq!(s, HSA_STATUS_SUCCESS);
    assert_eq!(
        found,
        [(l.executable, l.loaded)],
        "one loaded code object, the one the load returned"
    );

    assert_eq!(
        info::<u64>(
            &t,
            l.loaded,
            HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_EXECUTABLE
        ),
        l.executable.handle
    );
    assert_eq!(
        info::<u32>(
            &t,
            l.loaded,
            HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_KIND
        ),
        HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_KIND_AGENT
    );
    assert_eq!(
        info::<u64>(
            &t,
            l.loaded,
            HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_AGENT
        ),
        gpu().handle
    );
    assert_eq!(
        info::<u32>(
            &t,
            l.loaded,
            HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_CODE_OBJECT_STORAGE_TYPE
        ),
        HSA_VEN_AMD_LOADER_CODE_OBJECT_STORAGE_TYPE_MEMORY
    );
    let memory_base: u64 = info(
        &t,
        l.loaded,
        HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_CODE_OBJECT_STORAGE_MEMORY_BASE,
    );
    let memory_size: u64 = info(
        &t,
        l.loaded,
        HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_CODE_OBJECT_STORAGE_MEMORY_SIZE,
    );
    assert_eq!(
        (memory_base, memory_size),
        (bytes.as_ptr() as u64, bytes.len() as u64)
    );

    let load_base: u64 = info(
        &t,
        l.loaded,
        HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_LOAD_BASE,
    );
    let load_size: u64 = info(
        &t,
        l.loaded,
        HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_LOAD_SIZE,
    );
    let delta: i64 = info(
        &t,
        l.loaded,
        HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_LOAD_DELTA,
    );
    assert!(load_base != 0 && load_base.is_multiple_of(4096) && load_size >= 4096);
    // The first PT_LOAD of a shared object maps file offset 0 at vaddr 0:
    // the ELF header is at the load base and the bias equals it.
    // SAFETY: load_base is the start of a live mapping of the code object.
    assert_eq!(unsafe { *(load_base as *const [u8; 4]) }, *b"\x7fELF");
    assert_eq!(delta, load_base as i64);

    let uri_length: u32 = info(
        &t,
        l.loaded,
        HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_URI_LENGTH,
    );
    let mut uri = vec![0u8; uri_length as usize];
    let get = t.hsa_ven_amd_loader_loaded_code_object_get_info.unwrap();
    // SAFETY: uri holds URI_LENGTH bytes.
    assert_eq!(
        unsafe {
            get(
                l.loaded,
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_URI,
                uri.as_mut_ptr() as *mut c_void,
            )
        },
        0
    );
    assert_eq!(
        String::from_utf8(uri).unwrap(),
        format!(
            "memory://{}#offset={:#x}&size={}",
            std::process::id(),
            memory_base,
            memory_size
        )
    );
    let mut fd = 0i32;
    // SAFETY: valid out pointers; a stale handle must be refused.
    unsafe {
        assert_eq!(
            get(
                l.loaded,
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_CODE_OBJECT_STORAGE_FILE,
                &mut fd as *mut i32 as *mut c_void
            ),
            HSA_STATUS_ERROR_INVALID_ARGUMENT
        );
        assert_eq!(rt::hsa_executable_destroy(l.executable), 0);
        let mut v = 0u64;
        assert_eq!(
            get(
                l.loaded,
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_LOAD_BASE,
                &mut v as *mut u64 as *mut c_void
            ),
            HSA_STATUS_ERROR_INVALID_CODE_OBJECT
        );
        assert_eq!(
            iterate(
                l.executable,
                Some(collect_loaded),
                &mut found as *mut _ as *mut c_void
            ),
            HSA_STATUS_ERROR_INVALID_EXECUTABLE
        );
    }
}

#[test]
fn addresses_of_a_loaded_code_object_map_to_its_executable_and_segments() {
    let t = loader_table();
    let (_dir, bytes) = code_object_bytes();
    let l = load_with_handle(&bytes);
    let load_base: u64 = info(
        &t,
        l.loaded,
        HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_LOAD_BASE,
    );
    let load_size: u64 = info(
        &t,
        l.loaded,
        HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_LOAD_SIZE,
    );
    let kernel_object = kernel_object(l.executable, "record.kd");
    let query_executable = t.hsa_ven_amd_loader_query_executable.unwrap();
    let query_host = t.hsa_ven_amd_loader_query_host_address.unwrap();
    let outside = 0u64;
    // SAFETY: valid out pointers throughout.
    unsafe {
        for address in [load_base, load_base + load_size - 1, kernel_object] {
            let mut e = hsa_executable_t::default();
            assert_eq!(
                query_executable(address as *const c_void, &mut e),
                0,
                "{address:#x}"
            );
            assert_eq!(e, l.executable);
            let mut host: *const c_void = std::ptr::null();
            assert_eq!(query_host(address as *const c_void, &mut host), 0);
            assert_eq!(host as u64, address, "device memory is host memory here");
        }
        let mut e = hsa_executable_t::default();
        let mut host: *const c_void = std::ptr::null();
        let stack = &outside as *const u64 as *const c_void;
        assert_eq!(
            query_executable(stack, &mut e),
            HSA_STATUS_ERROR_INVALID_ARGUMENT
        );
        assert_eq!(
            query_host(stack, &mut host),
            HSA_STATUS_ERROR_INVALID_ARGUMENT
        );
    }

    let query_segments = t.hsa_ven_amd_loader_query_segment_descriptors.unwrap();
    // Other tests load code objects concurrently: retry until the count is stable.
    let segments = loop {
        let mut n = 0usize;
        // SAFETY: count query with a null array.
        assert_eq!(unsafe { query_segments(std::ptr::null_mut(), &mut n) }, 0);
        assert!(n >= 1);
        let mut v = vec![
            hsa_ven_amd_loader_segment_descriptor_t {
                agent: hsa_agent_t::default(),
                executable: hsa_executable_t::default(),
                code_object_storage_type: 0,
                code_object_storage_base: std::ptr::null(),
                code_object_storage_size: 0,
                code_object_storage_offset: 0,
                segment_base: std::ptr::null(),
                segment_size: 0,
            };
            n + 1
        ];
        let mut wrong = n + 1;
        // SAFETY: v holds n + 1 descriptors.
        let s = unsafe { query_segments(v.as_mut_ptr(), &mut wrong) };
        if s == HSA_STATUS_SUCCESS {
            continue; // one more was loaded in between
        }
        assert_eq!(s, HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS);
        let mut exact = n;
        // SAFETY: v holds n descriptors.
        if unsafe { query_segments(v.as_mut_ptr(), &mut exact) } == HSA_STATUS_SUCCESS {
            v.truncate(n);
            break v;
        }
    };
    let ours: Vec<_> = segments
        .iter()
        .filter(|s| s.executable == l.executable)
        .collect();
    assert!(!ours.is_empty(), "the executable's segments are listed");
    for s in &ours {
        assert_eq!(s.agent, gpu());
        assert_eq!(
            s.code_object_storage_type,
            HSA_VEN_AMD_LOADER_CODE_OBJECT_STORAGE_TYPE_MEMORY
        );
        assert_eq!(
            (
                s.code_object_storage_base as u64,
                s.code_object_storage_size
            ),
            (bytes.as_ptr() as u64, bytes.len())
        );
        let base = s.segment_base as u64;
        assert!(base >= load_base && base + s.segment_size as u64 <= load_base + load_size);
        assert!(s.code_object_storage_offset < bytes.len());
    }
    assert_eq!(
        ours.iter().map(|s| s.code_object_storage_offset).min(),
        Some(0),
        "the first segment maps the ELF header"
    );
    // SAFETY: destroying our own executable.
    assert_eq!(unsafe { rt::hsa_executable_destroy(l.executable) }, 0);
}
