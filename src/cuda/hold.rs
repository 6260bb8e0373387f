//! The CUDA backend's hold: the launch → capture path of CUDA applications, on the application's
//! own thread inside the CUPTI callback. At the entry of a target launch
//! the dispatch takes its index (and, with `--capture inputs`, the launch's
//! stream is synchronised and the inputs snapshotted before the kernel is
//! enqueued); at its exit the stream is synchronised, the pointer arguments
//! are resolved to their containing allocations (cuMemGetAddressRange);
//! small buffers are copied into the connection's staging file
//! (cuMemcpyDtoH through a page-locked bounce buffer) and the launch
//! returns as soon as the Dispatch is sent; larger ones are exported
//! (cuIpcGetMemHandle, else a shared-memory copy) and the collector's Ack
//! is awaited: the launch call returns only then. Either way the
//! application cannot see the kernel complete before its bytes are taken.
//! Non-target launches are counted and return at once: nothing is
//! synchronised. Launches into a stream being captured into a CUDA graph
//! are never synchronised (that would invalidate the capture): not captured,
//! said once.
//!
//! The same describe step as HSA ([`crate::capture::describe`](mod@crate::capture::describe)) through
//! [`CudaDevice`] (`access`), the same accounting ([`Ledger`]: at exit
//! every matched dispatch never reported is sent as missed, with why),
//! capture's state in the process's [`Lifecycle`].

use super::access::CudaDevice;
use super::driver::{Driver, HostBuffer};
use super::kernel_times::KernelTimes;
use super::launch::Launch;
use super::modules::{CudaModules, ResourceData, cubin_of};
use crate::capture::accounting::{Ledger, fail_on, say_goodbye, send_queued};
use crate::capture::client::CollectorConnection;
use crate::capture::kernel_code::KernelCode;
use crate::capture::kernel_table::{KernelInfo, KernelTable};
use crate::capture::replay::{Segments, describe_replay};
use crate::capture::{ArgumentChoice, DispatchFacts, Snapshot, describe};
use crate::lifecycle::Lifecycle;
use crate::log::{log_debug, log_info, log_warn};
use crate::options::Options;
use cuda_abi::{CU_STREAM_CAPTURE_STATUS_NONE, CuStream};
use ditto_kernels::{KernelNames, triton};
use ditto_protocol::{Launch as ReplayLaunch, MissReason, Phase};
use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, c_char, c_int};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The process's CUDA capture state.
pub struct CudaTool {
    pub driver: Driver,
    pub options: Options,
    /// Which arguments are captured (`--capture`, `--arg-sizes`).
    pub choice: ArgumentChoice,
    /// The process's lifecycle.
    pub lifecycle: &'static Lifecycle,
    /// Kernels by function handle, counted per launch (for the Goodbye).
    pub kernels: KernelTable,
    /// Parameter offsets and sizes of target kernels, by function handle.
    layouts: Mutex<HashMap<usize, Vec<(u64, u64)>>>,
    next_index: AtomicU64,
    /// The connection and the ledger of what it was told, locked together
    /// (connection first).
    pub connection: Mutex<Option<CollectorConnection>>,
    ledger: Mutex<Ledger>,
    /// Kernels whose launch into a capturing stream was already reported.
    graph_noted: Mutex<HashSet<String>>,
    /// The page-locked buffer small buffers are staged through.
    bounce: Mutex<Option<HostBuffer>>,
    /// Target kernels' cubins, for a replay capture.
    modules: CudaModules,
    /// Dispatches whose replay launch went out without a code object (its
    /// module was loaded during the launch): it goes with their outputs.
    code_pending: Mutex<HashSet<u64>>,
    /// CUPTI's kernel activity records; `None` where libcupti has none
    /// (captured launches are then not timed).
    pub times: Option<KernelTimes>,
}

impl CudaTool {
    pub fn new(driver: Driver, options: Options, lifecycle: &'static Lifecycle) -> CudaTool {
        let choice = ArgumentChoice {
            capture: options.capture,
            arg_sizes: options.arg_sizes.clone(),
            interior_outputs_before: options.interior_outputs_before,
        };
        CudaTool {
            driver,
            options,
            choice,
            lifecycle,
            kernels: KernelTable::new(),
            layouts: Mutex::new(HashMap::new()),
            next_index: AtomicU64::new(0),
            connection: Mutex::new(None),
            ledger: Mutex::new(Ledger::default()),
            graph_noted: Mutex::new(HashSet::new()),
            bounce: Mutex::new(None),
            modules: CudaModules::default(),
            code_pending: Mutex::new(HashSet::new()),
            times: None,
        }
    }

