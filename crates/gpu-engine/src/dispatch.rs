//! Kernel execution: turns one kernel-dispatch packet into calls of the
//! kernel's host entry (include/ditto_hsa_cpu.h, code-object ABI 2; for a
//! kernel of an AMDGPU code object, its host build's entry), one per
//! chunk of work-groups, run in parallel by `group_workers`; returns only
//! when every chunk has returned. A cooperative dispatch (a packet of a
//! cooperative queue) runs every group at once instead, each on a thread of
//! its own, with the grid barrier their grid-wide syncs wait at
//! (`grid_barrier`). A CLR blit kernel runs as one call of `blit_kernels`;
//! a kernel that cannot run fails with its message on stderr. Owns how a
//! live kernel runs (`KernelRun`, the record `executables` registers per
//! kernel descriptor); the C ABI of the entry call is the CPU code
//! object's (`cpu`).
//! Runs only the record it is handed (the packet processor looks
//! KERNEL_OBJECT up in `executables`' registry of live kernel descriptors),
//! so it never jumps to an address that is not the entry of a live kernel,
//! and never uses `executables` or `queues` itself.
//! Every entry call runs marked with its queue's id
//! (`kernel_faults::RunningKernel`): an entry whose code faults never
//! returns, so neither does `run`, as a faulting dispatch never completes
//! on a GPU. Blit kernels (the runtime's own code) run unmarked: a fault
//! there acts as before.

use crate::blit_kernels::Blit;
use crate::cpu::{CpuDispatch, KernelEntry, Library};
use crate::device_access::DeviceAccess;
use crate::group_workers;
use crate::kernel_faults::RunningKernel;
use crate::limits;
use hsa::*;
use std::ffi::c_void;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// Chunks per group-running thread: enough to even out groups of unequal
/// cost, few enough that per-call costs stay small (each entry call takes a
/// set of fiber stacks from its code object's free list and sets up its
/// groups' fibers; include/ditto_hip_cpu.hpp, "Fibers").
const CHUNKS_PER_THREAD: u64 = 4;

/// How a live kernel runs.
pub enum KernelRun {
    /// A CPU code object's entry (ditto_hsa_cpu.h), also a host build's
    /// entry for a kernel of an AMDGPU code object.
    Entry {
        entry: KernelEntry,
        _library: Arc<Library>,
    },
    /// One of CLR's blit kernels, run natively.
    Blit(Blit),
    /// A kernel of an AMDGPU code object that cannot run here: the message
    /// printed when it is dispatched.
    Missing(String),
}

/// A live kernel, as `executables` registers it under its descriptor.
pub struct KernelRecord {
    pub run: KernelRun,
}

/// Work-groups of the packet's grid (gridDim per dimension multiplied,
/// dimensions past `setup` count as 1, as the entry does). Ok(0) for an
/// empty grid or a zero work-group size (the entry then refuses or runs
/// nothing); Err when the count does not fit in 64 bits.
fn total_groups(d: &hsa_kernel_dispatch_packet_t) -> Result<u64, ()> {
    let dims = match d.setup & 3 {
        0 => 1,
        n => n as usize,
    };
    let grid = [d.grid_size_x, d.grid_size_y, d.grid_size_z];
    let group = [d.workgroup_size_x, d.workgroup_size_y, d.workgroup_size_z];
    let mut total = 1u64;
    for i in 0..dims {
        if group[i] == 0 {
            return Ok(0);
        }
        let groups = (grid[i] as u64).div_ceil(group[i] as u64);
        total = total.checked_mul(groups).ok_or(())?;
    }
    Ok(total)
}

/// The entry call arguments, shared with the threads that run chunks, and
/// the kernel record that keeps its code object loaded.
struct SharedDispatch {
    args: CpuDispatch,
    _kernel: Option<Arc<KernelRecord>>,
}
// SAFETY: the kernarg pointer is only read by entry calls, which all return
// before `run` does (and the packet, with its kernarg, completes).
unsafe impl Send for SharedDispatch {}
// SAFETY: as above; the struct is never written after creation.
unsafe impl Sync for SharedDispatch {}

