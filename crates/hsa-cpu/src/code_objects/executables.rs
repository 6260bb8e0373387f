//! Code objects and executables. Owns code-object readers (the ELF bytes,
//! copied into a memfd), executables, their symbols, the loading of CPU
//! code objects (each dlopen'ed into a `cpu::Library`, kept by
//! the kernels that use it) and of AMDGPU ones (through `amdgpu`), and the
//! registry of live kernel descriptors (each a `dispatch::KernelRecord`)
//! that the packet processor looks KERNEL_OBJECT up in. Never dlopens
//! anything that is not an x86-64 shared object.
//!
//! Difference from ROCr: ROCr's reader keeps only a pointer to the caller's
//! bytes until load; we copy them into a memfd at reader creation, because
//! the loader must dlopen a file ("/proc/self/fd/N").

use crate::agents;
use crate::code_objects::cpu::{KernelListError, Library};
use crate::execution::dispatch::{KernelRecord, KernelRun};
use hsa::*;
use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

/// The runtime-owned kernel descriptor; KERNEL_OBJECT is its address. Its
/// first 12 bytes follow AMD's kernel descriptor (group, private and kernarg
/// segment sizes) so tools that peek at them read sensible values.
#[repr(C, align(64))]
pub struct KernelDescriptor {
    pub group_segment_fixed_size: u32,
    pub private_segment_fixed_size: u32,
    pub kernarg_size: u32,
    reserved: [u8; 52],
}

impl KernelDescriptor {
    fn from_bytes(bytes: [u8; 64]) -> Box<KernelDescriptor> {
        let word = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
        let mut reserved = [0u8; 52];
        reserved.copy_from_slice(&bytes[12..]);
        Box::new(KernelDescriptor {
            group_segment_fixed_size: word(0),
            private_segment_fixed_size: word(4),
            kernarg_size: word(8),
            reserved,
        })
    }
}

struct Symbol {
    /// `<mangled>.kd` for a kernel, the symbol name for a variable.
    name: String,
    agent: hsa_agent_t,
    kernarg_size: u32,
    kernarg_alignment: u32,
    group_size: u32,
    descriptor: Box<KernelDescriptor>,
    /// Set for a variable symbol (its descriptor is then unused).
    variable: Option<VariableStorage>,
}

/// Where a device variable of an AMDGPU code object lives: in the host
/// build that has it (where its kernels read it), else in zeroed memory of
/// the runtime's own, so that HIP's copies to and from the symbol work even
/// where no kernel can run.
struct VariableStorage {
    address: u64,
    size: u64,
    _keep: VariableOwner,
}

