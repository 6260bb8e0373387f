//! The AMD loader extension (`hsa_system_get_major_extension_table` with
//! `HSA_EXTENSION_AMD_LOADER`, major 1; `hsa_ven_amd_loader.h`). Owns the
//! loader's record of what was loaded where: every live executable in creation
//! order, its loaded code objects (agent, the caller's code-object bytes as
//! given to the reader, the address range the code object is mapped at), and
//! the functions of the extension table. It learns this through the thin
//! wrappers below, which `api` routes executable creation, reader
//! creation/destruction, loading and executable destruction through; the
//! wrapped work itself stays in `executables`. Never loads, maps or runs
//! anything itself.
//!
//! As ROCr 5.2: the table filled is `hsa_ven_amd_loader_1_03_pfn_t` and
//! `min(56, table_length)` bytes are copied (HIP asks for 24, the 1_00
//! prefix); a NULL table or zero length is HSA_STATUS_ERROR_INVALID_ARGUMENT,
//! a major other than 1 or an unknown extension HSA_STATUS_ERROR. A loaded
//! code object's storage is always MEMORY (ROCr reports MEMORY for every
//! code object too), with the pointer and size the application gave
//! `hsa_code_object_reader_create_from_memory` (ROCr reports the reader's
//! memory, not a copy; so do we, though we copied the bytes).
//!
//! Differences from ROCr, all because a CPU code object is a host shared
//! object that the dynamic linker maps:
//! - "device" addresses are host addresses: query_host_address returns its
//!   argument for any address inside a loaded code object or a kernel
//!   descriptor (KERNEL_OBJECT), and INVALID_ARGUMENT otherwise, as ROCr;
//! - the segments reported by query_segment_descriptors are the code object's
//!   PT_LOAD segments as mapped (base = load bias + p_vaddr, size = p_memsz,
//!   storage offset = p_offset);
//! - LOAD_BASE / LOAD_SIZE span the page-aligned PT_LOAD mappings and
//!   LOAD_DELTA is the load bias;
//! - query_executable also accepts a KERNEL_OBJECT address (the runtime-owned
//!   descriptor lives outside the code object's mapping here);
//! - code_object_reader_create_from_file_with_offset_size is not implemented
//!   (returns HSA_STATUS_ERROR): the CPU runtime has no file readers at all.
//! - Loaded code object handles are our own ids, unique per load (the same
//!   reader loaded twice shares one mapping but gets two handles, as in ROCr).

use crate::code_objects::executables;
use crate::runtime;
use hsa::*;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};

/// One PT_LOAD segment as mapped.
#[derive(Clone, Copy)]
struct Segment {
    base: u64,
    size: u64,
    file_offset: u64,
}

#[derive(Clone)]
struct LoadedCodeObject {
    id: u64,
    executable: hsa_executable_t,
    agent: hsa_agent_t,
    storage_base: u64,
    storage_size: u64,
    load_delta: i64,
    load_base: u64,
    load_size: u64,
    segments: Vec<Segment>,
}

#[derive(Default)]
struct Record {
    /// Live executables in creation order.
    executables: Vec<hsa_executable_t>,
    /// Reader handle → the caller's bytes (pointer, size).
    readers: Vec<(u64, u64, u64)>,
    loaded: Vec<LoadedCodeObject>,
}

static RECORD: LazyLock<Mutex<Record>> = LazyLock::new(Default::default);
static NEXT_LOADED_ID: AtomicU64 = AtomicU64::new(0x10AD_0000_0001);

fn record() -> std::sync::MutexGuard<'static, Record> {
    RECORD.lock().unwrap_or_else(|e| e.into_inner())
}

fn is_open() -> bool {
    runtime::reference_count() > 0
}

// --- wrappers of the loading calls (routed here by `api`) ----------------

/// # Safety
/// `executable` is null or valid for reads and writes of one handle.
pub(crate) unsafe fn executable_create_alt(
    profile: hsa_profile_t,
    rounding: hsa_default_float_rounding_mode_t,
    options: *const c_char,
    executable: *mut hsa_executable_t,
) -> hsa_status_t {
    // SAFETY: `executable` as our own contract says.
    let status =
        unsafe { executables::executable_create_alt(profile, rounding, options, executable) };
    if status == HSA_STATUS_SUCCESS {
        // SAFETY: on success the out pointer holds the new handle.
        record().executables.push(unsafe { *executable });
    }
    status
}

