//! The replay process (`ditto replay-dispatch`, started by `ditto replay`,
//! one per dispatch): runs one captured dispatch again on the HSA runtime
//! and writes what it produced into a work directory.
//!
//! In order: the captured ranges are held (PROT_NONE placeholders, before
//! anything large is allocated and before the runtime starts, which would
//! otherwise take addresses there); the runtime is loaded; each range is
//! reserved at its original address (`hsa_amd_vmem_address_reserve`,
//! which gives another address, with SUCCESS, when that one is taken: the
//! range is then relocated and the pointer arguments into it rewritten;
//! without the virtual-memory API, as in ROCr's model mode, every range is
//! allocated from the pool and relocated),
//! backed by a handle of the GPU's memory, mapped and made accessible to
//! the GPU; the images are copied in, and once more into pristine device
//! copies; the code object is loaded and frozen and the module variables
//! written by name; the kernel-argument bytes go into kernarg memory.
//! Each iteration restores the memory from the pristine copies (not from
//! disk), dispatches on a queue with profiling and a queue callback, and
//! waits with a deadline; the first iteration's outputs are copied out.
//!
//! Owns the replay's runtime work; a fault ends this process, never its
//! parent: the parent reads the exit status and this process's stderr.

use super::outcome::{ChildArgs, Placed, relocate};
use super::plan::{DispatchPlan, PAGE, plan};
use super::runtime::{ReplayRuntime, RuntimeError, Staging};
use crate::store::Snapshot;
use anyhow::{Context, Result, anyhow, bail};
use hsa::*;
use std::ffi::{CString, c_void};
use std::time::{Duration, Instant};