/// How a grid of `groups` groups is cut for `threads` threads: (groups per
/// chunk, chunks).
fn chunking(groups: u64, threads: usize) -> (u64, u64) {
    let wanted = (threads as u64).saturating_mul(CHUNKS_PER_THREAD).max(1);
    let per_chunk = groups.div_ceil(wanted).max(1);
    (per_chunk, groups.div_ceil(per_chunk))
}

/// Runs the dispatch of `kernel`, the live kernel the packet's
/// KERNEL_OBJECT names, on GPU `gpu` (whose memory, and memory opened to
/// peers, the kernel reaches: `device_access`): every group, on the
/// calling thread alone when there is one group or one thread, else in
/// chunks on the pool. The status is
/// reported to the queue's error callback when it is not SUCCESS (the
/// packet still completes); it is returned only after every chunk returned.
/// Every entry call runs marked as a kernel of queue `queue`
/// (`kernel_faults`): a fault of its code parks its thread, and this never
/// returns, as a faulting dispatch never completes on a GPU.
///
/// # Safety
/// `d` is a kernel-dispatch packet as the application published it: its
/// kernarg address holds the arguments `kernel` reads, and the pointers
/// among them address memory of the sizes they describe, as on a GPU.
pub unsafe fn run(
    d: &hsa_kernel_dispatch_packet_t,
    kernel: Arc<KernelRecord>,
    cooperative: bool,
    gpu: usize,
    queue: u64,
) -> hsa_status_t {
    let entry = match &kernel.run {
        KernelRun::Entry { entry, .. } => *entry,
        KernelRun::Blit(blit) => {
            let _engine = DeviceAccess::for_gpu(gpu);
            // SAFETY: the packet's kernarg holds the blit's arguments, as
            // CLR wrote them (layout checked at load).
            return match unsafe { blit.run(d.kernarg_address as *const u8) } {
                Ok(()) => HSA_STATUS_SUCCESS,
                Err(why) => {
                    eprintln!("ditto GPU engine: blit kernel {blit:?} failed: {why}");
                    HSA_STATUS_ERROR_EXCEPTION
                }
            };
        }
        KernelRun::Missing(message) => {
            eprintln!("{message}");
            return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
        }
    };
    let Ok(groups) = total_groups(d) else {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    };
    let mut args = CpuDispatch {
        grid_size: [d.grid_size_x, d.grid_size_y, d.grid_size_z],
        workgroup_size: [d.workgroup_size_x, d.workgroup_size_y, d.workgroup_size_z],
        dimensions: d.setup & 3,
        group_segment_size: d.group_segment_size,
        private_segment_size: d.private_segment_size,
        kernarg: d.kernarg_address,
        first_group: 0,
        group_count: groups,
        grid_barrier: None,
        grid_barrier_context: std::ptr::null_mut(),
    };
    let threads = group_workers::threads();
    let rc = if cooperative {
        // SAFETY: the packet's arguments as our own contract says; `kernel`
        // keeps the code object loaded for the call.
        unsafe { run_cooperative(entry, args, groups, gpu, queue) }
    } else if groups <= 1 || threads == 1 {
        // Inline: no hand-off for the tiny dispatches that dominate counts.
        let _engine = DeviceAccess::for_gpu(gpu);
        let _running = RunningKernel::enter(queue);
        // SAFETY: entry belongs to a loaded code object kept alive by
        // `kernel` (an Arc on its library) for the duration of the call.
        unsafe { entry(&args) }
    } else {
        let (per_chunk, chunks) = chunking(groups, threads);
        args.group_count = 0;
        let shared = SharedDispatch {
            args,
            _kernel: Some(kernel.clone()),
        };
        let first_error = Arc::new(AtomicI32::new(0));
        let error = first_error.clone();
        let run_chunk = move |chunk: u64| {
            let shared = &shared; // the whole struct, with its kernel record
            let first = chunk * per_chunk;
            let chunk_args = CpuDispatch {
                first_group: first,
                group_count: per_chunk.min(groups - first),
                ..shared.args
            };
            let engine = DeviceAccess::for_gpu(gpu);
            let running = RunningKernel::enter(queue);
            // SAFETY: as above; `shared` keeps the code object loaded, and
            // the ranges of the chunks are disjoint and inside the grid.
            let rc = unsafe { entry(&chunk_args) };
            drop(running);
            drop(engine);
            if rc != 0 {
                let _ = error.compare_exchange(0, rc, Ordering::Relaxed, Ordering::Relaxed);
            }
        };
        match group_workers::run(chunks, Box::new(run_chunk)) {
            Ok(()) => first_error.load(Ordering::Relaxed),
            Err(group_workers::ChunkPanicked) => -1,
        }
    };
    drop(kernel);
    if rc == 0 {
        HSA_STATUS_SUCCESS
    } else {
        HSA_STATUS_ERROR_EXCEPTION
    }
}