/// Its loaded code objects are forgotten *before* the executable goes:
/// destroying it may unmap its code object at once, and a code object
/// loaded meanwhile on another thread can be mapped at the same addresses,
/// which must never be found as the destroyed executable's.
pub(crate) fn executable_destroy(executable: hsa_executable_t) -> hsa_status_t {
    let forgotten: Vec<LoadedCodeObject> = {
        let mut r = record();
        let (gone, kept) = std::mem::take(&mut r.loaded)
            .into_iter()
            .partition(|l| l.executable == executable);
        r.loaded = kept;
        gone
    };
    let status = executables::executable_destroy(executable);
    let mut r = record();
    if status == HSA_STATUS_SUCCESS {
        r.executables.retain(|e| *e != executable);
    } else {
        r.loaded.extend(forgotten);
    }
    status
}

/// # Safety
/// `code_object` is null or holds `size` readable bytes; `reader` is
/// null or valid for reads and writes of one handle.
pub(crate) unsafe fn reader_create_from_memory(
    code_object: *const c_void,
    size: usize,
    reader: *mut hsa_code_object_reader_t,
) -> hsa_status_t {
    // SAFETY: `code_object` and `reader` as our own contract says.
    let status = unsafe { executables::reader_create_from_memory(code_object, size, reader) };
    if status == HSA_STATUS_SUCCESS {
        // SAFETY: on success the out pointer holds the new handle.
        let handle = unsafe { *reader }.handle;
        record()
            .readers
            .push((handle, code_object as u64, size as u64));
    }
    status
}

pub(crate) fn reader_destroy(reader: hsa_code_object_reader_t) -> hsa_status_t {
    let status = executables::reader_destroy(reader);
    if status == HSA_STATUS_SUCCESS {
        record().readers.retain(|(h, _, _)| *h != reader.handle);
    }
    status
}

/// # Safety
/// `loaded` is null or valid for writes of one handle.
pub(crate) unsafe fn load_agent_code_object(
    executable: hsa_executable_t,
    agent: hsa_agent_t,
    reader: hsa_code_object_reader_t,
    options: *const c_char,
    loaded: *mut hsa_loaded_code_object_t,
) -> hsa_status_t {
    // `executables` names the mapping by its dlopen handle.
    let mut mapping = hsa_loaded_code_object_t::default();
    // SAFETY: `mapping` is a local handle.
    let status = unsafe {
        executables::load_agent_code_object(executable, agent, reader, options, &mut mapping)
    };
    if status != HSA_STATUS_SUCCESS {
        return status;
    }
    let (storage_base, storage_size) = record()
        .readers
        .iter()
        .find(|(h, _, _)| *h == reader.handle)
        .map(|(_, base, size)| (*base, *size))
        .unwrap_or_default();
    // SAFETY: `executables` names the mapping by its live dlopen handle
    // (null for an AMDGPU code object), held while the executable lives.
    let (load_delta, segments) = unsafe { mapped_segments(mapping.handle as *mut c_void) };
    let page = 4096u64;
    let low = segments.iter().map(|s| s.base).min().unwrap_or(0) & !(page - 1);
    let high = segments
        .iter()
        .map(|s| (s.base + s.size).next_multiple_of(page))
        .max()
        .unwrap_or(0);
    let id = NEXT_LOADED_ID.fetch_add(1, Ordering::Relaxed);
    record().loaded.push(LoadedCodeObject {
        id,
        executable,
        agent,
        storage_base,
        storage_size,
        load_delta,
        load_base: low,
        load_size: high.saturating_sub(low),
        segments,
    });
    if !loaded.is_null() {
        // SAFETY: non-null out pointer supplied by the caller.
        unsafe { loaded.write(hsa_loaded_code_object_t { handle: id }) };
    }
    HSA_STATUS_SUCCESS
}

