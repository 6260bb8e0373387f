//! Virtual memory (`hsa_amd_vmem_*`): reserved address ranges, allocation
//! handles, mappings of a handle into a range and each agent's access to a
//! mapping, shareable handles (fds) for other processes. Owns the registry
//! of all three.
//!
//! A reservation is an anonymous PROT_NONE mapping (MAP_NORESERVE), at the
//! requested address exactly when nothing is mapped there, else where the
//! kernel puts it, with SUCCESS either way, as ROCr does. A
//! handle is a memfd named "hsa-cpu-vmem" of its size plus one header page
//! (the pool it was created in, so that an importer knows it). Mapping
//! replaces the handle's pages of the reservation with the memfd, still
//! PROT_NONE: no agent reaches it until `hsa_amd_vmem_set_access`, which
//! makes it read-write; a handle of a GPU pool is GPU memory as
//! `device_access` has it (the protection key: the CPU's threads fault on
//! it, the runtime's kernels and copy engines reach it), whatever agents
//! are named. A mapping holds a reference to its handle, so releasing a
//! mapped handle frees it at the unmap. Export duplicates the memfd;
//! import checks that an fd is such a memfd and makes a new handle of it.
//!
//! Kinder than the hardware: read-only access maps read-write; a CPU
//! granted access to GPU memory still faults without a large BAR (what a
//! discrete GPU's memory does); the visibility model (`visibility`) tracks
//! pool allocations only, so an AGENT-scope write to a mapping is visible
//! to the copy engines at once.
//!
//! Pointer info (`described`) as ROCr gives it: a mapped address is
//! HSA_EXT_POINTER_TYPE_HSA_VMEM with ITSELF as base address and the
//! mapping's size (not the mapping's start), a reserved unmapped one
//! HSA_EXT_POINTER_TYPE_RESERVED_ADDR with the reservation's start and size.
//!
//! Uses `agents` (pools) and `device_access` (the key); `allocations` describes
//! its pointers through `described`.

use crate::agents;
use crate::memory::allocations::Described;
use crate::memory::device_access;
use crate::memory::pool_memfd::PAGE;
use hsa::*;
use std::collections::{BTreeMap, HashMap};
use std::ffi::c_void;
use std::sync::{LazyLock, Mutex};

/// The memfd name of every handle (`/proc/<pid>/fd` shows `memfd:hsa-cpu-vmem`).
pub const VMEM_MEMFD_NAME: &str = "hsa-cpu-vmem";
/// First word of a handle's header page.
const HEADER_MAGIC: u64 = u64::from_le_bytes(*b"HSACPUVM");

struct Handle {
    fd: i32,
    size: usize,
    pool: hsa_amd_memory_pool_t,
    memory_type: hsa_amd_memory_type_t,
    /// The caller's references (create, import, retain) and one per mapping.
    refs: usize,
}

struct Mapping {
    size: usize,
    handle: u64,
    access: Vec<(hsa_agent_t, hsa_access_permission_t)>,
}

#[derive(Default)]
struct State {
    next_handle: u64,
    handles: HashMap<u64, Handle>,
    /// Reservation start → size.
    reserved: BTreeMap<usize, usize>,
    /// Mapping start → mapping.
    mapped: BTreeMap<usize, Mapping>,
}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(Default::default);

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

impl State {
    /// The mapping containing `ptr`.
    fn mapping_at(&self, ptr: usize) -> Option<(usize, &Mapping)> {
        let (start, m) = self.mapped.range(..=ptr).next_back()?;
        (ptr < start + m.size).then_some((*start, m))
    }

    fn reservation_at(&self, ptr: usize) -> Option<(usize, usize)> {
        let (start, size) = self.reserved.range(..=ptr).next_back()?;
        (ptr < start + size).then_some((*start, *size))
    }

    /// Drops one reference to `id`; the memfd closes with the last.
    fn unref(&mut self, id: u64) {
        let Some(h) = self.handles.get_mut(&id) else {
            return;
        };
        h.refs -= 1;
        if h.refs == 0 {
            let fd = h.fd;
            self.handles.remove(&id);
            // SAFETY: our own descriptor, closed once.
            unsafe { libc::close(fd) };
        }
    }

    fn add_handle(&mut self, handle: Handle) -> hsa_amd_vmem_alloc_handle_t {
        self.next_handle += 1;
        let id = self.next_handle;
        self.handles.insert(id, handle);
        hsa_amd_vmem_alloc_handle_t { handle: id }
    }
}