/// Runs the replay process's work.
pub fn replay_dispatch(args: &ChildArgs) -> Result<()> {
    let snapshot = Snapshot::load(&args.snapshot)
        .with_context(|| format!("reading the snapshot {}", args.snapshot.display()))?;
    let plan = plan(&snapshot, args.rank, args.index)?;
    // Read by the rule of every file replay reads: the captured one
    // through the snapshot's directory and checked against its digest.
    let (code_path, code) = match (&args.kernel_object, &plan.code_object) {
        (Some(path), _) => (
            path.clone(),
            super::inputs::named_file(path, "a code object")?,
        ),
        (None, Some(path)) => (
            path.clone(),
            super::inputs::captured_code_object(&snapshot, &plan)?
                .ok_or_else(|| anyhow!("dispatch {} has no code object", args.index))?,
        ),
        (None, None) => bail!(
            "dispatch {} has no code object: {}",
            args.index,
            plan.launch
                .code_object_missing
                .as_deref()
                .unwrap_or("none was captured")
        ),
    };
    if args.kernel_object.is_none() {
        super::plan::check_kernarg(&plan, &code, &code_path)?;
    }
    if super::cuda_child::is_cubin(&code) {
        let arrays = snapshot.load_dispatch(&plan.record)?;
        return super::cuda_child::replay(args, &plan, &arrays, &code);
    }
    // Before anything large is allocated: the captured ranges are held.
    let placeholders = Placeholders::hold(&plan.ranges);
    let arrays = snapshot.load_dispatch(&plan.record)?;
    preload_host_build_runtime();
    let rt = ReplayRuntime::load(&args.runtime)?;
    let gpu = *rt.gpus.first().ok_or_else(|| {
        anyhow!(
            "the HSA runtime {} has no GPU agent",
            args.runtime.display()
        )
    })?;
    let device_pool = rt
        .pool_with(gpu, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED)
        .or_else(|| rt.pool_with(gpu, u32::MAX))
        .ok_or_else(|| anyhow!("the GPU agent has no pool to allocate from"))?;
    let kernarg_pool = rt
        .pool_with(rt.cpu, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT)
        .ok_or_else(|| anyhow!("the runtime has no kernarg pool"))?;

    // Memory at the captured addresses, else relocated (with `relocate`,
    // the placeholders keep the addresses taken until every range is placed).
    let keep_taken = match args.relocate {
        true => Some(placeholders),
        false => {
            drop(placeholders);
            None
        }
    };
    let mut placed: Vec<Placed> = Vec::new();
    for &(start, size) in &plan.ranges {
        placed.push(place_range(&rt, gpu, device_pool, start, size)?);
    }
    drop(keep_taken);
    let staging = rt.staging(gpu, args.timeout)?;
    for image in plan.images.iter().filter(|i| i.variable.is_none()) {
        let bytes = &arrays[image.position].1.bytes;
        rt.write_from_host(&staging, relocate(&placed, image.base), bytes)
            .with_context(|| format!("restoring allocation 0x{:x}", image.base))?;
    }
    let pristine = Pristine::take(&rt, &staging, device_pool, &placed)?;

    // The kernel.
    let kernel = load_kernel(&rt, gpu, &code, &plan.launch.symbol).with_context(|| {
        format!(
            "loading `{}` from {}",
            plan.launch.symbol,
            code_path.display()
        )
    })?;
    let mut variables_missing = Vec::new();
    let mut variables = Vec::new();
    for image in plan.images.iter() {
        let Some(name) = &image.variable else {
            continue;
        };
        match kernel.variable(&rt, gpu, name) {
            Some((address, size)) => {
                let bytes = &arrays[image.position].1.bytes;
                let len = bytes.len().min(size as usize);
                variables.push((address, &bytes[..len]));
            }
            None => variables_missing.push(name.clone()),
        }
    }
    let restore_variables = |rt: &ReplayRuntime| -> Result<(), RuntimeError> {
        for &(address, bytes) in &variables {
            rt.write_from_host(&staging, address, bytes)?;
        }
        Ok(())
    };
    restore_variables(&rt)?;

    // Kernel arguments, pointers into relocated ranges rewritten.
    let mut kernarg = plan.kernarg.clone();
    if placed.iter().any(|p| p.at != p.original) {
        for offset in pointer_offsets(&code, &plan.launch.symbol) {
            let Some(slot) = kernarg.get_mut(offset..offset + 8) else {
                continue;
            };
            let old = u64::from_le_bytes(slot.try_into().expect("8 bytes"));
            slot.copy_from_slice(&relocate(&placed, old).to_le_bytes());
        }
    }
    let kernarg_len = kernarg.len().max(kernel.kernarg_size as usize).max(16);
    let kernarg_at = allocate(&rt, kernarg_pool, kernarg_len as u64)?;
    // SAFETY: a fresh kernarg allocation of `kernarg_len` bytes, host-visible.
    unsafe {
        std::ptr::write_bytes(kernarg_at as *mut u8, 0, kernarg_len);
        std::ptr::copy_nonoverlapping(kernarg.as_ptr(), kernarg_at as *mut u8, kernarg.len());
    }
    let agents = [gpu];
    // SAFETY: the runtime's entry on its own allocation.
    let st = unsafe {
        (rt.allow_access)(
            1,
            agents.as_ptr(),
            std::ptr::null(),
            kernarg_at as *const c_void,
        )
    };
    rt.check("hsa_amd_agents_allow_access", st)?;

    let queue = Queue::create(&rt, gpu)?;
    let hz = rt.timestamp_hz();
    let mut times_ns = Vec::new();
    let mut outputs = Vec::new();
    for iteration in 0..args.iterations.max(1) {
        if iteration > 0 {
            pristine.restore(&rt, &staging, &placed)?;
            restore_variables(&rt)?;
        }
        let ticks = queue.dispatch(&rt, gpu, &plan, &kernel, kernarg_at, args.timeout)?;
        times_ns.push(ticks.map(|t| (t as u128 * 1_000_000_000 / hz as u128) as u64));
        if iteration == 0 {
            for out in &plan.outputs {
                let mut bytes = vec![0u8; out.extent as usize];
                rt.read_to_host(&staging, &mut bytes, relocate(&placed, out.address))
                    .with_context(|| format!("reading argument {}", out.arg))?;
                outputs.push(args.write_output(out.arg, &bytes)?);
            }
        }
    }
    args.write_result(times_ns, &placed, variables_missing, outputs)?;
    Ok(())
}

