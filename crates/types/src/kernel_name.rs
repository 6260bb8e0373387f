//! A kernel's identity as the runtime loaded it: the symbol and its
//! demangled signature. Computing either from a code object is
//! `ditto-kernels`' job, not this module's.

use serde::{Deserialize, Serialize};

/// Identity of a kernel as loaded by the runtime.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Hash)]
pub struct KernelName {
    /// Symbol name without the `.kd` suffix (e.g. `_Z10reduce_sumPKfPfi`).
    pub mangled: String,
    /// Demangled signature (e.g. `reduce_sum(float const*, float*, int)`).
    pub demangled: String,
}
