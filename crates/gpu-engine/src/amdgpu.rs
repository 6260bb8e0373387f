//! Real AMDGPU code objects (ELF `EM_AMDGPU`, as hipcc and CLR build them):
//! what the CPU runtime learns from one at load. Owns the recognition of
//! such an ELF, the copy of each kernel's 64-byte kernel descriptor
//! (`<name>.kd`), and the choice of how each kernel will run: CLR's blit
//! kernels natively (`blit_kernels`), every other kernel from a host build found
//! by its mangled name (`host_kernels`). The kernels and their argument
//! layouts come from the `NT_AMDGPU_METADATA` note, read by
//! `ditto_kernels::metadata` (the one parser of that note). Never runs
//! machine code from the code object.

use crate::blit_kernels::Blit;
use crate::dispatch::KernelRun;
use crate::host_kernels::{self, HostKernel};
use object::{Object, ObjectSection, ObjectSymbol};

/// `EM_AMDGPU`.
const EM_AMDGPU: u16 = 224;

/// How a kernel of an AMDGPU code object runs on the CPU.
#[derive(Clone)]
pub enum Implementation {
    Blit(Blit),
    Host(HostKernel),
    /// The message printed when it is dispatched.
    Missing(String),
}

impl From<Implementation> for KernelRun {
    fn from(implementation: Implementation) -> KernelRun {
        match implementation {
            Implementation::Blit(b) => KernelRun::Blit(b),
            Implementation::Host(h) => KernelRun::Entry {
                entry: h.entry,
                _library: h.library,
            },
            Implementation::Missing(m) => KernelRun::Missing(m),
        }
    }
}

/// One kernel of an AMDGPU code object.
pub struct AmdgpuKernel {
    /// `<mangled>.kd`
    pub symbol: String,
    pub name: String,
    pub kernarg_size: u32,
    /// The kernel descriptor's bytes (group, private and kernarg segment
    /// sizes first, as the hardware reads them).
    pub descriptor: [u8; 64],
    pub implementation: Implementation,
}

impl AmdgpuKernel {
    pub fn group_segment_size(&self) -> u32 {
        u32::from_le_bytes(self.descriptor[0..4].try_into().expect("4 bytes"))
    }
}

/// Whether `header` (an ELF file's first 20 bytes at least) is a 64-bit
/// little-endian AMDGPU ELF.
pub fn is_amdgpu(header: &[u8]) -> bool {
    header.len() >= 20
        && header[..4] == *b"\x7fELF"
        && header[4] == 2
        && header[5] == 1
        && u16::from_le_bytes([header[18], header[19]]) == EM_AMDGPU
}

/// The kernel descriptor `symbol` of `bytes`, if the ELF defines it.
fn descriptor(file: &object::File<'_>, symbol: &str) -> Option<[u8; 64]> {
    let sym = file
        .symbols()
        .chain(file.dynamic_symbols())
        .find(|s| s.name() == Ok(symbol))?;
    let section = file.section_by_index(sym.section_index()?).ok()?;
    let data = section.data_range(sym.address(), 64).ok()??;
    data.try_into().ok()
}

/// Why an AMDGPU code object cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum AmdgpuLoadError {
    /// Its metadata note does not parse (ditto_kernels' message).
    #[error("{0}")]
    Metadata(String),
    #[error("the code object has no NT_AMDGPU_METADATA note")]
    NoMetadata,
    #[error(transparent)]
    Elf(#[from] object::Error),
    #[error("kernel `{name}`: no 64-byte symbol {symbol}")]
    NoDescriptor { name: String, symbol: String },
}

/// The kernels of an AMDGPU code object.
pub fn load(bytes: &[u8]) -> Result<Vec<AmdgpuKernel>, AmdgpuLoadError> {
    let kernels = ditto_kernels::parse_code_object(bytes)
        .map_err(|e| AmdgpuLoadError::Metadata(e.to_string()))?
        .ok_or(AmdgpuLoadError::NoMetadata)?;
    let file = object::File::parse(bytes)?;
    let mut out = Vec::with_capacity(kernels.len());
    for k in kernels {
        let descriptor =
            descriptor(&file, &k.symbol).ok_or_else(|| AmdgpuLoadError::NoDescriptor {
                name: k.name.clone(),
                symbol: k.symbol.clone(),
            })?;
        let explicit: Vec<(u64, u64)> = k
            .explicit_args()
            .iter()
            .map(|a| (a.offset, a.size))
            .collect();
        let implementation = implementation(&k.name, &explicit);
        out.push(AmdgpuKernel {
            symbol: k.symbol,
            name: k.name,
            kernarg_size: k.kernarg_segment_size as u32,
            descriptor,
            implementation,
        });
    }
    Ok(out)
}