/// Each placed range as it was before the first iteration, restored
/// before each later one: a copy in the GPU's memory (`hsa_memory_copy`);
/// in ROCr's model mode, whose device-to-device copies run ROCr's own blit
/// kernels (which the model GPU cannot name), a copy in host memory.
enum Pristine {
    Device(Vec<u64>),
    Host(Vec<Vec<u8>>),
}

impl Pristine {
    fn take(
        rt: &ReplayRuntime,
        staging: &Staging,
        pool: hsa_amd_memory_pool_t,
        placed: &[Placed],
    ) -> Result<Pristine, RuntimeError> {
        if std::env::var_os("HSA_MODEL_TOPOLOGY").is_some() {
            let copies = placed
                .iter()
                .map(|p| {
                    let mut bytes = vec![0u8; p.size as usize];
                    rt.read_to_host(staging, &mut bytes, p.at)?;
                    Ok(bytes)
                })
                .collect::<Result<_, RuntimeError>>()?;
            return Ok(Pristine::Host(copies));
        }
        let copies = placed
            .iter()
            .map(|p| {
                let copy = allocate(rt, pool, p.size)?;
                rt.copy(copy, p.at, p.size as usize)?;
                Ok(copy)
            })
            .collect::<Result<_, RuntimeError>>()?;
        Ok(Pristine::Device(copies))
    }

    fn restore(
        &self,
        rt: &ReplayRuntime,
        staging: &Staging,
        placed: &[Placed],
    ) -> Result<(), RuntimeError> {
        match self {
            Pristine::Device(copies) => {
                for (p, &copy) in placed.iter().zip(copies) {
                    rt.copy(p.at, copy, p.size as usize)?;
                }
            }
            Pristine::Host(copies) => {
                for (p, bytes) in placed.iter().zip(copies) {
                    rt.write_from_host(staging, p.at, bytes)?;
                }
            }
        }
        Ok(())
    }
}

/// On ditto's CPU runtime a kernel's host implementation lives in the
/// program's host build (`DITTO_HIP_HOST_KERNELS`), a library linked
/// against the HIP runtime as the program was: the HIP runtime is loaded
/// first, globally, so that the host build's references to it resolve
/// (its HSA runtime is the one `LD_LIBRARY_PATH` names, the same file the
/// replay loads). Nothing is called in it. Not found: the runtime's own
/// message says what the host build lacks.
fn preload_host_build_runtime() {
    if std::env::var_os("DITTO_HIP_HOST_KERNELS").is_none() {
        return;
    }
    for name in [
        c"libamdhip64.so.7",
        c"libamdhip64.so.6",
        c"libamdhip64.so.5",
        c"libamdhip64.so",
    ] {
        // SAFETY: a valid C string; the library is kept loaded for good.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if !handle.is_null() {
            return;
        }
    }
}

/// PROT_NONE mappings holding the captured ranges until the runtime's
/// reservations take their place; each one that could be placed exactly.
struct Placeholders(Vec<(u64, u64)>);

impl Placeholders {
    fn hold(ranges: &[(u64, u64)]) -> Placeholders {
        let mut held = Vec::new();
        for &(start, size) in ranges {
            // SAFETY: a new anonymous mapping that replaces nothing
            // (MAP_FIXED_NOREPLACE fails where anything is mapped).
            let p = unsafe {
                libc::mmap(
                    start as *mut c_void,
                    size as usize,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE
                        | libc::MAP_ANONYMOUS
                        | libc::MAP_NORESERVE
                        | libc::MAP_FIXED_NOREPLACE,
                    -1,
                    0,
                )
            };
            if p == start as *mut c_void {
                held.push((start, size));
            } else if p != libc::MAP_FAILED {
                // An old kernel took the address as a hint only.
                // SAFETY: the mapping just made, elsewhere.
                unsafe { libc::munmap(p, size as usize) };
            }
        }
        Placeholders(held)
    }
}

