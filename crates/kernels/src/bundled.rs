//! The device code a program, object or library member carries: the
//! mangled names of the kernels and device variables of every AMDGPU code
//! object in its offload bundle. Owns nothing but that walk; bundles are
//! read by `offload_bundle`, kernels by `metadata`, variables by
//! `variables`.

use crate::{
    BundleError, MetadataError, VariablesError, code_object_variables, device_code_objects,
    parse_code_object,
};

/// Why a file's device code could not be read: its bundle, a code
/// object's metadata or its symbols, in their own words.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BundledCodeError {
    #[error(transparent)]
    Bundle(#[from] BundleError),
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    #[error(transparent)]
    Variables(#[from] VariablesError),
}

/// Names found in the code objects, in their order (a name present in
/// several code objects, one per target, appears once per object).
/// Variables are split by where they lie: `variables` in writable memory
/// (`__device__`, and `__constant__` under clang 15), `read_only_variables`
/// in `.rodata`, where clang 21 puts `__constant__` variables too, beside
/// the `constexpr` class members a device pass emits (which are not device
/// variables: only the device pass's IR tells them apart).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct BundledDeviceCode {
    pub kernels: Vec<String>,
    pub variables: Vec<String>,
    pub read_only_variables: Vec<String>,
}

/// The kernels and variables of `bytes` (a host ELF with `.hip_fatbin`, an
/// offload bundle or a code object). A file without a fatbin (a CPU
/// runtime code object among them) carries no device code: empty, not an
/// error.
pub fn bundled_device_code(bytes: &[u8]) -> Result<BundledDeviceCode, BundledCodeError> {
    let objects = match device_code_objects(bytes) {
        Err(BundleError::NoFatbin | BundleError::CpuRuntimeCodeObject) => {
            return Ok(BundledDeviceCode::default());
        }
        other => other?,
    };
    let mut code = BundledDeviceCode::default();
    for object in objects {
        let kernels = parse_code_object(object.bytes)?.unwrap_or_default();
        code.kernels.extend(kernels.into_iter().map(|k| k.name));
        for v in code_object_variables(object.bytes)? {
            if v.writable {
                code.variables.push(v.name);
            } else {
                code.read_only_variables.push(v.name);
            }
        }
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_without_device_code_carries_none() {
        // A host ELF without .hip_fatbin: this test binary itself.
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(bundled_device_code(&me), Ok(BundledDeviceCode::default()));
    }
}