/// Load bias and PT_LOAD segments of the object behind dlopen handle `handle`.
///
/// # Safety
/// `handle` is null or a live dlopen handle.
unsafe fn mapped_segments(handle: *mut c_void) -> (i64, Vec<Segment>) {
    if handle.is_null() {
        // An AMDGPU code object: nothing of it is mapped (`executables`).
        return (0, Vec::new());
    }
    let mut map: *mut libc::c_void = std::ptr::null_mut();
    // SAFETY: handle is a live dlopen handle held by `executables`;
    // RTLD_DI_LINKMAP writes a `struct link_map*`.
    let ok = unsafe {
        libc::dlinfo(
            handle,
            libc::RTLD_DI_LINKMAP,
            &mut map as *mut _ as *mut c_void,
        )
    } == 0;
    if !ok || map.is_null() {
        return (0, Vec::new());
    }
    // SAFETY: glibc's link_map begins {ElfW(Addr) l_addr; char* l_name; ...}.
    let (bias, name) = unsafe {
        let words = map as *const usize;
        (*words, *(words.add(1)) as *const c_char)
    };
    struct Search {
        bias: usize,
        name: *const c_char,
        segments: Vec<Segment>,
    }
    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: dl_iterate_phdr passes a valid info and our Search.
        unsafe {
            let info = &*info;
            let s = &mut *(data as *mut Search);
            if info.dlpi_addr as usize != s.bias
                || info.dlpi_name.is_null()
                || s.name.is_null()
                || CStr::from_ptr(info.dlpi_name) != CStr::from_ptr(s.name)
            {
                return 0;
            }
            for i in 0..info.dlpi_phnum as usize {
                let ph = &*info.dlpi_phdr.add(i);
                if ph.p_type == libc::PT_LOAD {
                    s.segments.push(Segment {
                        base: info.dlpi_addr + ph.p_vaddr,
                        size: ph.p_memsz,
                        file_offset: ph.p_offset,
                    });
                }
            }
            1
        }
    }
    let mut search = Search {
        bias,
        name,
        segments: Vec::new(),
    };
    // SAFETY: the callback only reads the info and fills `search`.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut search as *mut Search as *mut c_void) };
    (bias as i64, search.segments)
}

// --- the extension table -------------------------------------------------

/// `hsa_system_get_major_extension_table`.
///
/// # Safety
/// `table` is null or valid for writes of `table_length` bytes.
pub(crate) unsafe fn system_get_major_extension_table(
    extension: u16,
    version_major: u16,
    table_length: usize,
    table: *mut c_void,
) -> hsa_status_t {
    if !is_open() {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    }
    if table.is_null() || table_length == 0 {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    if extension != HSA_EXTENSION_AMD_LOADER || version_major != 1 {
        return HSA_STATUS_ERROR;
    }
    let full = hsa_ven_amd_loader_1_03_pfn_t {
        hsa_ven_amd_loader_query_host_address: Some(query_host_address),
        hsa_ven_amd_loader_query_segment_descriptors: Some(query_segment_descriptors),
        hsa_ven_amd_loader_query_executable: Some(query_executable),
        hsa_ven_amd_loader_executable_iterate_loaded_code_objects: Some(
            executable_iterate_loaded_code_objects,
        ),
        hsa_ven_amd_loader_loaded_code_object_get_info: Some(loaded_code_object_get_info),
        hsa_ven_amd_loader_code_object_reader_create_from_file_with_offset_size: Some(
            code_object_reader_create_from_file_with_offset_size,
        ),
        hsa_ven_amd_loader_iterate_executables: Some(iterate_executables),
    };
    let n = table_length.min(std::mem::size_of::<hsa_ven_amd_loader_1_03_pfn_t>());
    // SAFETY: the caller's table holds table_length bytes; we copy at most that.
    unsafe { std::ptr::copy_nonoverlapping(&full as *const _ as *const u8, table as *mut u8, n) };
    HSA_STATUS_SUCCESS
}

/// Runs a table entry: no panic crosses the C boundary.
fn guard(name: &str, f: impl FnOnce() -> hsa_status_t) -> hsa_status_t {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(s) => s,
        Err(_) => {
            eprintln!("hsa-cpu: internal error in {name}; returning an error to the caller");
            HSA_STATUS_ERROR
        }
    }
}

/// Kernel descriptors (KERNEL_OBJECT addresses) of `executable`.
fn kernel_objects(executable: hsa_executable_t) -> Vec<u64> {
    unsafe extern "C" fn collect(
        _: hsa_executable_t,
        symbol: hsa_executable_symbol_t,
        data: *mut c_void,
    ) -> hsa_status_t {
        let mut ko = 0u64;
        // SAFETY: KERNEL_OBJECT is a u64, written into a local.
        let s = unsafe {
            executables::symbol_get_info(
                symbol,
                HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT,
                &mut ko as *mut u64 as *mut c_void,
            )
        };
        if s == HSA_STATUS_SUCCESS {
            // SAFETY: data is the Vec passed below.
            unsafe { (*(data as *mut Vec<u64>)).push(ko) };
        }
        HSA_STATUS_SUCCESS
    }
    let mut v: Vec<u64> = Vec::new();
    // SAFETY: `collect` takes `data` as the Vec<u64> it is.
    unsafe {
        executables::iterate_symbols(executable, Some(collect), &mut v as *mut _ as *mut c_void)
    };
    v
}

