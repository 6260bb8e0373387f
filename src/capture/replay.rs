//! What a replay capture (`--capture replay`, `replay-all`) adds to a
//! dispatch's inputs part, so that `ditto replay` can run the dispatch
//! again without the application; what it keeps of each target kernel at
//! load is [`KernelCode`] (`kernel_code`). Added per dispatch, while the kernel
//! waits to start ([`describe_replay`]): each allocation a pointer argument
//! points into, whole (with `replay-all`, every live allocation the
//! backend tracks, for kernels that follow pointers stored in memory),
//! each module variable, all as [`Phase::Replay`] buffers numbered from 0;
//! and the [`Launch`]: the kernel-argument bytes as dispatched, the
//! segment sizes, the symbol and the code object's digest. Reads memory
//! only through [`BufferAccess`]; sends nothing itself.

use super::access::BufferAccess;
use super::allocation_map::Allocation;
use super::describe::{DispatchFacts, Route, TravelError, travel};
use super::kernel_code::KernelCode;
use super::staging::StagingFile;
use crate::log::log_warn;
use ditto_kernels::ParamKind;
use ditto_protocol::{Buffer, DType, Launch, MAX_FDS_PER_FRAME, Phase};
use std::os::fd::OwnedFd;

/// The packet's segment sizes, which the dispatch facts do not carry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Segments {
    pub group: u32,
    pub private: u32,
}

/// A dispatch's replay part: the images (in image order) with their
/// shared-memory copies, the launch, and what could not be taken:
/// (argument or image number, why).
#[derive(Debug)]
pub struct ReplayPart {
    pub buffers: Vec<Buffer>,
    pub copies: Vec<OwnedFd>,
    pub launch: Launch,
    pub misses: Vec<(u32, String)>,
}

/// One piece of memory to take whole.
struct Image {
    alloc: Allocation,
    /// An allocation the runtime knows (exportable), not a variable.
    known: bool,
    /// The variable's name, for a module variable.
    variable: Option<String>,
}

/// The replay part of a dispatch whose kernel has not started:
/// `copies_used` shared-memory copies already go with the frame.
pub fn describe_replay<A: BufferAccess>(
    access: &A,
    facts: &DispatchFacts<'_>,
    code: Option<&KernelCode>,
    segments: Segments,
    all_allocations: bool,
    mut staging: Option<&mut StagingFile>,
    copies_used: usize,
) -> ReplayPart {
    let what = |n: &str| {
        format!(
            "dispatch {} of `{}`: {n}",
            facts.index, facts.kernel.name.demangled
        )
    };
    let mut misses = Vec::new();
    let mut images: Vec<Image> = Vec::new();
    let add = |alloc: Allocation, known: bool, images: &mut Vec<Image>| {
        if !images.iter().any(|i| i.alloc.base == alloc.base) {
            images.push(Image {
                alloc,
                known,
                variable: None,
            });
        }
    };
    if let Some(sig) = &facts.kernel.signature {
        for param in &sig.params {
            if !matches!(param.kind, ParamKind::Pointer { .. }) {
                continue;
            }
            let Some(address) = param.read_pointer(facts.kernarg).filter(|&a| a != 0) else {
                continue;
            };
            match access.containing_allocation(address) {
                Some(alloc) => add(alloc, true, &mut images),
                None => misses.push((
                    param.index,
                    what(&format!(
                        "argument {} (0x{address:x}) is in no allocation the runtime knows; \
                         a replay cannot restore what it points to",
                        param.index
                    )),
                )),
            }
        }
    }
    if all_allocations {
        for alloc in access.tracked_allocations() {
            add(alloc, true, &mut images);
        }
    }
    if let Some(code) = code {
        for v in code
            .variables
            .iter()
            .filter(|v| v.size > 0 && v.address != 0)
        {
            images.push(Image {
                alloc: Allocation {
                    base: v.address,
                    size: v.size,
                },
                known: false,
                variable: Some(v.name.clone()),
            });
        }
    }
    let mut buffers = Vec::with_capacity(images.len());
    let mut copies = Vec::new();
    let mut variables = Vec::new();
    for image in images {
        let number = buffers.len() as u32;
        let label = match &image.variable {
            Some(name) => what(&format!("module variable `{name}`")),
            None => what(&format!(
                "allocation 0x{:x} ({} bytes) for replay",
                image.alloc.base, image.alloc.size
            )),
        };
        let route = Route {
            address: image.alloc.base,
            alloc: &image.alloc,
            known: image.known,
            extent: image.alloc.size,
        };
        let room = copies_used + copies.len() < MAX_FDS_PER_FRAME;
        let taken = travel(access, &route, &label, staging.as_deref_mut(), room)
            .map_err(|e| match e {
                TravelError::TooManyCopies => format!(
                    "{label}: more than {MAX_FDS_PER_FRAME} buffers of one dispatch need a \
                     shared-memory copy; not captured"
                ),
                TravelError::Access(e) => format!("{label}: {e}; not captured"),
            })
            .and_then(|(transport, copy, read_once)| {
                let fingerprint = match read_once {
                    Some(f) => f,
                    None => access
                        .fingerprint(route.address, route.extent)
                        .map_err(|e| format!("{label}: {e}; not captured"))?,
                };
                Ok((transport, copy, fingerprint))
            });
        let (transport, copy, fingerprint) = match taken {
            Ok(t) => t,
            Err(why) => {
                log_warn!("{why}");
                misses.push((number, why));
                continue;
            }
        };
        if let Some(name) = &image.variable {
            variables.push((number, name.clone()));
        }
        copies.extend(copy);
        buffers.push(Buffer {
            arg_index: number,
            phase: Phase::Replay,
            name: image.variable,
            dtype: DType::Bytes,
            transport,
            owner_pid: std::process::id(),
            alloc_base: image.alloc.base,
            alloc_size: image.alloc.size,
            offset: 0,
            extent: image.alloc.size,
            fingerprint,
        });
    }
    let (symbol, code_object, code_object_missing) = match code {
        Some(code) => match &code.code_object {
            Ok(copy) => (code.symbol.clone(), Some(copy.digest.clone()), None),
            Err(why) => (code.symbol.clone(), None, Some(why.clone())),
        },
        None => (
            format!("{}.kd", facts.kernel.name.mangled),
            None,
            Some("the tool kept no code object for this kernel".to_string()),
        ),
    };
    ReplayPart {
        buffers,
        copies,
        launch: Launch {
            kernarg: facts.kernarg.to_vec(),
            group_segment_size: segments.group,
            private_segment_size: segments.private,
            symbol,
            code_object,
            code_object_missing,
            isa: code
                .and_then(|c| c.code_object.as_ref().ok())
                .and_then(|c| c.target.clone()),
            variables,
            all_allocations,
        },
        misses,
    }
}