impl Drop for Placeholders {
    fn drop(&mut self) {
        for &(start, size) in &self.0 {
            // SAFETY: our own placeholder mapping.
            unsafe { libc::munmap(start as *mut c_void, size as usize) };
        }
    }
}

/// Reserves `size` bytes at `start` (or wherever the runtime gives),
/// backs them with GPU memory and gives the GPU access. A runtime without
/// the virtual-memory API (ROCr below KFD 1.15, ROCr's model mode) gives
/// no say in the address: the range is allocated from the pool wherever
/// it lands, and relocated.
fn place_range(
    rt: &ReplayRuntime,
    gpu: hsa_agent_t,
    pool: hsa_amd_memory_pool_t,
    start: u64,
    size: u64,
) -> Result<Placed, RuntimeError> {
    if !rt.virtual_memory_api() {
        return Ok(Placed {
            original: start,
            at: allocate(rt, pool, size)?,
            size,
        });
    }
    let mut va: *mut c_void = std::ptr::null_mut();
    // SAFETY: the runtime's entry with a valid out-pointer.
    let st = unsafe { (rt.reserve)(&mut va, size as usize, start, 0) };
    rt.check("hsa_amd_vmem_address_reserve", st)?;
    let mut handle = hsa_amd_vmem_alloc_handle_t::default();
    // SAFETY: as above.
    let st = unsafe { (rt.handle_create)(pool, size as usize, MEMORY_TYPE_NONE, 0, &mut handle) };
    rt.check("hsa_amd_vmem_handle_create", st)?;
    // SAFETY: `va` is our reservation of `size` bytes, `handle` as large.
    let st = unsafe { (rt.map)(va, size as usize, 0, handle, 0) };
    rt.check("hsa_amd_vmem_map", st)?;
    let access = [hsa_amd_memory_access_desc_t {
        permissions: HSA_ACCESS_PERMISSION_RW,
        agent_handle: gpu,
    }];
    // SAFETY: the mapping just made; one descriptor.
    let st = unsafe { (rt.set_access)(va, size as usize, access.as_ptr(), access.len()) };
    rt.check("hsa_amd_vmem_set_access", st)?;
    Ok(Placed {
        original: start,
        at: va as u64,
        size,
    })
}

fn allocate(
    rt: &ReplayRuntime,
    pool: hsa_amd_memory_pool_t,
    size: u64,
) -> Result<u64, RuntimeError> {
    let mut p: *mut c_void = std::ptr::null_mut();
    let size = size.div_ceil(PAGE) * PAGE;
    // SAFETY: the runtime's entry with a valid out-pointer.
    let st = unsafe { (rt.pool_allocate)(pool, size as usize, 0, &mut p) };
    rt.check("hsa_amd_memory_pool_allocate", st)?;
    Ok(p as u64)
}

/// The loaded kernel.
struct LoadedKernel {
    executable: hsa_executable_t,
    object: u64,
    kernarg_size: u32,
    group_size: u32,
    private_size: u32,
}

fn symbol_u32(rt: &ReplayRuntime, symbol: hsa_executable_symbol_t, attribute: u32) -> u32 {
    let mut v: u32 = 0;
    // SAFETY: a u32 attribute of a live symbol.
    unsafe { (rt.symbol_info)(symbol, attribute, (&mut v as *mut u32).cast()) };
    v
}