/// The most groups a cooperative dispatch may have: what a gfx90a can
/// keep resident at once (COOPERATIVE_COMPUTE_UNIT_COUNT compute units of
/// MAX_WAVES_PER_CU wavefronts each; every group is one wavefront or more).
pub const MAX_COOPERATIVE_GROUPS: u64 =
    limits::COMPUTE_UNITS as u64 * limits::MAX_WAVES_PER_CU as u64;

/// Stack of a cooperative group's thread: the entry and its scheduler (a
/// group's work-items run on fiber stacks of their own; a group of one
/// work-item runs on this one).
const COOPERATIVE_STACK_BYTES: usize = 1 << 20;

/// The barrier of a cooperative dispatch's groups. A group whose entry
/// call has returned (finished, or failed) leaves it, so it no longer
/// holds the others: as a finished work-item does not hold __syncthreads.
/// (On a GPU every group must reach every grid barrier or the rest hang.)
struct GridBarrier {
    state: Mutex<BarrierState>,
    released: Condvar,
}

struct BarrierState {
    participants: u64,
    arrived: u64,
    generation: u64,
}

impl GridBarrier {
    fn new(participants: u64) -> Self {
        GridBarrier {
            state: Mutex::new(BarrierState {
                participants,
                arrived: 0,
                generation: 0,
            }),
            released: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BarrierState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn release_if_complete(&self, st: &mut BarrierState) {
        if st.arrived > 0 && st.arrived >= st.participants {
            st.arrived = 0;
            st.generation += 1;
            self.released.notify_all();
        }
    }

    fn wait(&self) {
        let mut st = self.lock();
        st.arrived += 1;
        let generation = st.generation;
        self.release_if_complete(&mut st);
        while st.generation == generation {
            st = self.released.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn leave(&self) {
        let mut st = self.lock();
        st.participants -= 1;
        self.release_if_complete(&mut st);
    }
}

/// `grid_barrier` of ditto_cpu_dispatch_t.
unsafe extern "C" fn grid_barrier(context: *mut c_void) {
    if context.is_null() {
        return;
    }
    // SAFETY: the context is the dispatch's GridBarrier, alive until every
    // group's thread has returned (run_cooperative joins them all).
    let barrier = unsafe { &*(context as *const GridBarrier) };
    // A panic cannot cross this C boundary; waiting on a mutex does not panic.
    barrier.wait();
}

/// Whether the group threads may start: all were spawned (true) or one
/// could not be (false: none runs, so none waits for a missing group).
struct StartGate {
    open: Mutex<Option<bool>>,
    changed: Condvar,
}

impl StartGate {
    fn set(&self, go: bool) {
        *self.open.lock().unwrap_or_else(|e| e.into_inner()) = Some(go);
        self.changed.notify_all();
    }

    fn wait(&self) -> bool {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(go) = *open {
                return go;
            }
            open = self.changed.wait(open).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Runs every group of a cooperative dispatch at once, one thread each,
/// all started before any runs; returns the first non-zero entry result.
///
/// # Safety
/// `args` is a dispatch whose kernarg segment and the memory it points at
/// `entry` may use, as `run`'s packet; `entry` stays loaded until this
/// returns.
unsafe fn run_cooperative(
    entry: KernelEntry,
    args: CpuDispatch,
    groups: u64,
    gpu: usize,
    queue: u64,
) -> i32 {
    if groups > MAX_COOPERATIVE_GROUPS {
        eprintln!(
            "ditto GPU engine: a cooperative dispatch of {groups} work-groups: a gfx90a keeps at most \
             {MAX_COOPERATIVE_GROUPS} resident (HIP's hipLaunchCooperativeKernel checks the \
             occupancy first); the dispatch fails"
        );
        return -1;
    }
    let barrier = GridBarrier::new(groups);
    let gate = StartGate {
        open: Mutex::new(None),
        changed: Condvar::new(),
    };
    let shared = SharedDispatch {
        args: CpuDispatch {
            grid_barrier: Some(grid_barrier),
            grid_barrier_context: &barrier as *const GridBarrier as *mut c_void,
            ..args
        },
        _kernel: None,
    };
    let first_error = AtomicI32::new(0);
    std::thread::scope(|scope| {
        let mut spawned = 0u64;
        for group in 0..groups {
            let (shared, gate, barrier, first_error) = (&shared, &gate, &barrier, &first_error);
            let thread = std::thread::Builder::new()
                .name(format!("hsa-cpu-coop-{group}"))
                .stack_size(COOPERATIVE_STACK_BYTES)
                .spawn_scoped(scope, move || {
                    if !gate.wait() {
                        return;
                    }
                    let group_args = CpuDispatch {
                        first_group: group,
                        group_count: 1,
                        ..shared.args
                    };
                    let engine = DeviceAccess::for_gpu(gpu);
                    let running = RunningKernel::enter(queue);
                    // SAFETY: the caller's kernel record keeps the code
                    // object loaded until this scope has joined every
                    // thread; the group is inside the grid.
                    let rc = unsafe { entry(&group_args) };
                    drop(running);
                    drop(engine);
                    barrier.leave();
                    if rc != 0 {
                        let _ = first_error.compare_exchange(
                            0,
                            rc,
                            Ordering::Relaxed,
                            Ordering::Relaxed,
                        );
                    }
                });
            if thread.is_err() {
                break;
            }
            spawned += 1;
        }
        if spawned < groups {
            eprintln!(
                "ditto GPU engine: a cooperative dispatch of {groups} work-groups: could start only \
                 {spawned} threads (one per group runs at once); the dispatch fails"
            );
            first_error.store(-1, Ordering::Relaxed);
        }
        gate.set(spawned == groups);
    });
    first_error.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_every_group_once_in_about_four_per_thread() {
        for (groups, threads) in [(2u64, 2usize), (64, 4), (256, 2), (1000, 3), (7, 16)] {
            let (per_chunk, chunks) = chunking(groups, threads);
            assert!(per_chunk * chunks >= groups && per_chunk * (chunks - 1) < groups);
            assert!(
                chunks <= (threads as u64 * CHUNKS_PER_THREAD).max(1),
                "{groups} {threads}"
            );
        }
        assert_eq!(chunking(64, 4), (4, 16));
        assert_eq!(chunking(256, 2), (32, 8));
    }

    #[test]
    fn group_count_multiplies_the_dimensions_the_packet_declares() {
        let mut d = hsa_kernel_dispatch_packet_t::default();
        (d.grid_size_x, d.grid_size_y, d.grid_size_z) = (1000, 3, 5);
        (d.workgroup_size_x, d.workgroup_size_y, d.workgroup_size_z) = (256, 2, 1);
        d.setup = 1;
        assert_eq!(total_groups(&d), Ok(4));
        d.setup = 2;
        assert_eq!(total_groups(&d), Ok(8));
        d.setup = 3;
        assert_eq!(total_groups(&d), Ok(40));
        d.workgroup_size_y = 0;
        assert_eq!(total_groups(&d), Ok(0));
        (d.grid_size_x, d.grid_size_y, d.grid_size_z) = (u32::MAX, u32::MAX, u32::MAX);
        (d.workgroup_size_x, d.workgroup_size_y, d.workgroup_size_z) = (1, 1, 1);
        assert_eq!(total_groups(&d), Err(()));
    }
}
