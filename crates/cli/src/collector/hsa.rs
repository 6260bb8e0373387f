//! The collector's HSA buffer source: maps a buffer's IPC handle with
//! hsa_amd_ipc_memory_attach on the GPU that owns it, copies with
//! hsa_memory_copy (or reads in place where ditto's CPU runtime maps host
//! memory), and unmaps with hsa_amd_ipc_memory_detach; the runtime
//! (`hsa_runtime`) is loaded when the first HSA buffer arrives
//! ([`LazyHsaSource`]), so a CUDA run starts none. The twin of `cuda`, with
//! the same [`BufferSource`] contract: it never keeps a mapping beyond one
//! `detach` call.

use super::hsa_runtime::{HsaRuntime, LoadError};
use super::{BufferSource, Mapping, SourceError};
use hsa::{HSA_STATUS_SUCCESS, hsa_agent_t, hsa_amd_ipc_memory_t};
use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::Arc;

/// Why the HSA source could not attach, copy or detach; the runtime's
/// words for a failed call (its status described).
#[derive(Debug, Clone, thiserror::Error)]
pub enum HsaSourceError {
    #[error("IPC handle has {len} bytes; hsa_amd_ipc_memory_t has {expected}")]
    HandleSize { len: usize, expected: usize },
    #[error("hsa_amd_ipc_memory_attach failed: {0}")]
    Attach(String),
    #[error("hsa_amd_ipc_memory_attach returned success and a null address")]
    NullAttachment,
    #[error("{len} bytes at offset {offset} lie outside the {mapped}-byte mapping")]
    OutsideMapping {
        len: usize,
        offset: u64,
        mapped: u64,
    },
    #[error("hsa_memory_copy from the mapped buffer failed: {0}")]
    Copy(String),
    #[error("hsa_amd_ipc_memory_detach failed: {0}")]
    Detach(String),
    /// The runtime could not be loaded (kept, and given to every buffer).
    #[error("the collector needs the HSA runtime to map the buffer: {0}")]
    NoRuntime(Arc<LoadError>),
}

/// Parses the 32 bytes of an `hsa_amd_ipc_memory_t` (native byte order, as
/// the tool copied them out of its own struct).
pub fn ipc_handle_from_bytes(bytes: &[u8]) -> Result<hsa_amd_ipc_memory_t, HsaSourceError> {
    if bytes.len() != std::mem::size_of::<hsa_amd_ipc_memory_t>() {
        return Err(HsaSourceError::HandleSize {
            len: bytes.len(),
            expected: std::mem::size_of::<hsa_amd_ipc_memory_t>(),
        });
    }
    let mut h = hsa_amd_ipc_memory_t::default();
    for (word, chunk) in h.handle.iter_mut().zip(bytes.chunks_exact(4)) {
        *word = u32::from_ne_bytes(chunk.try_into().expect("4 bytes"));
    }
    Ok(h)
}

/// Maps IPC handles with hsa_amd_ipc_memory_attach, copies with
/// hsa_memory_copy (device memory need not be CPU-readable), and unmaps
/// with hsa_amd_ipc_memory_detach. With ditto's CPU runtime, whose
/// attachments are shared mappings of host memory, a mapping is also read
/// in place ([`BufferSource::host_bytes`]).
#[derive(Debug)]
pub struct HsaBufferSource {
    runtime: Arc<HsaRuntime>,
    host_mapped: bool,
}

impl HsaBufferSource {
    /// A source that copies every byte out with hsa_memory_copy.
    pub fn new(runtime: Arc<HsaRuntime>) -> Self {
        HsaBufferSource {
            runtime,
            host_mapped: false,
        }
    }

    /// Whether attached memory is host memory the collector may read in
    /// place: for ditto's CPU runtime in its large-BAR mode only (ROCr maps
    /// device memory, which need not be CPU-readable, and so does the CPU
    /// runtime by default: its GPU memory faults on a CPU access).
    pub fn reading_in_place(mut self, host_mapped: bool) -> Self {
        self.host_mapped = host_mapped;
        self
    }
}

impl BufferSource for HsaBufferSource {
    /// On the GPU agent of the owner's node (its first GPU agent when the
    /// node is unknown or not one of its agents).
    fn attach(
        &self,
        handle: &[u8],
        alloc_size: u64,
        owner_node: Option<u32>,
    ) -> Result<Mapping, SourceError> {
        let h = ipc_handle_from_bytes(handle)?;
        let rt = &self.runtime;
        let chosen = rt.gpu_agent_of_node(owner_node);
        let node = chosen.map(|(_, n)| n);
        let agents: Vec<hsa_agent_t> = chosen.map(|(a, _)| a).into_iter().collect();
        let mut mapped: *mut c_void = std::ptr::null_mut();
        // SAFETY: h and agents live across the call; mapped receives the address.
        let st = unsafe {
            (rt.attach)(
                &h,
                alloc_size as usize,
                agents.len() as u32,
                agents.as_ptr(),
                &mut mapped,
            )
        };
        if st != HSA_STATUS_SUCCESS {
            return Err(HsaSourceError::Attach(rt.describe(st)).into());
        }
        if mapped.is_null() {
            return Err(HsaSourceError::NullAttachment.into());
        }
        Ok(Mapping {
            address: mapped as usize,
            len: alloc_size,
            gpu: node,
        })
    }

