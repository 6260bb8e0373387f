//! One snapshot of a dispatch as a protocol message, from the dispatch's
//! facts alone (index, kernel, kernarg bytes, grid, block, duration): which
//! pointer arguments are captured, their containing allocations, extents,
//! transport (a copy in the staging file, an IPC handle or a shared-memory
//! copy) and fingerprints. Reads memory only through [`BufferAccess`];
//! never talks to the collector and knows nothing of how the dispatch is
//! held.

use super::access::{BufferAccess, StagedCopy};
use super::allocation_map::Allocation;
use super::kernel_table::KernelInfo;
use super::staging::StagingFile;
use crate::log::{log_debug, log_info, log_warn};
use ditto_kernels::{ArgSizes, ArgSizesError, KernelSignature, Param, ParamKind};
use ditto_protocol::{Buffer, CaptureSet, DType, Dispatch, MAX_FDS_PER_FRAME, Phase, Transport};
use std::os::fd::OwnedFd;

/// What is known of a dispatch when it is described.
#[derive(Debug, Clone, Copy)]
pub struct DispatchFacts<'a> {
    /// Index among this process's matched dispatches, from 0.
    pub index: u64,
    pub kernel: &'a KernelInfo,
    /// The kernel's argument bytes, copied at submission.
    pub kernarg: &'a [u8],
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Kernel execution time; `None` before it ran or when the runtime
    /// reports none.
    pub duration_ns: Option<u64>,
}

/// Which arguments are captured: `--capture` and `--arg-sizes`.
#[derive(Debug, Clone, Default)]
pub struct ArgumentChoice {
    pub capture: CaptureSet,
    pub arg_sizes: ArgSizes,
    /// Outputs that are interior pointers of a larger allocation, without
    /// `--arg-sizes`, are also taken before the kernel runs (compared by
    /// what the kernels wrote); `DITTO_SUBALLOCATION_WRITES=0` turns it off.
    pub interior_outputs_before: bool,
}

/// One snapshot, ready to send.
#[derive(Debug)]
pub struct Snapshot {
    pub dispatch: Dispatch,
    /// An output was an interior pointer of a larger allocation without
    /// `--arg-sizes` (see [`ArgumentChoice::interior_outputs_before`]).
    pub interior_outputs: bool,
    /// The shared-memory copies that go with it, in buffer order.
    pub copies: Vec<OwnedFd>,
    /// Selected arguments left out: (argument index, why), for the
    /// manifest's accounting.
    pub misses: Vec<(u32, String)>,
}

/// The protocol message for one snapshot of a dispatch: every pointer
/// argument `choice` selects for `phase` (by default the non-const ones,
/// after the kernel), each exported as its whole containing allocation, and
/// the shared-memory copies that go with it.
///
/// Transport per buffer: a copy in `staging` (the connection's staging
/// file) when it is small and there is room; else IPC when the runtime
/// exports the allocation; when it refuses (locked host memory,
/// fine-grained system memory, virtual-memory allocations), the tool copies
/// the extent into a sealed memfd sent with the message. Memory the
/// runtime does not know at all (plain malloc) is captured only when
/// `--arg-sizes` gives its extent: the user vouches for the range, which is
/// copied from the pointer on (an unreadable range is an error, never a
/// fault); without it, it is not captured (warning). The fingerprint is
/// always the tool's own read of the same bytes.
pub fn describe(
    access: &impl BufferAccess,
    facts: &DispatchFacts<'_>,
    phase: Phase,
    choice: &ArgumentChoice,
    mut staging: Option<&mut StagingFile>,
) -> Snapshot {
    let mut buffers = Vec::new();
    let mut copies = Vec::new();
    let mut misses = Vec::new();
    let mut interior_outputs = false;
    if let Some(sig) = &facts.kernel.signature {
        for param in &sig.params {
            let ParamKind::Pointer { dtype, is_const } = param.kind else {
                continue;
            };
            let selected = choice.capture.captures(phase, is_const);
            let may_be_interior = !is_const && choice.interior_outputs_before;
            // An output not selected here is still taken before the kernel
            // when it lies inside a larger allocation (checked below).
            let before_if_interior = !selected && may_be_interior && phase == Phase::Before;
            if !(selected || before_if_interior) {
                continue;
            }
            let Some(address) = param.read_pointer(facts.kernarg).filter(|&a| a != 0) else {
                continue;
            };
            // An output without --arg-sizes whose pointer may lie inside a
            // larger allocation.
            let extent_unknown = || {
                may_be_interior
                    && choice
                        .arg_sizes
                        .elements(param.index, &sig.params, facts.kernarg)
                        .is_ok_and(|sized| sized.is_none())
            };
            if before_if_interior {
                let interior = extent_unknown()
                    && access
                        .containing_allocation(address)
                        .is_some_and(|alloc| alloc.base != address);
                if !interior {
                    continue;
                }
            }
            let argument = Argument {
                facts,
                sig,
                param,
                dtype,
                address,
                phase,
            };
            let room_for_copy = copies.len() < MAX_FDS_PER_FRAME;
            match argument.take(access, choice, staging.as_deref_mut(), room_for_copy) {
                Ok((buffer, copy)) => {
                    // The allocation `take` resolved says whether it is interior.
                    interior_outputs |= buffer.offset > 0 && extent_unknown();
                    buffers.push(buffer);
                    copies.extend(copy);
                }
                Err(not_captured) => {
                    let detail = not_captured.to_string();
                    log_warn!("{detail}");
                    misses.push((param.index, detail));
                }
            }
        }
    }
    let dispatch = Dispatch {
        index: facts.index,
        kernel: facts.kernel.name.clone(),
        grid: facts.grid,
        block: facts.block,
        duration_ns: match phase {
            Phase::Before => None,
            Phase::After | Phase::Replay => facts.duration_ns,
        },
        buffers,
        launch: None,
    };
    Snapshot {
        dispatch,
        interior_outputs,
        copies,
        misses,
    }
}

