//! The headers of the host build, carried inside the ditto binary so that
//! `ditto hipcc` works wherever the binary is: written into the build's
//! scratch directory for each run (a few hundred kilobytes).

use std::path::{Path, PathBuf};

/// (path under the include directory, contents).
const HEADERS: &[(&str, &str)] = &[
    (
        "ditto_hip_cpu.hpp",
        include_str!("../../../include/ditto_hip_cpu.hpp"),
    ),
    (
        "ditto_hsa_cpu.h",
        include_str!("../../../include/ditto_hsa_cpu.h"),
    ),
    (
        "ditto_hip_host/ditto_hip_prelude.h",
        include_str!("../../../include/ditto_hip_host/ditto_hip_prelude.h"),
    ),
    (
        "ditto_hip_host/hip/hip_runtime.h",
        include_str!("../../../include/ditto_hip_host/hip/hip_runtime.h"),
    ),
    (
        "ditto_hip_host/hip/hip_runtime_api.h",
        include_str!("../../../include/ditto_hip_host/hip/hip_runtime_api.h"),
    ),
    (
        "ditto_hip_host/hip/hip_fp16.h",
        include_str!("../../../include/ditto_hip_host/hip/hip_fp16.h"),
    ),
    (
        "ditto_hip_host/hip/hip_cooperative_groups.h",
        include_str!("../../../include/ditto_hip_host/hip/hip_cooperative_groups.h"),
    ),
    (
        "ditto_hip_host/hip/ditto_hip_platform.h",
        include_str!("../../../include/ditto_hip_host/hip/ditto_hip_platform.h"),
    ),
    (
        "ditto_hip_host/hip/ditto_device_functions.h",
        include_str!("../../../include/ditto_hip_host/hip/ditto_device_functions.h"),
    ),
];

/// The two include directories of a host build, in search order.
pub struct IncludeDirs {
    pub host: PathBuf,
    pub common: PathBuf,
}

/// Writes the headers under `dir`.
pub fn write(dir: &Path) -> std::io::Result<IncludeDirs> {
    for (name, text) in HEADERS {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, text)?;
    }
    Ok(IncludeDirs {
        host: dir.join("ditto_hip_host"),
        common: dir.to_path_buf(),
    })
}
