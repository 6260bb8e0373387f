//! Pool allocations: owns every pool allocation, ROCr-style fragment
//! blocks, locked (pinned) host ranges, pointer info, and blit copies.
//! Every allocation lives in a pool memfd (`pool_memfd`), so `ipc` can
//! export it. Allocations below 2 MiB are carved page-granular from 2 MiB
//! blocks (one memfd per block, open while the block lives); larger ones
//! get a memfd of their own. Allocation serials count up from 1 per
//! process and are never reused. Never hands out memory it does not map
//! itself.
//!
//! `ipc` builds on this module (exports); this module never uses `ipc`:
//! pointer info is handed the lookup of IPC attachments.

use crate::agents;
use crate::memory::device_access::{self, DeviceAccess, Reach};
use crate::memory::pool_memfd::{PAGE, Region, SharedMapping};
use hsa::*;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::{LazyLock, Mutex};

pub const FRAGMENT_BLOCK: usize = 2 << 20;

static NEXT_SERIAL: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

/// A 2 MiB block that small allocations are carved from.
#[derive(Debug)]
struct FragmentBlock {
    mapping: SharedMapping,
    pool: hsa_amd_memory_pool_t,
    used: Vec<bool>,
    /// Some of its pages were opened to other GPUs (allow access): a new
    /// allocation there is closed to them again.
    opened_to_peers: bool,
}

#[derive(Debug)]
enum Backing {
    /// Pages `first_page..first_page+pages` of the block at this base address.
    Fragment {
        block: usize,
        first_page: usize,
        pages: usize,
    },
    Own(SharedMapping),
}

#[derive(Debug)]
struct Allocation {
    size: usize,
    serial: u32,
    pool: hsa_amd_memory_pool_t,
    backing: Backing,
}

#[derive(Default)]
struct MemoryState {
    allocations: BTreeMap<usize, Allocation>,
    blocks: BTreeMap<usize, FragmentBlock>,
    /// Locked host ranges: base → size.
    locked: BTreeMap<usize, usize>,
}

static STATE: LazyLock<Mutex<MemoryState>> = LazyLock::new(Default::default);

fn state() -> std::sync::MutexGuard<'static, MemoryState> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The size of an allocation of `size` bytes as the served release records
/// it (what hsa_amd_pointer_info reports and IPC compares with): ROCr
/// 5.2.3 recorded the size rounded up to the allocation granule, later
/// releases the size asked for.
pub(crate) fn recorded_size(abi: crate::tools::served_abi::Abi, size: usize) -> usize {
    match abi {
        crate::tools::served_abi::Abi::Rocm5_2 => {
            size.div_ceil(agents::ALLOC_GRANULE) * agents::ALLOC_GRANULE
        }
        _ => size,
    }
}

/// What IPC needs to export an allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExportInfo {
    pub fd: i32,
    pub inode: u64,
    /// Offset of the allocation inside its memfd (page aligned).
    pub offset: u64,
    pub size: u64,
    /// The allocation's serial, as recorded in the memfd's metadata page.
    pub serial: u32,
}

/// The allocation that contains a pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Containing {
    pub base: usize,
    pub size: usize,
    pub pool: hsa_amd_memory_pool_t,
}

impl MemoryState {
    fn allocate(&mut self, pool: hsa_amd_memory_pool_t, size: usize) -> Option<usize> {
        let len = size.div_ceil(PAGE) * PAGE;
        let serial = NEXT_SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let device = agents::gpu_memory_index(pool);
        if len < FRAGMENT_BLOCK {
            let pages = len / PAGE;
            let found = self
                .blocks
                .iter()
                .filter(|(_, b)| b.pool == pool)
                .find_map(|(base, b)| first_fit(&b.used, pages).map(|p| (*base, p)));
            let (block, first_page) = match found {
                Some(hit) => hit,
                None => {
                    let mapping = SharedMapping::new(FRAGMENT_BLOCK, device)?;
                    let base = mapping.base;
                    self.blocks.insert(
                        base,
                        FragmentBlock {
                            mapping,
                            pool,
                            used: vec![false; FRAGMENT_BLOCK / PAGE],
                            opened_to_peers: false,
                        },
                    );
                    (base, 0)
                }
            };
            let b = self.blocks.get_mut(&block)?;
            let base = block + first_page * PAGE;
            if let Some(gpu) = device
                && b.opened_to_peers
                // SAFETY: pages of our own read-write block mapping.
                && let Err(why) = unsafe { device_access::protect(base, len, Reach::Gpu(gpu)) }
            {
                eprintln!("hsa-cpu: cannot allocate GPU memory: {why}");
                return None;
            }
            b.used[first_page..first_page + pages]
                .iter_mut()
                .for_each(|u| *u = true);
            b.mapping.set_serial(first_page, serial);
            self.allocations.insert(
                base,
                Allocation {
                    size,
                    serial,
                    pool,
                    backing: Backing::Fragment {
                        block,
                        first_page,
                        pages,
                    },
                },
            );
            Some(base)
        } else {
            let mapping = SharedMapping::new(len, device)?;
            mapping.set_serial(0, serial);
            let base = mapping.base;
            self.allocations.insert(
                base,
                Allocation {
                    size,
                    serial,
                    pool,
                    backing: Backing::Own(mapping),
                },
            );
            Some(base)
        }
    }