    /// A target kernel that cannot be captured, and why: said once, and
    /// each of its launches is reported missing with `why`.
    fn uncapturable(&self, launch: &Launch, mut probe: KernelInfo, why: String) -> Arc<KernelInfo> {
        log_warn!("kernel `{}`: {why}; not captured", probe.name.demangled);
        probe.signature = None;
        probe.why_not = Some(why);
        self.kernels.insert(launch.function as u64, probe)
    }

    /// The kernel of a launch, laid out on first sight when it is a target.
    fn kernel(&self, launch: &Launch, symbol: *const c_char) -> Option<Arc<KernelInfo>> {
        if let Some(k) = self.kernels.get(launch.function as u64) {
            return Some(k);
        }
        if symbol.is_null() {
            return None;
        }
        // SAFETY: CUPTI's symbolName: a NUL-terminated string for launch callbacks.
        let name = unsafe { CStr::from_ptr(symbol) }
            .to_string_lossy()
            .into_owned();
        let query = self.options.kernel.as_deref();
        let probe = KernelInfo::new(&name, 0, query, None).0;
        if !probe.is_target {
            return Some(self.kernels.insert(launch.function as u64, probe));
        }
        let layout = match self.driver.param_layout(launch.function) {
            Ok(l) => l,
            Err(e) => {
                return Some(self.uncapturable(launch, probe, e.to_string()));
            }
        };
        // A kernel without a C++ signature and without --arg-types: typed
        // from Triton's cache when it is a Triton kernel.
        let triton = match &self.options.arg_types {
            None if KernelNames::new(&name).param_types().is_none() => {
                let cubin = self.modules.of(&probe.name.mangled);
                Some(triton::types_for(
                    &self.options.triton_caches(),
                    "cuda",
                    &probe.name.mangled,
                    layout.len(),
                    cubin.as_ref().map(|c| &c.bytes[..]),
                ))
            }
            _ => None,
        };
        let arg_types = match &triton {
            Some(Ok(params)) => {
                log_info!(
                    "kernel `{}`: argument types from Triton's cache",
                    probe.name.demangled
                );
                if let Some(reason) = &params.unanalysed {
                    log_warn!(
                        "kernel `{}`: every pointer argument counts as written (an output): \
                         {reason}",
                        probe.name.demangled
                    );
                }
                Some(&params.types[..])
            }
            Some(Err(e)) => {
                return Some(self.uncapturable(launch, probe, e.to_string()));
            }
            None => self.options.arg_types.as_deref(),
        };
        // Types from the name (or --arg-types, or Triton's cache), offsets
        // and sizes from the driver: a by-value parameter of a type ditto
        // does not know is raw bytes of the driver's size.
        let (mut info, problem) = KernelInfo::from_driver_layout(&name, &layout, query, arg_types);
        if let (Some(Ok(params)), Some(sig)) = (&triton, info.signature.as_mut()) {
            sig.name_unnamed(&params.names);
        }
        if info.signature.is_none()
            && let Some(p) = &problem
        {
            log_warn!("{p}; not captured");
        }
        if info.signature.is_some() {
            if let Some(p) = &problem {
                log_warn!("{p}");
            }
            log_info!("capturing kernel `{}`", info.name.demangled);
        }
        self.layouts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(launch.function, layout);
        Some(self.kernels.insert(launch.function as u64, info))
    }

    /// CUPTI reported a module load: its cubin is kept when it defines a
    /// target kernel.
    pub fn on_module_loaded(&self, data: &ResourceData) {
        // SAFETY: the resource data of a module-loaded callback.
        let Some(cubin) = (unsafe { cubin_of(data) }) else {
            return;
        };
        if let Some(query) = self.options.kernel.as_deref() {
            self.modules.loaded(cubin, query);
        }
    }

    /// At a launch's entry: counts it; for a selected target returns its
    /// dispatch index (stored in the callback's correlation data) after
    /// snapshotting its inputs when asked.
    pub fn on_enter(&self, launch: &Launch, symbol: *const c_char) -> Option<u64> {
        let kernel = self.kernel(launch, symbol)?;
        kernel.count_dispatch();
        if !kernel.is_target || !self.lifecycle.is_capturing() {
            return None;
        }
        // Every matched launch takes its index, typed or not.
        let index = self.next_index.fetch_add(1, Ordering::Relaxed);
        if !self.options.dispatch.selects(index) {
            self.missed(index, MissReason::Selection, String::new());
            return None;
        }
        if let Some(why) = &kernel.why_not {
            // Dispatched, not captured: said as exactly that, with why.
            self.missed(index, MissReason::Error, why.clone());
            return None;
        }
        if kernel.is_taken_before(self.choice.capture, self.choice.interior_outputs_before) {
            self.snapshot(launch, &kernel, index, Phase::Before, &mut None);
        }
        // Kernel records on for this launch (off again at its exit).
        if let Some(times) = &self.times {
            times.begin();
        }
        Some(index)
    }

