//! What a replay capture keeps of a target kernel when its executable is
//! frozen ([`KernelCode`]): the code object that holds it (a copy, named by
//! its SHA-256: [`CodeObjectCopy`]) and the module-scope variables of its
//! executable ([`ModuleVariable`]). Plain data, used by the kernel table
//! that holds it, the replay part of a dispatch and the connection that
//! sends the code object; depends on nothing else of the crate.

use sha2::{Digest, Sha256};
use std::sync::Arc;

/// A code object as the runtime loaded it, named by the SHA-256 of its bytes.
#[derive(Debug)]
pub struct CodeObjectCopy {
    /// Lowercase hex SHA-256 of `bytes`.
    pub digest: String,
    pub bytes: Arc<[u8]>,
    /// The GPU it is built for, as its metadata says (`gfx90a:sramecc+:xnack-`).
    pub target: Option<String>,
}

impl CodeObjectCopy {
    pub fn new(bytes: Arc<[u8]>) -> CodeObjectCopy {
        let target = ditto_kernels::device_code_objects(&bytes)
            .ok()
            .and_then(|objects| objects.first()?.target());
        CodeObjectCopy {
            digest: sha256_hex(&bytes),
            bytes,
            target,
        }
    }
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A module-scope variable (`__device__`, `__constant__`) of the
/// executable that holds a kernel, where the runtime placed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleVariable {
    pub name: String,
    pub address: u64,
    pub size: u64,
}

/// What a replay needs of a target kernel's code.
#[derive(Debug)]
pub struct KernelCode {
    /// The kernel's symbol in its code object (`<mangled>.kd` on HSA).
    pub symbol: String,
    /// The code object holding the kernel, or why the tool has none.
    pub code_object: Result<Arc<CodeObjectCopy>, String>,
    pub variables: Vec<ModuleVariable>,
}