    fn copy(&self, mapping: &Mapping, offset: u64, dst: &mut [u8]) -> Result<(), SourceError> {
        if offset
            .checked_add(dst.len() as u64)
            .is_none_or(|end| end > mapping.len)
        {
            return Err(HsaSourceError::OutsideMapping {
                len: dst.len(),
                offset,
                mapped: mapping.len,
            }
            .into());
        }
        if dst.is_empty() {
            return Ok(());
        }
        let rt = &self.runtime;
        let src = (mapping.address + offset as usize) as *const c_void;
        // SAFETY: offset + dst.len() <= mapping.len (checked above); the
        // mapping is live until detach; dst is a writable host buffer.
        let st = unsafe { (rt.memory_copy)(dst.as_mut_ptr().cast(), src, dst.len()) };
        if st != HSA_STATUS_SUCCESS {
            return Err(HsaSourceError::Copy(rt.describe(st)).into());
        }
        Ok(())
    }

    fn host_bytes<'m>(&self, mapping: &'m Mapping, offset: u64, len: u64) -> Option<&'m [u8]> {
        if !self.host_mapped || offset.checked_add(len).is_none_or(|end| end > mapping.len) {
            return None;
        }
        // SAFETY: offset + len <= mapping.len (checked above): inside the
        // attachment, which ditto's CPU runtime maps readable (PROT_READ,
        // MAP_SHARED) and which stays mapped while `mapping` is borrowed
        // (detach consumes it); the held application does not write it.
        Some(unsafe {
            std::slice::from_raw_parts(
                (mapping.address + offset as usize) as *const u8,
                len as usize,
            )
        })
    }

    fn detach(&self, mapping: Mapping) -> Result<(), SourceError> {
        let rt = &self.runtime;
        // SAFETY: mapping.address came from a successful attach and is detached once.
        let st = unsafe { (rt.detach)(mapping.address as *mut c_void) };
        if st != HSA_STATUS_SUCCESS {
            return Err(HsaSourceError::Detach(rt.describe(st)).into());
        }
        Ok(())
    }
}

/// The collector's HSA source, the runtime loaded when the first HSA IPC
/// buffer arrives (or at once, [`LazyHsaSource::new`]): a CUDA run never
/// starts an HSA runtime. The load's error is kept and given to every
/// buffer that needs it.
pub struct LazyHsaSource {
    library: PathBuf,
    host_mapped: bool,
    source: std::sync::OnceLock<Result<HsaBufferSource, HsaSourceError>>,
}

impl LazyHsaSource {
    /// A source over the HSA runtime `library`; `host_mapped` as in
    /// [`HsaBufferSource::reading_in_place`]. With `now`, the runtime is
    /// loaded here and its error returned.
    pub fn new(library: PathBuf, host_mapped: bool, now: bool) -> Result<Self, LoadError> {
        let lazy = LazyHsaSource {
            library,
            host_mapped,
            source: std::sync::OnceLock::new(),
        };
        if now {
            let _ = lazy.source.set(Ok(lazy.load()?));
        }
        Ok(lazy)
    }

    /// Loads the runtime (the debug log says when).
    fn load(&self) -> Result<HsaBufferSource, LoadError> {
        crate::log::debug(&format!(
            "collector: loading the HSA runtime {}",
            self.library.display()
        ));
        let runtime = HsaRuntime::load(&self.library)?;
        // The CPU runtime's attachments are host mappings, readable in place
        // only where its GPU memory is host-accessible (large BAR).
        let in_place = self.host_mapped && runtime.cpu_reads_gpu_memory();
        Ok(HsaBufferSource::new(Arc::new(runtime)).reading_in_place(in_place))
    }

    fn loaded(&self) -> Result<&HsaBufferSource, HsaSourceError> {
        self.source
            .get_or_init(|| {
                self.load()
                    .map_err(|e| HsaSourceError::NoRuntime(Arc::new(e)))
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}

impl BufferSource for LazyHsaSource {
    fn attach(
        &self,
        handle: &[u8],
        alloc_size: u64,
        owner_node: Option<u32>,
    ) -> Result<Mapping, SourceError> {
        self.loaded()?.attach(handle, alloc_size, owner_node)
    }
    fn copy(&self, mapping: &Mapping, offset: u64, dst: &mut [u8]) -> Result<(), SourceError> {
        self.loaded()?.copy(mapping, offset, dst)
    }
    fn host_bytes<'m>(&self, mapping: &'m Mapping, offset: u64, len: u64) -> Option<&'m [u8]> {
        self.loaded().ok()?.host_bytes(mapping, offset, len)
    }
    fn detach(&self, mapping: Mapping) -> Result<(), SourceError> {
        self.loaded()?.detach(mapping)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipc_handle_bytes_round_trip_in_native_order() {
        let h = hsa_amd_ipc_memory_t {
            handle: [1, 2, 3, 0xdead_beef, 5, 6, 7, 8],
        };
        let bytes: Vec<u8> = h.handle.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(ipc_handle_from_bytes(&bytes).unwrap(), h);
        assert!(
            ipc_handle_from_bytes(&bytes[..31])
                .unwrap_err()
                .to_string()
                .contains("31 bytes")
        );
    }
}