/// Loads `code` for `gpu`, freezes it and finds `symbol`.
fn load_kernel(
    rt: &ReplayRuntime,
    gpu: hsa_agent_t,
    code: &[u8],
    symbol: &str,
) -> Result<LoadedKernel> {
    let mut reader = hsa_code_object_reader_t::default();
    // SAFETY: `code` outlives the reader's use (load below).
    let st = unsafe { (rt.reader_from_memory)(code.as_ptr().cast(), code.len(), &mut reader) };
    rt.check("hsa_code_object_reader_create_from_memory", st)?;
    let mut executable = hsa_executable_t::default();
    // SAFETY: the runtime's entry with a valid out-pointer.
    let st = unsafe {
        (rt.executable_create)(
            HSA_PROFILE_FULL,
            HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT,
            std::ptr::null(),
            &mut executable,
        )
    };
    rt.check("hsa_executable_create_alt", st)?;
    // SAFETY: a live executable and reader.
    let st = unsafe {
        (rt.load_code_object)(
            executable,
            gpu,
            reader,
            std::ptr::null(),
            std::ptr::null_mut(),
        )
    };
    if st != HSA_STATUS_SUCCESS {
        bail!(
            "the runtime refused the code object ({}): is it built for this GPU's target?",
            rt.describe(st)
        );
    }
    // SAFETY: as above.
    let st = unsafe { (rt.freeze)(executable, std::ptr::null()) };
    rt.check("hsa_executable_freeze", st)?;
    let name = CString::new(symbol).context("symbol name")?;
    let mut sym = hsa_executable_symbol_t::default();
    // SAFETY: a frozen executable, a C string and an out-pointer.
    let st = unsafe { (rt.symbol_by_name)(executable, name.as_ptr(), &gpu, &mut sym) };
    if st != HSA_STATUS_SUCCESS {
        bail!(
            "the code object has no kernel `{symbol}` ({})",
            rt.describe(st)
        );
    }
    let mut object: u64 = 0;
    // SAFETY: KERNEL_OBJECT writes a u64.
    unsafe {
        (rt.symbol_info)(
            sym,
            HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT,
            (&mut object as *mut u64).cast(),
        )
    };
    Ok(LoadedKernel {
        executable,
        object,
        kernarg_size: symbol_u32(
            rt,
            sym,
            HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE,
        ),
        group_size: symbol_u32(
            rt,
            sym,
            HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE,
        ),
        private_size: symbol_u32(
            rt,
            sym,
            HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE,
        ),
    })
}

impl LoadedKernel {
    /// A module variable's address and size in the loaded executable.
    fn variable(&self, rt: &ReplayRuntime, gpu: hsa_agent_t, name: &str) -> Option<(u64, u64)> {
        let c = CString::new(name).ok()?;
        let mut sym = hsa_executable_symbol_t::default();
        // SAFETY: a frozen executable, a C string and an out-pointer.
        let st = unsafe { (rt.symbol_by_name)(self.executable, c.as_ptr(), &gpu, &mut sym) };
        if st != HSA_STATUS_SUCCESS {
            return None;
        }
        let mut address: u64 = 0;
        // SAFETY: VARIABLE_ADDRESS writes a u64.
        let st = unsafe {
            (rt.symbol_info)(
                sym,
                HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS,
                (&mut address as *mut u64).cast(),
            )
        };
        let size = symbol_u32(rt, sym, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE);
        (st == HSA_STATUS_SUCCESS && address != 0).then_some((address, u64::from(size)))
    }
}

/// Offsets of the kernel's pointer arguments (`global_buffer`), from the
/// code object's metadata; none when it has none.
pub fn pointer_offsets(code: &[u8], symbol: &str) -> Vec<usize> {
    let Ok(Some(kernels)) = ditto_kernels::parse_code_object(code) else {
        return Vec::new();
    };
    kernels
        .iter()
        .filter(|k| k.symbol == symbol)
        .flat_map(|k| k.explicit_args().to_vec())
        .filter(|a| a.value_kind == "global_buffer" && a.size == 8)
        .map(|a| a.offset as usize)
        .collect()
}

/// The replay's queue, with profiling and an error callback.
struct Queue {
    queue: *mut hsa_queue_t,
    signal: hsa_signal_t,
}

/// The queue's error callback: the runtime suspended the queue; the
/// dispatch will never complete. Said on stderr, then this process ends.
unsafe extern "C" fn queue_error(status: hsa_status_t, _queue: *mut hsa_queue_t, _: *mut c_void) {
    eprintln!(
        "ditto replay: the runtime reported a queue error (status 0x{status:x}) while the kernel ran"
    );
    std::process::exit(3);
}