/// How kernel `name`, whose explicit arguments are `explicit` (offset,
/// size), will run.
fn implementation(name: &str, explicit: &[(u64, u64)]) -> Implementation {
    if name.starts_with("__amd_rocclr_") {
        return match Blit::for_kernel(name, explicit) {
            Ok(Some(blit)) => Implementation::Blit(blit),
            Err(why) => Implementation::Missing(format!(
                "ditto GPU engine: cannot run CLR's blit kernel `{name}`: {why}"
            )),
            Ok(None) => Implementation::Missing(format!(
                "ditto GPU engine: CLR's blit kernel `{name}` is not implemented by the CPU runtime \
                 (crates/hsa-cpu/src/code_objects/blit_kernels.rs lists those that are)"
            )),
        };
    }
    let shown = match ditto_kernels::demangle(name) {
        Some(d) => format!("`{name}` ({d})"),
        None => format!("`{name}`"),
    };
    match host_kernels::find(name) {
        Ok(host) => match same_argument_bytes(&shown, &host.path, host.kernarg_size, explicit) {
            Ok(()) => Implementation::Host(host),
            Err(message) => Implementation::Missing(message),
        },
        Err(looked) => Implementation::Missing(format!(
            "ditto GPU engine: kernel {shown} has no host implementation: {looked}"
        )),
    }
}

/// Whether a host build lays out `host_kernarg_size` bytes of explicit
/// arguments where the code object's explicit arguments end. Err: the
/// message naming the kernel and the host build.
fn same_argument_bytes(
    shown: &str,
    host_build: &std::path::Path,
    host_kernarg_size: u32,
    explicit: &[(u64, u64)],
) -> Result<(), String> {
    let explicit_end = explicit.iter().map(|(o, s)| o + s).max().unwrap_or(0);
    if host_kernarg_size as u64 == explicit_end {
        return Ok(());
    }
    Err(format!(
        "ditto GPU engine: kernel {shown}: its host build in {} lays out {host_kernarg_size} bytes of \
         arguments, the AMDGPU code object {explicit_end}: rebuild the host build from the same \
         source",
        host_build.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_64_bit_little_endian_amdgpu_elves_are_amdgpu() {
        let mut h = [0u8; 20];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 2;
        h[5] = 1;
        h[18..20].copy_from_slice(&224u16.to_le_bytes());
        assert!(is_amdgpu(&h));
        h[18..20].copy_from_slice(&62u16.to_le_bytes());
        assert!(!is_amdgpu(&h));
        assert!(!is_amdgpu(&h[..10]));
    }

    #[test]
    fn a_host_build_must_lay_out_as_many_argument_bytes_as_the_code_object() {
        // scale_values<double>: 0/8, 8/8, 16/8, 24/4 → 28 bytes.
        let explicit = [(0, 8), (8, 8), (16, 8), (24, 4)];
        let path = std::path::Path::new("/x/app.host.so");
        assert_eq!(same_argument_bytes("`k`", path, 28, &explicit), Ok(()));
        let err = same_argument_bytes("`k`", path, 32, &explicit).unwrap_err();
        assert!(
            err.contains("`k`") && err.contains("/x/app.host.so"),
            "{err}"
        );
        assert!(
            err.contains("32 bytes") && err.contains("code object 28"),
            "{err}"
        );
        assert_eq!(same_argument_bytes("`k`", path, 0, &[]), Ok(()));
    }

    #[test]
    fn unknown_blit_kernels_and_kernels_without_host_build_name_themselves() {
        match implementation("__amd_rocclr_initHeap", &[(0, 8)]) {
            Implementation::Missing(m) => assert!(m.contains("__amd_rocclr_initHeap"), "{m}"),
            _ => panic!("initHeap must not be implemented"),
        }
        match implementation("_Z14no_such_kernelPf", &[(0, 8)]) {
            Implementation::Missing(m) => {
                assert!(m.contains("_Z14no_such_kernelPf"), "{m}");
                assert!(m.contains("no_such_kernel(float*)"), "{m}");
                assert!(m.contains(".host.so"), "{m}");
            }
            _ => panic!("a kernel without host build must be missing"),
        }
    }
}