enum VariableOwner {
    HostBuild(#[allow(dead_code)] Arc<Library>),
    Runtime(#[allow(dead_code)] Box<[u64]>),
}

impl VariableStorage {
    fn for_symbol(name: &str, size: u64) -> VariableStorage {
        if let Some(v) = crate::code_objects::host_kernels::find_variable(name) {
            return VariableStorage {
                address: v.address,
                size: v.size,
                _keep: VariableOwner::HostBuild(v.library),
            };
        }
        let words = vec![0u64; size.div_ceil(8).max(1) as usize].into_boxed_slice();
        VariableStorage {
            address: words.as_ptr() as u64,
            size,
            _keep: VariableOwner::Runtime(words),
        }
    }
}

struct Executable {
    frozen: bool,
    symbols: Vec<u64>,
}

struct Reader {
    fd: i32,
    /// The library loaded from this reader, reused by later loads.
    library: std::sync::Weak<Library>,
}

impl Drop for Reader {
    fn drop(&mut self) {
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(self.fd) };
    }
}

#[derive(Default)]
struct State {
    readers: HashMap<u64, Reader>,
    executables: HashMap<u64, Executable>,
    symbols: HashMap<u64, Symbol>,
    /// Descriptor address → kernel.
    kernels: HashMap<u64, Arc<KernelRecord>>,
}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(Default::default);
static NEXT_ID: AtomicU64 = AtomicU64::new(0xC0DE_0000_0001);

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// The kernel whose descriptor lives at `kernel_object`, if it is live.
pub(crate) fn lookup_kernel(kernel_object: u64) -> Option<Arc<KernelRecord>> {
    state().kernels.get(&kernel_object).cloned()
}

/// # Safety
/// `code_object` is null or holds `size` readable bytes; `reader` is
/// null or valid for writes of one handle.
pub(crate) unsafe fn reader_create_from_memory(
    code_object: *const c_void,
    size: usize,
    reader: *mut hsa_code_object_reader_t,
) -> hsa_status_t {
    if code_object.is_null() || size == 0 || reader.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: the caller's buffer holds `size` bytes.
    let bytes = unsafe { std::slice::from_raw_parts(code_object as *const u8, size) };
    // SAFETY: memfd_create/write/close on a descriptor we own.
    let fd = unsafe { libc::memfd_create(c"hsa-cpu-code-object".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
    let r = Reader {
        fd,
        library: std::sync::Weak::new(),
    };
    let mut written = 0;
    while written < size {
        // SAFETY: writing from a valid slice to our own fd.
        let n = unsafe {
            libc::write(
                fd,
                bytes[written..].as_ptr() as *const c_void,
                size - written,
            )
        };
        if n <= 0 {
            return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
        }
        written += n as usize;
    }
    let id = next_id();
    state().readers.insert(id, r);
    // SAFETY: non-null out pointer supplied by the caller.
    unsafe { reader.write(hsa_code_object_reader_t { handle: id }) };
    HSA_STATUS_SUCCESS
}

pub(crate) fn reader_destroy(reader: hsa_code_object_reader_t) -> hsa_status_t {
    match state().readers.remove(&reader.handle) {
        Some(_) => HSA_STATUS_SUCCESS,
        None => HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER,
    }
}

/// # Safety
/// `executable` is null or valid for writes of one handle.
pub(crate) unsafe fn executable_create_alt(
    _profile: hsa_profile_t,
    _rounding: hsa_default_float_rounding_mode_t,
    _options: *const c_char,
    executable: *mut hsa_executable_t,
) -> hsa_status_t {
    if executable.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    let id = next_id();
    state().executables.insert(
        id,
        Executable {
            frozen: false,
            symbols: Vec::new(),
        },
    );
    // SAFETY: non-null out pointer supplied by the caller.
    unsafe { executable.write(hsa_executable_t { handle: id }) };
    HSA_STATUS_SUCCESS
}

/// ELF header check: 64-bit little-endian x86-64 shared object.
fn is_host_shared_object(fd: i32) -> bool {
    let mut hdr = [0u8; 20];
    // SAFETY: reading into a local buffer from our own fd.
    let n = unsafe { libc::pread(fd, hdr.as_mut_ptr() as *mut c_void, hdr.len(), 0) };
    n == 20
        && hdr[..4] == *b"\x7fELF"
        && hdr[4] == 2
        && hdr[5] == 1
        && u16::from_le_bytes([hdr[16], hdr[17]]) == 3 // ET_DYN
        && u16::from_le_bytes([hdr[18], hdr[19]]) == 62 // EM_X86_64
}

/// ELF header check: an AMDGPU code object (hipcc's, CLR's blit kernels).
fn is_amdgpu_fd(fd: i32) -> bool {
    let mut hdr = [0u8; 20];
    // SAFETY: reading into a local buffer from our own fd.
    let n = unsafe { libc::pread(fd, hdr.as_mut_ptr() as *mut c_void, hdr.len(), 0) };
    n == 20 && crate::code_objects::amdgpu::is_amdgpu(&hdr)
}

/// Loads a real AMDGPU code object: one symbol per kernel of its metadata,
/// with a copy of its kernel descriptor; how each runs is decided now
/// (`amdgpu`). The loaded-code-object handle written is 0: nothing is mapped.
///
/// # Safety
/// `loaded` is null or valid for writes of one handle.
unsafe fn load_amdgpu(
    executable: hsa_executable_t,
    agent: hsa_agent_t,
    fd: i32,
    loaded: *mut hsa_loaded_code_object_t,
) -> hsa_status_t {
    let bytes = match std::fs::read(format!("/proc/self/fd/{fd}")) {
        Ok(b) => b,
        Err(_) => return HSA_STATUS_ERROR_OUT_OF_RESOURCES,
    };
    let kernels = match crate::code_objects::amdgpu::load(&bytes) {
        Ok(k) => k,
        Err(why) => {
            eprintln!("hsa-cpu: refusing an AMDGPU code object: {why}");
            return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
        }
    };
    let mut st = state();
    if !st.executables.contains_key(&executable.handle) {
        return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
    }
    let mut new_symbols = Vec::new();
    for k in kernels {
        let group_size = k.group_segment_size();
        let descriptor = KernelDescriptor::from_bytes(k.descriptor);
        let address = &*descriptor as *const KernelDescriptor as u64;
        let run = KernelRun::from(k.implementation);
        st.kernels.insert(address, Arc::new(KernelRecord { run }));
        let _ = &k.name;
        let id = next_id();
        st.symbols.insert(
            id,
            Symbol {
                name: k.symbol,
                agent,
                kernarg_size: k.kernarg_size,
                kernarg_alignment: 16,
                group_size,
                descriptor,
                variable: None,
            },
        );
        new_symbols.push(id);
    }
    // Device variables, backed by the host build's storage.
    for v in ditto_kernels::code_object_variables(&bytes).unwrap_or_default() {
        let id = next_id();
        let storage = VariableStorage::for_symbol(&v.name, v.size);
        st.symbols.insert(
            id,
            Symbol {
                name: v.name,
                agent,
                kernarg_size: 0,
                kernarg_alignment: 0,
                group_size: 0,
                descriptor: KernelDescriptor::from_bytes([0; 64]),
                variable: Some(storage),
            },
        );
        new_symbols.push(id);
    }
    if let Some(e) = st.executables.get_mut(&executable.handle) {
        e.symbols.extend(new_symbols);
    }
    if !loaded.is_null() {
        // SAFETY: non-null out pointer supplied by the caller.
        unsafe { loaded.write(hsa_loaded_code_object_t { handle: 0 }) };
    }
    HSA_STATUS_SUCCESS
}

/// dlopens the code object in `fd` through a descriptor of its own.
fn open_library(fd: i32) -> Result<Arc<Library>, hsa_status_t> {
    if !is_host_shared_object(fd) {
        return Err(HSA_STATUS_ERROR_INVALID_CODE_OBJECT);
    }
    // SAFETY: dup of our own descriptor.
    let own = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if own < 0 {
        return Err(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    }
    let path = CString::new(format!("/proc/self/fd/{own}")).map_err(|_| HSA_STATUS_ERROR)?;
    // SAFETY: dlopen of a host shared object checked above.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        // SAFETY: closing the descriptor made above.
        unsafe { libc::close(own) };
        return Err(HSA_STATUS_ERROR_INVALID_CODE_OBJECT);
    }
    // SAFETY: a live handle dlopen'ed above and our own descriptor, given
    // to the library.
    Ok(Arc::new(unsafe {
        Library::from_handle_and_fd(handle, own)
    }))
}

/// # Safety
/// `loaded` is null or valid for writes of one handle.
pub(crate) unsafe fn load_agent_code_object(
    executable: hsa_executable_t,
    agent: hsa_agent_t,
    reader: hsa_code_object_reader_t,
    _options: *const c_char,
    loaded: *mut hsa_loaded_code_object_t,
) -> hsa_status_t {
    if !agents::is_agent(agent) {
        return HSA_STATUS_ERROR_INVALID_AGENT;
    }
    let (fd, cached) = {
        let st = state();
        match st.executables.get(&executable.handle) {
            None => return HSA_STATUS_ERROR_INVALID_EXECUTABLE,
            Some(e) if e.frozen => return HSA_STATUS_ERROR_FROZEN_EXECUTABLE,
            Some(_) => {}
        }
        match st.readers.get(&reader.handle) {
            Some(r) => (r.fd, r.library.upgrade()),
            None => return HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER,
        }
    };
    if is_amdgpu_fd(fd) {
        // SAFETY: `loaded` as our own contract says.
        return unsafe { load_amdgpu(executable, agent, fd, loaded) };
    }
    let library = match cached {
        Some(l) => l,
        None => match open_library(fd) {
            Ok(l) => l,
            Err(status) => return status,
        },
    };
    let handle = library.handle();
    if let Some(r) = state().readers.get_mut(&reader.handle) {
        r.library = Arc::downgrade(&library);
    }
    let kernels = match library.kernels() {
        Ok(kernels) => kernels,
        Err(KernelListError::NoKernelList) => return HSA_STATUS_ERROR_INVALID_CODE_OBJECT,
        Err(KernelListError::Abi(message)) => {
            eprintln!("{message}");
            return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
        }
    };
    let mut st = state();
    let Some(_) = st.executables.get(&executable.handle) else {
        return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
    };
    let mut new_symbols = Vec::new();
    for k in kernels {
        if k.name.is_null() {
            continue;
        }
        // SAFETY: the kernel name is a NUL-terminated string in the code object.
        let name = unsafe { CStr::from_ptr(k.name) }
            .to_string_lossy()
            .into_owned();
        let descriptor = Box::new(KernelDescriptor {
            group_segment_fixed_size: k.group_segment_size,
            private_segment_fixed_size: 0,
            kernarg_size: k.kernarg_segment_size,
            reserved: [0; 52],
        });
        let address = &*descriptor as *const KernelDescriptor as u64;
        let run = match k.entry {
            Some(entry) => KernelRun::Entry {
                entry,
                _library: library.clone(),
            },
            None => KernelRun::Missing(format!(
                "hsa-cpu: kernel `{name}` of a CPU code object has no entry"
            )),
        };
        st.kernels.insert(address, Arc::new(KernelRecord { run }));
        let id = next_id();
        st.symbols.insert(
            id,
            Symbol {
                name: format!("{name}.kd"),
                agent,
                kernarg_size: k.kernarg_segment_size,
                kernarg_alignment: k.kernarg_segment_alignment.max(16),
                group_size: k.group_segment_size,
                descriptor,
                variable: None,
            },
        );
        new_symbols.push(id);
    }
    if let Some(e) = st.executables.get_mut(&executable.handle) {
        e.symbols.extend(new_symbols);
    }
    if !loaded.is_null() {
        // SAFETY: non-null out pointer supplied by the caller.
        unsafe {
            loaded.write(hsa_loaded_code_object_t {
                handle: handle as u64,
            })
        };
    }
    HSA_STATUS_SUCCESS
}

pub(crate) fn executable_freeze(
    executable: hsa_executable_t,
    _options: *const c_char,
) -> hsa_status_t {
    match state().executables.get_mut(&executable.handle) {
        Some(e) if e.frozen => HSA_STATUS_ERROR_FROZEN_EXECUTABLE,
        Some(e) => {
            e.frozen = true;
            HSA_STATUS_SUCCESS
        }
        None => HSA_STATUS_ERROR_INVALID_EXECUTABLE,
    }
}

/// Drops the executable's symbols and descriptors; the code object is
/// dlclosed when no running dispatch still holds it.
pub(crate) fn executable_destroy(executable: hsa_executable_t) -> hsa_status_t {
    let mut st = state();
    let Some(e) = st.executables.remove(&executable.handle) else {
        return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
    };
    for id in e.symbols {
        if let Some(sym) = st.symbols.remove(&id)
            && sym.variable.is_none()
        {
            let address = &*sym.descriptor as *const KernelDescriptor as u64;
            st.kernels.remove(&address);
        }
    }
    HSA_STATUS_SUCCESS
}

/// # Safety
/// `name` is null or a NUL-terminated string; `agent` is null or
/// valid for reads of one handle; `symbol` is null or valid for writes
/// of one handle.
pub(crate) unsafe fn get_symbol_by_name(
    executable: hsa_executable_t,
    name: *const c_char,
    agent: *const hsa_agent_t,
    symbol: *mut hsa_executable_symbol_t,
) -> hsa_status_t {
    if name.is_null() || symbol.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: name is a NUL-terminated string from the caller.
    let wanted = unsafe { CStr::from_ptr(name) }.to_bytes();
    let agent = if agent.is_null() {
        None
    } else {
        // SAFETY: agent, when non-null, points to an agent handle.
        Some(unsafe { *agent })
    };
    let st = state();
    let Some(e) = st.executables.get(&executable.handle) else {
        return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
    };
    for id in &e.symbols {
        let s = &st.symbols[id];
        if s.name.as_bytes() == wanted && agent.is_none_or(|a| a == s.agent) {
            // SAFETY: non-null out pointer supplied by the caller.
            unsafe { symbol.write(hsa_executable_symbol_t { handle: *id }) };
            return HSA_STATUS_SUCCESS;
        }
    }
    HSA_STATUS_ERROR_INVALID_SYMBOL_NAME
}

/// # Safety
/// `callback`, if any, may be called with each symbol and `data`.
pub(crate) unsafe fn iterate_symbols(
    executable: hsa_executable_t,
    callback: Option<
        unsafe extern "C" fn(
            hsa_executable_t,
            hsa_executable_symbol_t,
            *mut c_void,
        ) -> hsa_status_t,
    >,
    data: *mut c_void,
) -> hsa_status_t {
    let Some(cb) = callback else {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    };
    let ids = match state().executables.get(&executable.handle) {
        Some(e) => e.symbols.clone(),
        None => return HSA_STATUS_ERROR_INVALID_EXECUTABLE,
    };
    // The lock is released: the callback may call back into the runtime.
    for id in ids {
        // SAFETY: calling the application's callback as the API requires.
        let status = unsafe { cb(executable, hsa_executable_symbol_t { handle: id }, data) };
        if status != HSA_STATUS_SUCCESS {
            return status;
        }
    }
    HSA_STATUS_SUCCESS
}

/// # Safety
/// `value` is null or valid for writes of the attribute's type; for
/// NAME, of NAME_LENGTH bytes (hsa.h).
pub(crate) unsafe fn symbol_get_info(
    symbol: hsa_executable_symbol_t,
    attribute: hsa_executable_symbol_info_t,
    value: *mut c_void,
) -> hsa_status_t {
    if value.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    let st = state();
    let Some(s) = st.symbols.get(&symbol.handle) else {
        return HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL;
    };
    // SAFETY: value is non-null; each arm writes the attribute's documented type.
    unsafe {
        let put = |v: u64, bytes: usize| {
            std::ptr::copy_nonoverlapping(&v as *const u64 as *const u8, value as *mut u8, bytes);
            HSA_STATUS_SUCCESS
        };
        if let Some(v) = &s.variable {
            return match attribute {
                HSA_EXECUTABLE_SYMBOL_INFO_TYPE => put(HSA_SYMBOL_KIND_VARIABLE as u64, 4),
                HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH => put(s.name.len() as u64, 4),
                HSA_EXECUTABLE_SYMBOL_INFO_NAME => {
                    std::ptr::copy_nonoverlapping(s.name.as_ptr(), value as *mut u8, s.name.len());
                    HSA_STATUS_SUCCESS
                }
                3 | 4 => put(0, 4),
                HSA_EXECUTABLE_SYMBOL_INFO_LINKAGE => put(1, 4),
                6 => put(1, 4),      // VARIABLE_ALLOCATION: PROGRAM
                7 => put(0, 4),      // VARIABLE_SEGMENT: GLOBAL
                8 => put(8, 4),      // VARIABLE_ALIGNMENT
                9 => put(v.size, 4), // VARIABLE_SIZE
                10 => put(0, 1),     // VARIABLE_IS_CONST
                HSA_EXECUTABLE_SYMBOL_INFO_IS_DEFINITION => put(1, 1),
                HSA_EXECUTABLE_SYMBOL_INFO_AGENT => put(s.agent.handle, 8),
                21 => put(v.address, 8), // VARIABLE_ADDRESS
                _ => HSA_STATUS_ERROR_INVALID_ARGUMENT,
            };
        }
        match attribute {
            HSA_EXECUTABLE_SYMBOL_INFO_TYPE => put(HSA_SYMBOL_KIND_KERNEL as u64, 4),
            // As ROCr: the length excludes any NUL and NAME writes exactly
            // that many bytes (no terminator).
            HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH => put(s.name.len() as u64, 4),
            HSA_EXECUTABLE_SYMBOL_INFO_NAME => {
                std::ptr::copy_nonoverlapping(s.name.as_ptr(), value as *mut u8, s.name.len());
                HSA_STATUS_SUCCESS
            }
            3 | 4 => put(0, 4), // MODULE_NAME_LENGTH / MODULE_NAME: program symbols only
            HSA_EXECUTABLE_SYMBOL_INFO_LINKAGE => put(1, 4), // HSA_SYMBOL_LINKAGE_PROGRAM
            HSA_EXECUTABLE_SYMBOL_INFO_IS_DEFINITION => put(1, 1),
            HSA_EXECUTABLE_SYMBOL_INFO_AGENT => put(s.agent.handle, 8),
            HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT => {
                put(&*s.descriptor as *const KernelDescriptor as u64, 8)
            }
            HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE => put(s.kernarg_size as u64, 4),
            HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT => {
                put(s.kernarg_alignment as u64, 4)
            }
            HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE => put(s.group_size as u64, 4),
            HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE => put(0, 4),
            15 => put(0, 1), // KERNEL_DYNAMIC_CALLSTACK
            _ => HSA_STATUS_ERROR_INVALID_ARGUMENT,
        }
    }
}