    fn free(&mut self, base: usize) -> bool {
        let Some(a) = self.allocations.remove(&base) else {
            return false;
        };
        if let Backing::Own(m) = &a.backing {
            m.set_serial(0, 0);
        }
        if let Backing::Fragment {
            block,
            first_page,
            pages,
        } = a.backing
        {
            let empty = match self.blocks.get_mut(&block) {
                Some(b) => {
                    b.mapping.set_serial(first_page, 0);
                    b.used[first_page..first_page + pages]
                        .iter_mut()
                        .for_each(|u| *u = false);
                    b.used.iter().all(|u| !u)
                }
                None => false,
            };
            // One empty block per pool stays mapped: a program that
            // allocates and frees one small buffer per kernel launch (kernarg)
            // would otherwise create and destroy a memfd every time. Its
            // freed pages carry serial 0, so IPC still sees them as freed.
            let another_empty = || {
                self.blocks.iter().any(|(base, b)| {
                    *base != block && b.pool == a.pool && b.used.iter().all(|u| !u)
                })
            };
            if empty && another_empty() {
                self.blocks.remove(&block);
            }
        }
        true
    }

    /// The memfd mapping holding `a` and the allocation's offset in it.
    fn memfd_of<'a>(&'a self, a: &'a Allocation) -> Option<(&'a SharedMapping, u64)> {
        match &a.backing {
            Backing::Own(m) => Some((m, 0)),
            Backing::Fragment {
                block, first_page, ..
            } => Some((&self.blocks.get(block)?.mapping, (first_page * PAGE) as u64)),
        }
    }

    fn containing(&self, ptr: usize) -> Option<Containing> {
        let (base, a) = self.allocations.range(..=ptr).next_back()?;
        (ptr < base + a.size.max(1)).then_some(Containing {
            base: *base,
            size: a.size,
            pool: a.pool,
        })
    }
}

fn first_fit(used: &[bool], pages: usize) -> Option<usize> {
    let mut run = 0;
    for (i, u) in used.iter().enumerate() {
        run = if *u { 0 } else { run + 1 };
        if run == pages {
            return Some(i + 1 - pages);
        }
    }
    None
}

/// The GPU allocation containing `ptr`, as a [`Region`].
pub(crate) fn device_region(ptr: usize) -> Option<Region> {
    device_regions([ptr]).pop()
}

/// The GPU allocations containing any of `addresses`, each once, under one
/// look at the allocations (a dispatch's kernel arguments).
pub(crate) fn device_regions(addresses: impl IntoIterator<Item = usize>) -> Vec<Region> {
    let st = state();
    let mut found: Vec<Region> = Vec::new();
    for ptr in addresses {
        let Some(c) = st.containing(ptr) else {
            continue;
        };
        if !agents::is_gpu_memory(c.pool) || found.iter().any(|r| r.base == c.base) {
            continue;
        }
        let Some(a) = st.allocations.get(&c.base) else {
            continue;
        };
        let Some((mapping, offset)) = st.memfd_of(a) else {
            continue;
        };
        found.push(Region {
            fd: mapping.fd,
            data_len: mapping.len as u64,
            offset,
            size: a.size as u64,
            base: c.base,
        });
    }
    found
}

/// Export data of the allocation whose base is exactly `ptr`.
pub(crate) fn export_info(ptr: *const c_void) -> Option<(Containing, ExportInfo)> {
    let st = state();
    let a = st.allocations.get(&(ptr as usize))?;
    let c = Containing {
        base: ptr as usize,
        size: a.size,
        pool: a.pool,
    };
    let (m, offset) = st.memfd_of(a)?;
    let info = ExportInfo {
        fd: m.fd,
        inode: m.inode,
        offset,
        size: a.size as u64,
        serial: a.serial,
    };
    Some((c, info))
}

// --- API entries ----------------------------------------------------------