impl Queue {
    fn create(rt: &ReplayRuntime, gpu: hsa_agent_t) -> Result<Queue, RuntimeError> {
        let mut queue: *mut hsa_queue_t = std::ptr::null_mut();
        // SAFETY: the runtime's entry; the callback never unwinds.
        let st = unsafe {
            (rt.queue_create)(
                gpu,
                64,
                HSA_QUEUE_TYPE_SINGLE,
                Some(queue_error),
                std::ptr::null_mut(),
                u32::MAX,
                u32::MAX,
                &mut queue,
            )
        };
        rt.check("hsa_queue_create", st)?;
        // SAFETY: a live queue.
        let st = unsafe { (rt.profiling_enable)(queue, 1) };
        rt.check("hsa_amd_profiling_set_profiler_enabled", st)?;
        let mut signal = hsa_signal_t::default();
        // SAFETY: the runtime's entry with a valid out-pointer.
        let st = unsafe { (rt.signal_create)(1, 0, std::ptr::null(), &mut signal) };
        rt.check("hsa_signal_create", st)?;
        Ok(Queue { queue, signal })
    }

    /// Dispatches the kernel once and waits for it: its time in the
    /// runtime's timestamp ticks (`None` where it gave none).
    fn dispatch(
        &self,
        rt: &ReplayRuntime,
        gpu: hsa_agent_t,
        plan: &DispatchPlan,
        kernel: &LoadedKernel,
        kernarg: u64,
        timeout: Duration,
    ) -> Result<Option<u64>> {
        let d = &plan.record;
        // SAFETY: our signal.
        unsafe { (rt.signal_store)(self.signal, 1) };
        let dimensions: u16 = if d.grid[2] > 1 || d.block[2] > 1 {
            3
        } else if d.grid[1] > 1 || d.block[1] > 1 {
            2
        } else {
            1
        };
        let packet = hsa_kernel_dispatch_packet_t {
            header: (HSA_PACKET_TYPE_KERNEL_DISPATCH << HSA_PACKET_HEADER_TYPE)
                | (1 << HSA_PACKET_HEADER_BARRIER)
                | (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE)
                | (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE),
            setup: dimensions,
            workgroup_size_x: d.block[0] as u16,
            workgroup_size_y: d.block[1] as u16,
            workgroup_size_z: d.block[2] as u16,
            grid_size_x: d.grid[0],
            grid_size_y: d.grid[1],
            grid_size_z: d.grid[2],
            private_segment_size: plan.launch.private_segment_size.max(kernel.private_size),
            group_segment_size: plan.launch.group_segment_size.max(kernel.group_size),
            kernel_object: kernel.object,
            kernarg_address: kernarg as *mut c_void,
            completion_signal: self.signal,
            ..Default::default()
        };
        // SAFETY: a live queue of ours: the slot at the reserved index is ours
        // to fill; the doorbell is the queue's.
        unsafe {
            let index = (rt.add_write_index)(self.queue, 1);
            let q = &*self.queue;
            let slot = (q.base_address as *mut AqlPacket).add((index % q.size as u64) as usize);
            publish(slot, &AqlPacket::from_dispatch(&packet));
            (rt.signal_store)(q.doorbell_signal, index as i64);
        }
        let deadline = Instant::now() + timeout;
        loop {
            // SAFETY: our signal; a bounded wait.
            let value = unsafe {
                (rt.signal_wait)(
                    self.signal,
                    HSA_SIGNAL_CONDITION_LT,
                    1,
                    rt.timestamp_hz() / 10,
                    HSA_WAIT_STATE_BLOCKED,
                )
            };
            if value < 1 {
                break;
            }
            if Instant::now() >= deadline {
                bail!(
                    "the kernel did not complete within {} s (a hang, or a fault the runtime \
                     kept to the queue); raise --timeout if it is only slow",
                    timeout.as_secs()
                );
            }
        }
        let mut time = hsa_amd_profiling_dispatch_time_t::default();
        // SAFETY: a completed dispatch's signal, a valid out-pointer.
        let st = unsafe { (rt.dispatch_time)(gpu, self.signal, &mut time) };
        Ok((st == HSA_STATUS_SUCCESS && time.end > time.start).then(|| time.end - time.start))
    }
}