/// The executable whose code object or kernel descriptor contains `address`.
fn executable_at(address: u64) -> Option<hsa_executable_t> {
    let (loaded, executables) = {
        let r = record();
        (r.loaded.clone(), r.executables.clone())
    };
    if let Some(l) = loaded
        .iter()
        .find(|l| address >= l.load_base && address - l.load_base < l.load_size)
    {
        return Some(l.executable);
    }
    // The lock is released: iterate_symbols takes executables' own lock.
    let descriptor_size = std::mem::size_of::<executables::KernelDescriptor>() as u64;
    executables.into_iter().find(|e| {
        kernel_objects(*e)
            .iter()
            .any(|ko| address >= *ko && address - *ko < descriptor_size)
    })
}

unsafe extern "C" fn query_host_address(
    device_address: *const c_void,
    host_address: *mut *const c_void,
) -> hsa_status_t {
    guard("hsa_ven_amd_loader_query_host_address", || {
        if !is_open() {
            return HSA_STATUS_ERROR_NOT_INITIALIZED;
        }
        if device_address.is_null() || host_address.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        match executable_at(device_address as u64) {
            Some(_) => {
                // SAFETY: non-null out pointer supplied by the caller.
                unsafe { host_address.write(device_address) };
                HSA_STATUS_SUCCESS
            }
            None => HSA_STATUS_ERROR_INVALID_ARGUMENT,
        }
    })
}

unsafe extern "C" fn query_executable(
    device_address: *const c_void,
    executable: *mut hsa_executable_t,
) -> hsa_status_t {
    guard("hsa_ven_amd_loader_query_executable", || {
        if !is_open() {
            return HSA_STATUS_ERROR_NOT_INITIALIZED;
        }
        if device_address.is_null() || executable.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        match executable_at(device_address as u64) {
            Some(e) => {
                // SAFETY: non-null out pointer supplied by the caller.
                unsafe { executable.write(e) };
                HSA_STATUS_SUCCESS
            }
            None => HSA_STATUS_ERROR_INVALID_ARGUMENT,
        }
    })
}

unsafe extern "C" fn query_segment_descriptors(
    descriptors: *mut hsa_ven_amd_loader_segment_descriptor_t,
    count: *mut usize,
) -> hsa_status_t {
    guard("hsa_ven_amd_loader_query_segment_descriptors", || {
        if !is_open() {
            return HSA_STATUS_ERROR_NOT_INITIALIZED;
        }
        if count.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: non-null in/out pointer supplied by the caller.
        let asked = unsafe { *count };
        if (asked == 0) != descriptors.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let r = record();
        let all: Vec<hsa_ven_amd_loader_segment_descriptor_t> = r
            .loaded
            .iter()
            .flat_map(|l| {
                l.segments
                    .iter()
                    .map(|s| hsa_ven_amd_loader_segment_descriptor_t {
                        agent: l.agent,
                        executable: l.executable,
                        code_object_storage_type:
                            HSA_VEN_AMD_LOADER_CODE_OBJECT_STORAGE_TYPE_MEMORY,
                        code_object_storage_base: l.storage_base as *const c_void,
                        code_object_storage_size: l.storage_size as usize,
                        code_object_storage_offset: s.file_offset as usize,
                        segment_base: s.base as *const c_void,
                        segment_size: s.size as usize,
                    })
            })
            .collect();
        if asked == 0 {
            // SAFETY: as above.
            unsafe { count.write(all.len()) };
            return HSA_STATUS_SUCCESS;
        }
        if asked != all.len() {
            return HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS;
        }
        // SAFETY: the caller's array holds `asked` == all.len() descriptors.
        unsafe { std::ptr::copy_nonoverlapping(all.as_ptr(), descriptors, all.len()) };
        HSA_STATUS_SUCCESS
    })
}