/// Why one argument's buffer was not captured: the miss's detail, each
/// beginning with the argument's [`Argument::what`]. `E` is the backend's
/// [`BufferAccess::Error`].
#[derive(Debug, thiserror::Error)]
enum NotCaptured<E> {
    /// `--arg-sizes` could not be evaluated for it (ditto-kernels' words).
    #[error("{what}: {why}; not captured")]
    ArgSizes { what: String, why: ArgSizesError },
    #[error(
        "{what}: --arg-sizes gives {elements} elements of {dtype}, too many bytes; not captured"
    )]
    TooManyBytes {
        what: String,
        elements: u64,
        dtype: &'static str,
    },
    #[error(
        "{what} (0x{address:x}) is in no allocation the runtime knows; not captured \
         (give its size with --arg-sizes to capture it by copy)"
    )]
    NoAllocation { what: String, address: u64 },
    #[error(
        "{what}: --arg-sizes gives {elements} elements of {dtype}, but only {rest} bytes \
         remain in its allocation (0x{base:x}, {size} bytes); not captured"
    )]
    PastAllocation {
        what: String,
        elements: u64,
        dtype: &'static str,
        rest: u64,
        base: u64,
        size: u64,
    },
    #[error(
        "{what}: more than {MAX_FDS_PER_FRAME} buffers of one dispatch need a \
         shared-memory copy; not captured"
    )]
    TooManyCopies { what: String },
    /// The backend could not copy, export or fingerprint it.
    #[error("{what}: {error}; not captured")]
    Access { what: String, error: E },
}

/// How a buffer travels: its transport, the shared-memory copy that goes
/// with it (if any), and the fingerprint of the staged bytes where the
/// backend took it from its one read of them.
pub(super) type Travel = (Transport, Option<OwnedFd>, Option<u64>);

/// One selected, non-null pointer argument of a dispatch.
struct Argument<'a> {
    facts: &'a DispatchFacts<'a>,
    sig: &'a KernelSignature,
    param: &'a Param,
    dtype: DType,
    address: u64,
    phase: Phase,
}