    /// At a launch's exit: snapshots the outputs of dispatch `index`.
    /// The kernel's time is its activity record's, found by the callback's
    /// `correlation_id` once the stream is synchronised.
    pub fn on_exit(
        &self,
        launch: &Launch,
        index: u64,
        launch_result: Option<c_int>,
        correlation_id: u32,
    ) {
        let mut timing = self.times.as_ref().map(|t| (t, correlation_id));
        self.exit_snapshot(launch, index, launch_result, &mut timing);
        // Records off where the snapshot did not read them (a failed launch,
        // a graph capture).
        if let Some((times, id)) = timing {
            times.end(id);
        }
    }

    fn exit_snapshot(
        &self,
        launch: &Launch,
        index: u64,
        launch_result: Option<c_int>,
        timing: &mut Option<(&KernelTimes, u32)>,
    ) {
        let Some(kernel) = self.kernels.get(launch.function as u64) else {
            return;
        };
        if let Some(r) = launch_result.filter(|&r| r != 0) {
            let detail = format!(
                "the launch failed ({})",
                self.driver
                    .check(r, "the launch")
                    .err()
                    .map(|e| e.to_string())
                    .unwrap_or_default()
            );
            log_warn!(
                "dispatch {index} of `{}`: {detail}; nothing to capture",
                kernel.name.demangled
            );
            self.missed(index, MissReason::Error, detail);
            return;
        }
        self.snapshot(launch, &kernel, index, Phase::After, timing);
    }

