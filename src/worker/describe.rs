//! One snapshot of a held dispatch as a protocol message: which pointer
//! arguments are captured, their containing allocations, extents, transport
//! (a copy in the staging file, an IPC handle or a shared-memory copy) and
//! fingerprints. Reads the runtime only through [`Device`]; never talks to
//! the collector.

use super::{Device, Job, WorkerConfig};
use crate::allocation_map::Allocation;
use crate::log::{log_debug, log_info, log_warn};
use crate::staging::StagingFile;
use ditto_kernels::ParamKind;
use ditto_protocol::{Buffer, Dispatch, MAX_FDS_PER_FRAME, Phase, Transport};
use std::os::fd::OwnedFd;

/// The protocol message for one snapshot of a dispatch: every pointer
/// argument `capture` selects for `phase` (by default the non-const ones,
/// after the kernel), each exported as its whole containing allocation, and
/// the shared-memory copies that go with it (in buffer order).
///
/// Transport per buffer: a copy in `staging` (the connection's staging
/// file) when it is small and there is room; else IPC when the runtime
/// exports the allocation; when
/// it refuses (locked host memory, fine-grained system memory, virtual-memory
/// allocations), the tool copies the extent into a sealed memfd sent with
/// the message. Memory the runtime does not know at all (plain malloc) is
/// captured only when `--arg-sizes` gives its extent: the user vouches for
/// the range, which is copied from the pointer on (an unreadable range is
/// an error, never a fault); without it, it is not captured (warning).
/// The fingerprint is always the tool's own read of the same bytes.
/// Every selected argument left out is returned with why (the third
/// value), for the manifest's accounting.
pub fn describe<D: Device>(
    device: &D,
    job: &Job,
    phase: Phase,
    config: &WorkerConfig,
    mut staging: Option<&mut StagingFile>,
) -> (Dispatch, Vec<OwnedFd>, Vec<(u32, String)>) {
    let capture = config.capture;
    let kernel = &job.kernel;
    let mut buffers = Vec::new();
    let mut copies = Vec::new();
    // Selected arguments that are not captured: (argument index, why).
    let mut misses = Vec::new();
    if let Some(sig) = &kernel.signature {
        for param in &sig.params {
            let ParamKind::Pointer { dtype, is_const } = param.kind else {
                continue;
            };
            if !capture.captures(phase, is_const) {
                continue;
            }
            let Some(address) = param.read_pointer(&job.kernarg) else {
                continue;
            };
            if address == 0 {
                continue;
            }
            let what = || {
                format!(
                    "dispatch {} of `{}`: argument {}",
                    job.index, kernel.name.demangled, param.index
                )
            };
            let sized = config
                .arg_sizes
                .elements(param.index, &sig.params, &job.kernarg);
            let (alloc, known) = match (device.containing_allocation(address), &sized) {
                (Some(alloc), _) => (alloc, true),
                (None, Ok(Some(elements))) => match elements.checked_mul(dtype.size() as u64) {
                    Some(bytes) => {
                        log_info!(
                            "{} (0x{address:x}) is in no allocation the runtime knows; \
                             --arg-sizes gives {bytes} bytes: copied into shared memory",
                            what()
                        );
                        (
                            Allocation {
                                base: address,
                                size: bytes,
                            },
                            false,
                        )
                    }
                    None => {
                        let detail = format!(
                            "{}: --arg-sizes gives {elements} elements of {}, too many bytes; not captured",
                            what(),
                            dtype.name()
                        );
                        log_warn!("{detail}");
                        misses.push((param.index, detail));
                        continue;
                    }
                },
                (None, _) => {
                    let detail = format!(
                        "{} (0x{address:x}) is in no allocation the runtime knows; not captured \
                         (give its size with --arg-sizes to capture it by copy)",
                        what()
                    );
                    log_warn!("{detail}");
                    misses.push((param.index, detail));
                    continue;
                }
            };
            let offset = address - alloc.base;
            let rest = alloc.size - offset;
            // A slice of a larger allocation (a caching allocator's) covers
            // what --arg-sizes says; without it, the rest of the allocation.
            let extent = match sized {
                Ok(None) => rest,
                Ok(Some(elements)) => match elements.checked_mul(dtype.size() as u64) {
                    Some(bytes) if bytes <= rest => bytes,
                    _ => {
                        let detail = format!(
                            "{}: --arg-sizes gives {elements} elements of {}, \
                             but only {rest} bytes remain in its allocation (0x{:x}, {} bytes); not captured",
                            what(),
                            dtype.name(),
                            alloc.base,
                            alloc.size
                        );
                        log_warn!("{detail}");
                        misses.push((param.index, detail));
                        continue;
                    }
                },
                Err(e) => {
                    let detail = format!("{}: {e}; not captured", what());
                    log_warn!("{detail}");
                    misses.push((param.index, detail));
                    continue;
                }
            };
            // Small buffers go into the staging file when there is room:
            // the dispatch is then released without waiting for the collector.
            let staged = match staging.as_deref_mut() {
                Some(file) => device.stage(address, extent, file).unwrap_or_else(|e| {
                    log_debug!("{}: {e}; sent another way", what());
                    None
                }),
                None => None,
            };
            let transport = if let Some(at) = staged {
                Transport::Staged { at }
            } else {
                let exported = if known {
                    device.export(&alloc).map_err(|e| {
                        log_info!(
                            "{}: the runtime does not export allocation 0x{:x}+{} over IPC ({e}); \
                             its {extent} bytes are copied into shared memory",
                            what(),
                            alloc.base,
                            alloc.size
                        );
                    })
                } else {
                    Err(())
                };
                match exported {
                    Ok(handle) => device.ipc_transport(handle),
                    Err(()) if copies.len() >= MAX_FDS_PER_FRAME => {
                        let detail = format!(
                            "{}: more than {MAX_FDS_PER_FRAME} buffers of one dispatch need a \
                             shared-memory copy; not captured",
                            what()
                        );
                        log_warn!("{detail}");
                        misses.push((param.index, detail));
                        continue;
                    }
                    Err(()) => match device.copy_to_shared_memory(address, extent) {
                        Ok(fd) => {
                            copies.push(fd);
                            Transport::SharedMemory
                        }
                        Err(e) => {
                            let detail = format!("{}: {e}; not captured", what());
                            log_warn!("{detail}");
                            misses.push((param.index, detail));
                            continue;
                        }
                    },
                }
            };
            let fingerprint = match device.fingerprint(address, extent) {
                Ok(f) => f,
                Err(e) => {
                    let detail = format!("{}: {e}; not captured", what());
                    log_warn!("{detail}");
                    if matches!(transport, Transport::SharedMemory) {
                        copies.pop();
                    }
                    misses.push((param.index, detail));
                    continue;
                }
            };
            buffers.push(Buffer {
                phase,
                arg_index: param.index,
                // From the code object's metadata (-fhip-kernel-arg-name); demangled
                // names carry none.
                name: sig.arg_name(param.index).map(str::to_string),
                dtype,
                transport,
                owner_pid: std::process::id(),
                alloc_base: alloc.base,
                alloc_size: alloc.size,
                offset,
                extent,
                fingerprint,
            });
        }
    }
    let dispatch = Dispatch {
        index: job.index,
        kernel: kernel.name.clone(),
        grid: job.grid,
        block: job.block,
        duration_ns: match phase {
            Phase::Before => None,
            Phase::After => device.dispatch_duration_ns(&job.held),
        },
        buffers,
    };
    (dispatch, copies, misses)
}