/// # Safety
/// `ptr` is null or valid for writes of one pointer.
pub(crate) unsafe fn pool_allocate(
    pool: hsa_amd_memory_pool_t,
    size: usize,
    _flags: u32,
    ptr: *mut *mut c_void,
) -> hsa_status_t {
    if agents::pool_info(pool).is_none() {
        return HSA_STATUS_ERROR_INVALID_MEMORY_POOL;
    }
    if agents::is_group_pool(pool) {
        // As ROCr: RUNTIME_ALLOC_ALLOWED is false for the group segment.
        return HSA_STATUS_ERROR_INVALID_ALLOCATION;
    }
    if ptr.is_null() || size == 0 {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    match state().allocate(pool, size) {
        Some(base) => {
            // SAFETY: ptr is a non-null out pointer supplied by the caller.
            unsafe { ptr.write(base as *mut c_void) };
            HSA_STATUS_SUCCESS
        }
        None => HSA_STATUS_ERROR_OUT_OF_RESOURCES,
    }
}

pub(crate) fn pool_free(ptr: *mut c_void) -> hsa_status_t {
    if ptr.is_null() {
        return HSA_STATUS_SUCCESS;
    }
    if state().free(ptr as usize) {
        HSA_STATUS_SUCCESS
    } else {
        HSA_STATUS_ERROR_INVALID_ALLOCATION
    }
}

/// # Safety
/// `dst` and `src` are null or valid for `size` bytes (writes, reads).
pub(crate) unsafe fn memory_copy(
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
) -> hsa_status_t {
    if size == 0 {
        return HSA_STATUS_SUCCESS;
    }
    if dst.is_null() || src.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    // The copy engine reaches GPU memory; the calling thread does not.
    let _engine = DeviceAccess::enter();
    // SAFETY: the caller guarantees both ranges are valid for `size` bytes.
    unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, size) };
    HSA_STATUS_SUCCESS
}

/// # Safety
/// `agents` is null or holds `num_agents` agents.
pub(crate) unsafe fn agents_allow_access(
    num_agents: u32,
    agents: *const hsa_agent_t,
    _flags: *const u32,
    ptr: *const c_void,
) -> hsa_status_t {
    if num_agents == 0 || agents.is_null() || ptr.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: the caller passes num_agents agents.
    let list = unsafe { std::slice::from_raw_parts(agents, num_agents as usize) };
    if !list.iter().all(|a| agents::is_agent(*a)) {
        return HSA_STATUS_ERROR_INVALID_AGENT;
    }
    let mut st = state();
    if let Some(c) = st.containing(ptr as usize) {
        // A GPU's memory opened to another GPU: its pages get the peers' key.
        if let Some(owner) = agents::gpu_memory_index(c.pool)
            && agents::reach_of(owner, list.iter().copied()) == Reach::Peers
        {
            let len = c.size.div_ceil(PAGE) * PAGE;
            // SAFETY: the pages of one of our allocations, mapped read-write.
            if let Err(why) = unsafe { device_access::protect(c.base, len, Reach::Peers) } {
                eprintln!("hsa-cpu: cannot open GPU memory to peers: {why}");
                return HSA_STATUS_ERROR;
            }
            if let Some(Backing::Fragment { block, .. }) =
                st.allocations.get(&c.base).map(|a| &a.backing)
            {
                let block = *block;
                if let Some(b) = st.blocks.get_mut(&block) {
                    b.opened_to_peers = true;
                }
            }
        }
        return HSA_STATUS_SUCCESS;
    }
    let locked = st
        .locked
        .range(..=ptr as usize)
        .next_back()
        .is_some_and(|(b, s)| (ptr as usize) < b + s);
    if locked {
        HSA_STATUS_SUCCESS
    } else {
        HSA_STATUS_ERROR_INVALID_ARGUMENT
    }
}

/// Pins a host range: the agent address is the host address itself.
///
/// # Safety
/// `agent_ptr` is null or valid for writes of one pointer.
pub(crate) unsafe fn memory_lock(
    host_ptr: *mut c_void,
    size: usize,
    _agents: *mut hsa_agent_t,
    _num: i32,
    agent_ptr: *mut *mut c_void,
) -> hsa_status_t {
    if host_ptr.is_null() || size == 0 || agent_ptr.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    state().locked.insert(host_ptr as usize, size);
    // SAFETY: agent_ptr is a non-null out pointer supplied by the caller.
    unsafe { agent_ptr.write(host_ptr) };
    HSA_STATUS_SUCCESS
}