    /// Synchronises the launch's stream, then sends one snapshot and waits
    /// for its Ack.
    /// After the sync, `timing` (taken) gives the kernel's time.
    fn snapshot(
        &self,
        launch: &Launch,
        kernel: &Arc<KernelInfo>,
        index: u64,
        phase: Phase,
        timing: &mut Option<(&KernelTimes, u32)>,
    ) {
        if !self.lifecycle.is_capturing() {
            return;
        }
        let stream = launch.stream as CuStream;
        let mut status: c_int = CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: the launch's own stream, live during its launch call.
        let r = unsafe { (self.driver.stream_is_capturing)(stream, &mut status) };
        if let Err(e) = self.driver.check(r, "cuStreamIsCapturing") {
            log_warn!(
                "dispatch {index} of `{}`: {e}; not captured",
                kernel.name.demangled
            );
            self.missed(index, MissReason::Error, e.to_string());
            return;
        }
        if status != CU_STREAM_CAPTURE_STATUS_NONE {
            let first = self
                .graph_noted
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(kernel.name.mangled.clone());
            if first {
                log_warn!(
                    "`{}` is launched into a stream being captured into a CUDA graph: such \
                     launches are not captured (synchronising would break the graph capture)",
                    kernel.name.demangled
                );
            }
            self.missed(
                index,
                MissReason::Error,
                "launched into a stream being captured into a CUDA graph".into(),
            );
            return;
        }
        // SAFETY: as above.
        let r = unsafe { (self.driver.stream_synchronize)(stream) };
        if let Err(e) = self.driver.check(r, "cuStreamSynchronize") {
            log_warn!(
                "dispatch {index} of `{}`: {e}; not captured",
                kernel.name.demangled
            );
            self.missed(index, MissReason::Error, e.to_string());
            return;
        }
        // The stream is synchronised: the kernel's record is complete.
        let duration_ns = timing.take().and_then(|(times, id)| times.end(id));
        let layout = self
            .layouts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&launch.function)
            .cloned()
            .unwrap_or_default();
        // SAFETY: the launch's own parameters, live during its launch call.
        let kernarg = match unsafe { super::launch::pack_arguments(launch, &layout) } {
            Ok(k) => k,
            Err(e) => {
                log_warn!(
                    "dispatch {index} of `{}`: {e}; not captured",
                    kernel.name.demangled
                );
                self.missed(index, MissReason::Error, e.to_string());
                return;
            }
        };
        let facts = DispatchFacts {
            index,
            kernel,
            kernarg: &kernarg,
            grid: launch.grid,
            block: launch.block,
            duration_ns,
        };
        let device = CudaDevice {
            driver: &self.driver,
            bounce: &self.bounce,
        };
        // Small buffers go into the connection's staging file: the launch
        // then returns without waiting for the collector.
        let mut connection = self.connection.lock().unwrap_or_else(|e| e.into_inner());
        let mut ledger = self.ledger.lock().unwrap_or_else(|e| e.into_inner());
        let staging = connection
            .as_mut()
            .filter(|_| self.lifecycle.is_capturing())
            .and_then(|c| c.staging());
        let Snapshot {
            mut dispatch,
            mut copies,
            misses,
            interior_outputs,
        } = describe(&device, &facts, phase, &self.choice, staging);
        if phase == Phase::After {
            kernel.learn_outputs(interior_outputs);
        }
        // Buffers the tool could not take are accounted for in the snapshot.
        for (arg, detail) in misses {
            ledger.missed_buffer(index, arg, phase, detail);
        }
        let mut code_object = None;
        if self.choice.capture.replays() {
            let code = self.modules.of(&kernel.name.mangled);
            let mut pending = self.code_pending.lock().unwrap_or_else(|e| e.into_inner());
            match phase {
                Phase::Before => {
                    let staging = connection
                        .as_mut()
                        .filter(|_| self.lifecycle.is_capturing())
                        .and_then(|c| c.staging());
                    let kernel_code = KernelCode {
                        symbol: kernel.name.mangled.clone(),
                        code_object: code.clone().ok_or_else(|| {
                            "its module was not loaded before the launch (CUDA loads modules \
                             lazily, during a kernel's first launch): it goes with the outputs"
                                .to_string()
                        }),
                        variables: Vec::new(),
                    };
                    let part = describe_replay(
                        &device,
                        &facts,
                        Some(&kernel_code),
                        Segments {
                            group: launch.shared_mem_bytes,
                            private: 0,
                        },
                        false,
                        staging,
                        copies.len(),
                    );
                    for (arg, detail) in part.misses {
                        ledger.missed_buffer(index, arg, Phase::Replay, detail);
                    }
                    dispatch.buffers.extend(part.buffers);
                    copies.extend(part.copies);
                    dispatch.launch = Some(part.launch);
                    if code.is_none() {
                        pending.insert(index);
                    }
                    code_object = code;
                }
                Phase::After | Phase::Replay => {
                    // The module loaded during the launch: its code object
                    // completes the launch sent with the inputs.
                    if let Some(code) = code.filter(|_| pending.remove(&index)) {
                        dispatch.launch = Some(ReplayLaunch {
                            symbol: kernel.name.mangled.clone(),
                            code_object: Some(code.digest.clone()),
                            ..ReplayLaunch::default()
                        });
                        code_object = Some(code);
                    }
                }
            }
        }
        send_queued(&mut connection, &mut ledger, self.lifecycle);
        let Some(conn) = connection
            .as_mut()
            .filter(|_| self.lifecycle.is_capturing())
        else {
            return;
        };
        if phase == Phase::Before && dispatch.buffers.is_empty() && dispatch.launch.is_none() {
            return;
        }
        if let Some(code) = &code_object
            && let Err(e) = conn.code_object(code)
        {
            fail_on(
                &mut connection,
                &mut ledger,
                self.lifecycle,
                index,
                e,
                "the launch ran on uncaptured",
            );
            return;
        }
        let Some(conn) = connection
            .as_mut()
            .filter(|_| self.lifecycle.is_capturing())
        else {
            return;
        };
        let awaited = dispatch.needs_ack();
        let mut result = conn.dispatch(dispatch, copies);
        if !awaited && matches!(result, Ok(Ok(()))) {
            // Staged: sent now (what the socket does not take at once goes
            // with the next message), not when a batch fills.
            if let Err(e) = conn.flush(false) {
                result = Err(e);
            }
        }
        if result.is_ok() && phase == Phase::After {
            // Sent (and answered, unless staged): the collector stores it
            // or says why not.
            ledger.sent(index);
        }
        match result {
            Ok(Ok(())) => log_debug!(
                "dispatch {index} of `{}` captured ({phase:?})",
                kernel.name.demangled
            ),
            Ok(Err(reason)) => log_warn!(
                "collector could not capture dispatch {index} of `{}`: {reason}",
                kernel.name.demangled
            ),
            Err(e) => fail_on(
                &mut connection,
                &mut ledger,
                self.lifecycle,
                index,
                e,
                "the launch ran on uncaptured",
            ),
        }
    }

    /// Tells the collector dispatch `index` is not captured, and why.
    fn missed(&self, index: u64, reason: MissReason, detail: String) {
        let mut connection = self.connection.lock().unwrap_or_else(|e| e.into_inner());
        let mut ledger = self.ledger.lock().unwrap_or_else(|e| e.into_inner());
        ledger.missed(index, reason, detail);
        send_queued(&mut connection, &mut ledger, self.lifecycle);
    }

    /// Says Goodbye once (at exit), after accounting for every matched
    /// dispatch never reported; later calls return at once.
    pub fn finish(&self) {
        if !self.lifecycle.claim_finish() {
            return;
        }
        let goodbye = self
            .kernels
            .goodbye(self.next_index.load(Ordering::Relaxed));
        let mut connection = self.connection.lock().unwrap_or_else(|e| e.into_inner());
        let mut ledger = self.ledger.lock().unwrap_or_else(|e| e.into_inner());
        ledger.close(goodbye.matched, &self.options.dispatch);
        say_goodbye(&mut connection, &mut ledger, self.lifecycle, &goodbye);
        self.lifecycle.finished();
    }
}