/// How pointer info describes `ptr`, when it is virtual memory.
pub(crate) fn described(ptr: usize) -> Option<Described> {
    let st = state();
    if let Some((_, m)) = st.mapping_at(ptr) {
        let pool = st.handles.get(&m.handle)?.pool;
        let (owner, flags) = agents::pool_info(pool)?;
        return Some(Described {
            type_: HSA_EXT_POINTER_TYPE_HSA_VMEM,
            base: ptr,
            size: m.size,
            owner,
            flags,
        });
    }
    let (start, size) = st.reservation_at(ptr)?;
    Some(Described {
        type_: HSA_EXT_POINTER_TYPE_RESERVED_ADDR,
        base: start,
        size,
        owner: hsa_agent_t { handle: 0 },
        flags: 0,
    })
}

/// A range of `size` bytes at exactly `address`, if nothing of the process
/// is mapped there: ROCr's first try (the thunk's MAP_FIXED_NOREPLACE
/// PROT_NONE mapping; alignment does not apply to it). `None` when the
/// range is taken, `address` is not page-aligned, or the kernel placed the
/// mapping elsewhere (a kernel without MAP_FIXED_NOREPLACE takes it as a
/// hint).
fn reserve_exactly_at(address: usize, size: usize) -> Option<usize> {
    if address == 0 || !address.is_multiple_of(PAGE) {
        return None;
    }
    // SAFETY: a fresh anonymous mapping that replaces nothing
    // (MAP_FIXED_NOREPLACE fails with EEXIST over an existing mapping).
    let p = unsafe {
        libc::mmap(
            address as *mut c_void,
            size,
            libc::PROT_NONE,
            libc::MAP_PRIVATE
                | libc::MAP_ANONYMOUS
                | libc::MAP_NORESERVE
                | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    if p as usize != address {
        // SAFETY: our own fresh mapping, placed elsewhere.
        unsafe { libc::munmap(p, size) };
        return None;
    }
    Some(address)
}

/// A range of `size` bytes at an address of the kernel's choosing, aligned
/// to `alignment`: ROCr's second try, when the requested address is not
/// free.
fn reserve_anywhere(size: usize, alignment: usize) -> Option<usize> {
    let span = size.checked_add(alignment - PAGE)?;
    // SAFETY: a fresh anonymous mapping at an address the kernel picks.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    let start = (p as usize).next_multiple_of(alignment);
    // SAFETY: giving back the parts of our own mapping outside the range.
    unsafe {
        if start > p as usize {
            libc::munmap(p, start - p as usize);
        }
        let end = p as usize + span;
        if end > start + size {
            libc::munmap((start + size) as *mut c_void, end - start - size);
        }
    }
    Some(start)
}

/// `hsa_amd_vmem_address_reserve(_align)` as ROCr 6.x and 7.x do it
/// (`Runtime::VMemoryAddressReserve`): the requested address exactly when
/// nothing is mapped there, else a range elsewhere, and SUCCESS either way
/// (the caller compares `*va` with what it asked for). Size 0 is
/// INVALID_ARGUMENT; a size that is not a page multiple, or an alignment
/// that is not a power of two of at least a page, is OUT_OF_RESOURCES
/// (ROCr's thunk refuses both tries). `flags` are ignored (6.4 has none;
/// 7.x's NO_REGISTER only changes what the driver is told).
///
/// # Safety
/// `va` is null or valid for writes of one pointer.
pub(crate) unsafe fn address_reserve_align(
    va: *mut *mut c_void,
    size: usize,
    address: u64,
    alignment: u64,
    _flags: u64,
) -> hsa_status_t {
    if va.is_null() || size == 0 {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    let alignment = if alignment == 0 {
        PAGE
    } else {
        alignment as usize
    };
    if !size.is_multiple_of(PAGE) || !alignment.is_power_of_two() || alignment < PAGE {
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
    let Some(start) =
        reserve_exactly_at(address as usize, size).or_else(|| reserve_anywhere(size, alignment))
    else {
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    };
    state().reserved.insert(start, size);
    // SAFETY: va is a non-null out pointer (the caller's contract).
    unsafe { va.write(start as *mut c_void) };
    HSA_STATUS_SUCCESS
}

pub(crate) fn address_free(va: *mut c_void, size: usize) -> hsa_status_t {
    let start = va as usize;
    let mut st = state();
    match st.reserved.get(&start) {
        None => return HSA_STATUS_ERROR_INVALID_ALLOCATION,
        Some(s) if *s != size => return HSA_STATUS_ERROR_INVALID_ARGUMENT,
        Some(_) => {}
    }
    if st.mapped.range(start..start + size).next().is_some() {
        return HSA_STATUS_ERROR_RESOURCE_FREE;
    }
    st.reserved.remove(&start);
    // SAFETY: the whole reservation, which nothing maps any more.
    unsafe { libc::munmap(va, size) };
    HSA_STATUS_SUCCESS
}

/// # Safety
/// `out` is null or valid for writes of one handle.
pub(crate) unsafe fn handle_create(
    pool: hsa_amd_memory_pool_t,
    size: usize,
    memory_type: hsa_amd_memory_type_t,
    _flags: u64,
    out: *mut hsa_amd_vmem_alloc_handle_t,
) -> hsa_status_t {
    if agents::pool_info(pool).is_none() || out.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    if agents::is_group_pool(pool) {
        return HSA_STATUS_ERROR_INVALID_ALLOCATION;
    }
    if memory_type != MEMORY_TYPE_NONE && memory_type != MEMORY_TYPE_PINNED {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    if size == 0 || !size.is_multiple_of(agents::ALLOC_GRANULE) {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    // ROCr's driver makes handles of a GPU's own memory only: a system
    // (CPU) pool is INVALID_ARGUMENT (ROCr 6.4 and 7.x alike).
    if !agents::is_gpu_memory(pool) {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    let Some(fd) = new_memfd(size, pool) else {
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    };
    let h = state().add_handle(Handle {
        fd,
        size,
        pool,
        memory_type,
        refs: 1,
    });
    // SAFETY: out is a non-null out pointer.
    unsafe { out.write(h) };
    HSA_STATUS_SUCCESS
}

/// A memfd of `size` data bytes and the header page naming `pool`.
fn new_memfd(size: usize, pool: hsa_amd_memory_pool_t) -> Option<i32> {
    let name = std::ffi::CString::new(VMEM_MEMFD_NAME).ok()?;
    // SAFETY: plain syscalls on a descriptor we own; failures are checked.
    unsafe {
        let fd = libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let mut header = [0u8; 16];
        header[..8].copy_from_slice(&HEADER_MAGIC.to_le_bytes());
        header[8..].copy_from_slice(&pool.handle.to_le_bytes());
        if libc::ftruncate(fd, (size + PAGE) as libc::off_t) != 0
            || libc::pwrite(
                fd,
                header.as_ptr() as *const c_void,
                16,
                size as libc::off_t,
            ) != 16
        {
            libc::close(fd);
            return None;
        }
        Some(fd)
    }
}

pub(crate) fn handle_release(h: hsa_amd_vmem_alloc_handle_t) -> hsa_status_t {
    let mut st = state();
    if !st.handles.contains_key(&h.handle) {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    st.unref(h.handle);
    HSA_STATUS_SUCCESS
}

pub(crate) fn map(
    va: *mut c_void,
    size: usize,
    in_offset: usize,
    h: hsa_amd_vmem_alloc_handle_t,
    _flags: u64,
) -> hsa_status_t {
    let start = va as usize;
    let mut st = state();
    let Some(handle) = st.handles.get(&h.handle) else {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    };
    if size != handle.size || in_offset != 0 || !start.is_multiple_of(PAGE) {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    let inside = st
        .reservation_at(start)
        .is_some_and(|(r, rs)| start + size <= r + rs);
    let overlaps =
        st.mapping_at(start).is_some() || st.mapped.range(start..start + size).next().is_some();
    if !inside || overlaps {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: replaces pages of our own reservation with the handle's memfd.
    let p = unsafe {
        libc::mmap(
            va,
            size,
            libc::PROT_NONE,
            libc::MAP_SHARED | libc::MAP_FIXED,
            handle.fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
    if let Some(handle) = st.handles.get_mut(&h.handle) {
        handle.refs += 1;
    }
    st.mapped.insert(
        start,
        Mapping {
            size,
            handle: h.handle,
            access: Vec::new(),
        },
    );
    HSA_STATUS_SUCCESS
}

pub(crate) fn unmap(va: *mut c_void, size: usize) -> hsa_status_t {
    let start = va as usize;
    let mut st = state();
    if st.mapped.get(&start).is_none_or(|m| m.size != size) {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: the mapping's pages go back to being reserved (PROT_NONE).
    let p = unsafe {
        libc::mmap(
            va,
            size,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return HSA_STATUS_ERROR;
    }
    if let Some(m) = st.mapped.remove(&start) {
        st.unref(m.handle);
    }
    HSA_STATUS_SUCCESS
}

/// `hsa_amd_vmem_set_access` as ROCr does it: the range lies inside one
/// reservation (INVALID_ARGUMENT otherwise) and is covered exactly by a
/// contiguous run of mappings starting at `va` (INVALID_ALLOCATION
/// otherwise), each of which gets the agents' permissions; no descriptor
/// (`count` 0 or a null list) is INVALID_ARGUMENT; agents not named keep
/// what they had.
///
/// # Safety
/// `desc` is null or valid for reads of `count` descriptors.
pub(crate) unsafe fn set_access(
    va: *mut c_void,
    size: usize,
    desc: *const hsa_amd_memory_access_desc_t,
    count: usize,
) -> hsa_status_t {
    if count == 0 || desc.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: the caller passes `count` descriptors.
    let list = unsafe { std::slice::from_raw_parts(desc, count) };
    if list.iter().any(|d| !agents::is_agent(d.agent_handle)) {
        return HSA_STATUS_ERROR_INVALID_AGENT;
    }
    if list
        .iter()
        .any(|d| d.permissions > HSA_ACCESS_PERMISSION_RW)
    {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    let start = va as usize;
    let mut st = state();
    let Some(end) = start.checked_add(size).filter(|_| size > 0) else {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    };
    match st.reservation_at(start) {
        Some((base, reserved)) if end <= base + reserved => {}
        _ => return HSA_STATUS_ERROR_INVALID_ARGUMENT,
    }
    // The mappings that cover [start, end), each starting where the one
    // before it ends.
    let mut run = Vec::new();
    let mut at = start;
    while at < end {
        let Some(m) = st.mapped.get(&at) else {
            return HSA_STATUS_ERROR_INVALID_ALLOCATION;
        };
        run.push((at, m.size));
        at += m.size;
    }
    if at != end {
        return HSA_STATUS_ERROR_INVALID_ALLOCATION;
    }
    for (mapping, mapping_size) in run {
        if !grant_mapping(&mut st, mapping, mapping_size, list) {
            return HSA_STATUS_ERROR;
        }
    }
    HSA_STATUS_SUCCESS
}

/// Gives one mapping (at `start`, of `size` bytes) the permissions of
/// `list` and protects its pages accordingly; false when the protection
/// could not be changed.
fn grant_mapping(
    st: &mut State,
    start: usize,
    size: usize,
    list: &[hsa_amd_memory_access_desc_t],
) -> bool {
    let Some(pool) = st
        .mapped
        .get(&start)
        .and_then(|m| st.handles.get(&m.handle))
        .map(|h| h.pool)
    else {
        return false;
    };
    let m = st.mapped.get_mut(&start).expect("looked up above");
    for d in list {
        m.access.retain(|(a, _)| *a != d.agent_handle);
        m.access.push((d.agent_handle, d.permissions));
    }
    let open = m
        .access
        .iter()
        .any(|(_, p)| *p != HSA_ACCESS_PERMISSION_NONE);
    let prot = if open {
        libc::PROT_READ | libc::PROT_WRITE
    } else {
        libc::PROT_NONE
    };
    // SAFETY: our own mapping, [start, start + size).
    let mut ok = unsafe { libc::mprotect(start as *mut c_void, size, prot) } == 0;
    if ok
        && open
        && let Some(owner) = agents::gpu_memory_index(pool)
    {
        // GPU memory: read-write for the runtime's engines only, those of
        // the owner or, once another GPU is named, of every GPU.
        let granted = m
            .access
            .iter()
            .filter(|(_, p)| *p != HSA_ACCESS_PERMISSION_NONE)
            .map(|(a, _)| *a);
        // SAFETY: our own mapping, made read-write just above.
        ok = unsafe { device_access::protect(start, size, agents::reach_of(owner, granted)) }
            .is_ok();
    }
    ok
}

/// # Safety
/// `perms` is null or valid for writes of one permission.
pub(crate) unsafe fn get_access(
    va: *mut c_void,
    perms: *mut hsa_access_permission_t,
    agent: hsa_agent_t,
) -> hsa_status_t {
    if perms.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    if !agents::is_agent(agent) {
        return HSA_STATUS_ERROR_INVALID_AGENT;
    }
    let st = state();
    let Some((_, m)) = st.mapping_at(va as usize) else {
        return HSA_STATUS_ERROR_INVALID_ALLOCATION;
    };
    let p = m
        .access
        .iter()
        .find(|(a, _)| *a == agent)
        .map_or(HSA_ACCESS_PERMISSION_NONE, |(_, p)| *p);
    // SAFETY: perms is a non-null out pointer.
    unsafe { perms.write(p) };
    HSA_STATUS_SUCCESS
}

/// # Safety
/// `fd_out` is null or valid for writes of one descriptor.
pub(crate) unsafe fn export_shareable_handle(
    fd_out: *mut i32,
    h: hsa_amd_vmem_alloc_handle_t,
    _flags: u64,
) -> hsa_status_t {
    if fd_out.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    let st = state();
    let Some(handle) = st.handles.get(&h.handle) else {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    };
    // SAFETY: a close-on-exec duplicate of our own descriptor.
    let fd = unsafe { libc::fcntl(handle.fd, libc::F_DUPFD_CLOEXEC, 0) };
    if fd < 0 {
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
    // SAFETY: fd_out is a non-null out pointer.
    unsafe { fd_out.write(fd) };
    HSA_STATUS_SUCCESS
}

/// # Safety
/// `out` is null or valid for writes of one handle.
pub(crate) unsafe fn import_shareable_handle(
    fd: i32,
    out: *mut hsa_amd_vmem_alloc_handle_t,
) -> hsa_status_t {
    if out.is_null() || fd < 0 {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    let named = std::fs::read_link(format!("/proc/self/fd/{fd}")).is_ok_and(|t| {
        t.to_string_lossy()
            .contains(&format!("memfd:{VMEM_MEMFD_NAME}"))
    });
    if !named {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: fstat and pread into locals, and a duplicate, of the caller's fd.
    let (size, pool, own) = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0 || (st.st_size as usize) < PAGE {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let size = st.st_size as usize - PAGE;
        let mut header = [0u8; 16];
        if libc::pread(
            fd,
            header.as_mut_ptr() as *mut c_void,
            16,
            size as libc::off_t,
        ) != 16
            || header[..8] != HEADER_MAGIC.to_le_bytes()
        {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let pool = hsa_amd_memory_pool_t {
            handle: u64::from_le_bytes(header[8..].try_into().expect("8 bytes")),
        };
        (size, pool, libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0))
    };
    if own < 0 {
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
    // A pool this process does not have (fewer GPUs): GPU 0's.
    let pool = if agents::pool_info(pool).is_some() {
        pool
    } else {
        agents::GPU_COARSE_POOL
    };
    let h = state().add_handle(Handle {
        fd: own,
        size,
        pool,
        memory_type: MEMORY_TYPE_NONE,
        refs: 1,
    });
    // SAFETY: out is a non-null out pointer.
    unsafe { out.write(h) };
    HSA_STATUS_SUCCESS
}

/// # Safety
/// `out` is null or valid for writes of one handle.
pub(crate) unsafe fn retain_alloc_handle(
    out: *mut hsa_amd_vmem_alloc_handle_t,
    addr: *mut c_void,
) -> hsa_status_t {
    if out.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    let mut st = state();
    let Some(id) = st.mapping_at(addr as usize).map(|(_, m)| m.handle) else {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    };
    if let Some(h) = st.handles.get_mut(&id) {
        h.refs += 1;
    }
    // SAFETY: out is a non-null out pointer.
    unsafe { out.write(hsa_amd_vmem_alloc_handle_t { handle: id }) };
    HSA_STATUS_SUCCESS
}

/// # Safety
/// `pool` and `memory_type` are null or valid for writes of one value
/// each.
pub(crate) unsafe fn alloc_properties(
    h: hsa_amd_vmem_alloc_handle_t,
    pool: *mut hsa_amd_memory_pool_t,
    memory_type: *mut hsa_amd_memory_type_t,
) -> hsa_status_t {
    if pool.is_null() || memory_type.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    let st = state();
    let Some(handle) = st.handles.get(&h.handle) else {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    };
    // SAFETY: non-null out pointers.
    unsafe {
        pool.write(handle.pool);
        memory_type.write(handle.memory_type);
    }
    HSA_STATUS_SUCCESS
}