impl Argument<'_> {
    /// "dispatch N of `kernel`: argument I", the start of every message.
    fn what(&self) -> String {
        format!(
            "dispatch {} of `{}`: argument {}",
            self.facts.index, self.facts.kernel.name.demangled, self.param.index
        )
    }

    /// `elements` of this argument's type in bytes, if that fits.
    fn bytes_of<E>(&self, elements: u64) -> Result<u64, NotCaptured<E>> {
        elements
            .checked_mul(self.dtype.size() as u64)
            .ok_or_else(|| NotCaptured::TooManyBytes {
                what: self.what(),
                elements,
                dtype: self.dtype.name(),
            })
    }

    /// The backend's `error` as the reason this argument is not captured.
    fn access_failed<E>(&self, error: E) -> NotCaptured<E> {
        NotCaptured::Access {
            what: self.what(),
            error,
        }
    }

    /// The buffer and its shared-memory copy, if it has one; `Err` is why
    /// it is not captured (the caller logs and accounts for it).
    fn take<A: BufferAccess>(
        &self,
        access: &A,
        choice: &ArgumentChoice,
        staging: Option<&mut StagingFile>,
        room_for_copy: bool,
    ) -> Result<(Buffer, Option<OwnedFd>), NotCaptured<A::Error>> {
        let address = self.address;
        let sized = choice
            .arg_sizes
            .elements(self.param.index, &self.sig.params, self.facts.kernarg)
            .map_err(|why| NotCaptured::ArgSizes {
                what: self.what(),
                why,
            });
        let (alloc, known) = match (access.containing_allocation(address), &sized) {
            (Some(alloc), _) => (alloc, true),
            (None, Ok(Some(elements))) => {
                let bytes = self.bytes_of(*elements)?;
                log_info!(
                    "{} (0x{address:x}) is in no allocation the runtime knows; \
                     --arg-sizes gives {bytes} bytes: copied into shared memory",
                    self.what()
                );
                let alloc = Allocation {
                    base: address,
                    size: bytes,
                };
                (alloc, false)
            }
            (None, _) => {
                return Err(NotCaptured::NoAllocation {
                    what: self.what(),
                    address,
                });
            }
        };
        let offset = address - alloc.base;
        let rest = alloc.size - offset;
        // A slice of a larger allocation (a caching allocator's) covers
        // what --arg-sizes says; without it, the rest of the allocation.
        let extent = match sized? {
            None => rest,
            Some(elements) => match self.bytes_of(elements)? {
                bytes if bytes <= rest => bytes,
                _ => {
                    return Err(NotCaptured::PastAllocation {
                        what: self.what(),
                        elements,
                        dtype: self.dtype.name(),
                        rest,
                        base: alloc.base,
                        size: alloc.size,
                    });
                }
            },
        };
        let (transport, copy, read_once) =
            self.transport(access, &alloc, known, extent, staging, room_for_copy)?;
        let fingerprint = match read_once {
            Some(fingerprint) => fingerprint,
            None => access
                .fingerprint(address, extent)
                .map_err(|e| self.access_failed(e))?,
        };
        let buffer = Buffer {
            phase: self.phase,
            arg_index: self.param.index,
            // From the code object's metadata (-fhip-kernel-arg-name);
            // demangled names carry none.
            name: self.sig.arg_name(self.param.index).map(str::to_string),
            dtype: self.dtype,
            transport,
            owner_pid: std::process::id(),
            alloc_base: alloc.base,
            alloc_size: alloc.size,
            offset,
            extent,
            fingerprint,
        };
        Ok((buffer, copy))
    }

    /// How the `extent` bytes travel ([`travel`]).
    fn transport<A: BufferAccess>(
        &self,
        access: &A,
        alloc: &Allocation,
        known: bool,
        extent: u64,
        staging: Option<&mut StagingFile>,
        room_for_copy: bool,
    ) -> Result<Travel, NotCaptured<A::Error>> {
        let route = Route {
            address: self.address,
            alloc,
            known,
            extent,
        };
        travel(access, &route, &self.what(), staging, room_for_copy).map_err(|e| match e {
            TravelError::TooManyCopies => NotCaptured::TooManyCopies { what: self.what() },
            TravelError::Access(e) => self.access_failed(e),
        })
    }
}

/// The bytes to send: `extent` bytes at `address`, inside `alloc`
/// (`known`: an allocation the runtime knows, which it may export).
pub(super) struct Route<'a> {
    pub address: u64,
    pub alloc: &'a Allocation,
    pub known: bool,
    pub extent: u64,
}

/// Why bytes could not travel.
pub(super) enum TravelError<E> {
    /// The frame has no room for another shared-memory copy.
    TooManyCopies,
    /// The backend could not copy them.
    Access(E),
}

/// How a route's bytes travel: staged when small and there is room (the
/// dispatch is then released without waiting for the collector), else IPC
/// when the runtime exports the allocation, else a shared-memory copy.
/// With it, the fingerprint of the staged bytes where the backend computed
/// it from its one read of them. `what` begins the log lines.
pub(super) fn travel<A: BufferAccess>(
    access: &A,
    route: &Route<'_>,
    what: &str,
    staging: Option<&mut StagingFile>,
    room_for_copy: bool,
) -> Result<Travel, TravelError<A::Error>> {
    let Route {
        address,
        alloc,
        known,
        extent,
    } = *route;
    let staged = match staging {
        Some(file) => access.stage(address, extent, file).unwrap_or_else(|e| {
            log_debug!("{what}: {e}; sent another way");
            None
        }),
        None => None,
    };
    if let Some(StagedCopy { at, fingerprint }) = staged {
        return Ok((Transport::Staged { at }, None, fingerprint));
    }
    if known {
        match access.export(alloc) {
            Ok(transport) => return Ok((transport, None, None)),
            Err(e) => log_info!(
                "{what}: the runtime does not export allocation 0x{:x}+{} over IPC ({e}); \
                 its {extent} bytes are copied into shared memory",
                alloc.base,
                alloc.size
            ),
        }
    }
    if !room_for_copy {
        return Err(TravelError::TooManyCopies);
    }
    let fd = access
        .copy_to_shared_memory(address, extent)
        .map_err(TravelError::Access)?;
    Ok((Transport::SharedMemory, Some(fd), None))
}