/// # Safety
/// `agent_ptr` is null or valid for writes of one pointer.
pub(crate) unsafe fn memory_lock_to_pool(
    host_ptr: *mut c_void,
    size: usize,
    agents: *mut hsa_agent_t,
    num: i32,
    pool: hsa_amd_memory_pool_t,
    _flags: u32,
    agent_ptr: *mut *mut c_void,
) -> hsa_status_t {
    if agents::pool_info(pool).is_none() {
        return HSA_STATUS_ERROR_INVALID_MEMORY_POOL;
    }
    // SAFETY: `agent_ptr` as our own contract says.
    unsafe { memory_lock(host_ptr, size, agents, num, agent_ptr) }
}

pub(crate) fn memory_unlock(host_ptr: *mut c_void) -> hsa_status_t {
    state().locked.remove(&(host_ptr as usize));
    HSA_STATUS_SUCCESS
}

/// How pointer info describes memory this module does not own: an IPC
/// attachment (`ipc`), virtual memory (`virtual_memory`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Described {
    pub type_: hsa_amd_pointer_type_t,
    pub base: usize,
    pub size: usize,
    pub owner: hsa_agent_t,
    pub flags: u32,
}

/// Writes the first `info->size` bytes of the description of `ptr`.
/// `described_elsewhere` describes an address that no pool allocation or
/// locked range holds (`ipc` and `virtual_memory` own those; memory never reaches
/// into them).
///
/// # Safety
/// `info` must be valid for `info->size` bytes; `accessible`/`num` may be null.
pub(crate) unsafe fn pointer_info(
    ptr: *const c_void,
    info: *mut hsa_amd_pointer_info_t,
    alloc: Option<unsafe extern "C" fn(usize) -> *mut c_void>,
    num_agents_accessible: *mut u32,
    accessible: *mut *mut hsa_agent_t,
    described_elsewhere: impl FnOnce(usize) -> Option<Described>,
) -> hsa_status_t {
    if info.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: info is non-null and starts with the caller-set size field.
    let caller_size = unsafe { (*info).size } as usize;
    let mut out = hsa_amd_pointer_info_t::default();
    let p = ptr as usize;
    let mut agents_list: &[hsa_agent_t] = &[];
    {
        let st = state();
        if let Some(c) = st.containing(p) {
            let (owner, flags) = agents::pool_info(c.pool).unwrap_or((agents::CPU_AGENT, 0));
            out.type_ = HSA_EXT_POINTER_TYPE_HSA;
            out.agentBaseAddress = c.base as *mut c_void;
            out.hostBaseAddress = c.base as *mut c_void;
            out.sizeInBytes = recorded_size(crate::tools::served_abi::layout_abi(), c.size);
            out.agentOwner = owner;
            out.global_flags = flags;
            agents_list = agents::all();
        } else if let Some((b, s)) = st
            .locked
            .range(..=p)
            .next_back()
            .filter(|(b, s)| p < *b + *s)
        {
            out.type_ = HSA_EXT_POINTER_TYPE_LOCKED;
            out.agentBaseAddress = *b as *mut c_void;
            out.hostBaseAddress = *b as *mut c_void;
            out.sizeInBytes = *s;
            out.agentOwner = agents::CPU_AGENT;
            out.global_flags = HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED;
            agents_list = agents::all();
        } else if let Some(d) = described_elsewhere(p) {
            out.type_ = d.type_;
            out.agentBaseAddress = d.base as *mut c_void;
            out.hostBaseAddress = d.base as *mut c_void;
            out.sizeInBytes = d.size;
            out.agentOwner = d.owner;
            out.global_flags = d.flags;
            agents_list = agents::all();
        }
    }
    let n = caller_size.min(std::mem::size_of::<hsa_amd_pointer_info_t>());
    // SAFETY: copy everything after the size field, up to the caller's size.
    unsafe {
        if n > 4 {
            std::ptr::copy_nonoverlapping(
                (&raw const out as *const u8).add(4),
                (info as *mut u8).add(4),
                n - 4,
            );
        }
    }
    if !num_agents_accessible.is_null() {
        // SAFETY: non-null out pointer supplied by the caller.
        unsafe { num_agents_accessible.write(agents_list.len() as u32) };
    }
    if let (Some(alloc), false) = (alloc, accessible.is_null()) {
        // SAFETY: the caller's allocator returns storage for the agents list.
        unsafe {
            let buf = alloc(std::mem::size_of_val(agents_list).max(1)) as *mut hsa_agent_t;
            if !buf.is_null() {
                std::ptr::copy_nonoverlapping(agents_list.as_ptr(), buf, agents_list.len());
            }
            accessible.write(buf);
        }
    }
    HSA_STATUS_SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_finds_the_first_free_run() {
        assert_eq!(first_fit(&[true, false, true, false, false], 2), Some(3));
        assert_eq!(first_fit(&[true, false, true], 2), None);
        assert_eq!(first_fit(&[false; 4], 4), Some(0));
    }
}