unsafe extern "C" fn executable_iterate_loaded_code_objects(
    executable: hsa_executable_t,
    callback: LoaderExecutableCallback,
    data: *mut c_void,
) -> hsa_status_t {
    guard(
        "hsa_ven_amd_loader_executable_iterate_loaded_code_objects",
        || {
            if !is_open() {
                return HSA_STATUS_ERROR_NOT_INITIALIZED;
            }
            let Some(cb) = callback else {
                return HSA_STATUS_ERROR_INVALID_ARGUMENT;
            };
            let ids: Vec<u64> = {
                let r = record();
                if !r.executables.contains(&executable) {
                    return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
                }
                r.loaded
                    .iter()
                    .filter(|l| l.executable == executable)
                    .map(|l| l.id)
                    .collect()
            };
            // The lock is released: the callback may call back into the loader.
            for id in ids {
                // SAFETY: calling the application's callback as the API requires.
                let s = unsafe { cb(executable, hsa_loaded_code_object_t { handle: id }, data) };
                if s != HSA_STATUS_SUCCESS {
                    return s;
                }
            }
            HSA_STATUS_SUCCESS
        },
    )
}

unsafe extern "C" fn iterate_executables(
    callback: LoaderIterateExecutablesCallback,
    data: *mut c_void,
) -> hsa_status_t {
    guard("hsa_ven_amd_loader_iterate_executables", || {
        if !is_open() {
            return HSA_STATUS_ERROR_NOT_INITIALIZED;
        }
        let Some(cb) = callback else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        let executables = record().executables.clone();
        for e in executables {
            // SAFETY: calling the application's callback as the API requires.
            let s = unsafe { cb(e, data) };
            if s != HSA_STATUS_SUCCESS {
                return s;
            }
        }
        HSA_STATUS_SUCCESS
    })
}

unsafe extern "C" fn loaded_code_object_get_info(
    loaded_code_object: hsa_loaded_code_object_t,
    attribute: hsa_ven_amd_loader_loaded_code_object_info_t,
    value: *mut c_void,
) -> hsa_status_t {
    guard("hsa_ven_amd_loader_loaded_code_object_get_info", || {
        if !is_open() {
            return HSA_STATUS_ERROR_NOT_INITIALIZED;
        }
        if value.is_null() {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let Some(l) = record()
            .loaded
            .iter()
            .find(|l| l.id == loaded_code_object.handle)
            .cloned()
        else {
            return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
        };
        let uri = format!(
            "memory://{}#offset={:#x}&size={}",
            std::process::id(),
            l.storage_base,
            l.storage_size
        );
        // SAFETY: value is non-null; each arm writes the attribute's documented type.
        unsafe {
            let put = |bytes: &[u8]| {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), value as *mut u8, bytes.len());
                HSA_STATUS_SUCCESS
            };
            match attribute {
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_EXECUTABLE => {
                    put(&l.executable.handle.to_ne_bytes())
                }
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_KIND => {
                    put(&HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_KIND_AGENT.to_ne_bytes())
                }
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_AGENT => {
                    put(&l.agent.handle.to_ne_bytes())
                }
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_CODE_OBJECT_STORAGE_TYPE => {
                    put(&HSA_VEN_AMD_LOADER_CODE_OBJECT_STORAGE_TYPE_MEMORY.to_ne_bytes())
                }
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_CODE_OBJECT_STORAGE_MEMORY_BASE => {
                    put(&l.storage_base.to_ne_bytes())
                }
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_CODE_OBJECT_STORAGE_MEMORY_SIZE => {
                    put(&l.storage_size.to_ne_bytes())
                }
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_LOAD_DELTA => {
                    put(&l.load_delta.to_ne_bytes())
                }
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_LOAD_BASE => {
                    put(&l.load_base.to_ne_bytes())
                }
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_LOAD_SIZE => {
                    put(&l.load_size.to_ne_bytes())
                }
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_URI_LENGTH => {
                    put(&(uri.len() as u32).to_ne_bytes())
                }
                // As ROCr: exactly URI_LENGTH bytes, no terminator.
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_URI => put(uri.as_bytes()),
                // STORAGE_FILE (never a file here) and anything unknown.
                _ => HSA_STATUS_ERROR_INVALID_ARGUMENT,
            }
        }
    })
}

unsafe extern "C" fn code_object_reader_create_from_file_with_offset_size(
    _file: hsa_file_t,
    _offset: usize,
    _size: usize,
    _reader: *mut hsa_code_object_reader_t,
) -> hsa_status_t {
    if !is_open() {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    }
    // The CPU runtime reads code objects from memory only.
    HSA_STATUS_ERROR
}
