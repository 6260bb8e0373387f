//! Where the C++ test applications are.
//!
//! build.rs compiles every application of tests/apps/ (two g++ passes each:
//! a CPU code object, then a host executable embedding it) into
//! `target/<profile>/apps/`. This crate only names and locates them; it never
//! builds or runs anything itself.

use std::path::PathBuf;

/// Every application built into `target/<profile>/apps/`.
pub const APPS: &[&str] = &[
    "reduce_sum_baseline",
    "reduce_sum_optimized",
    "reduce_sum_wrong",
    "vector_add",
    "scale_values",
    "scale_twice",
    "no_dispatch",
    "parallel_groups",
];

/// Code objects of test-only kernel files (no executable), next to the apps.
pub const KERNEL_FILES: &[&str] = &["kernel_checks"];

/// `target/<profile>/apps`, as build.rs computed it.
pub fn apps_dir() -> PathBuf {
    PathBuf::from(env!("DITTO_TEST_APPS_DIR"))
}

/// The built executable of application `name` (one of [`APPS`]).
///
/// Panics with what to do when the application is unknown or not built.
pub fn app_path(name: &str) -> PathBuf {
    assert!(
        APPS.contains(&name),
        "unknown test application `{name}`; known: {}",
        APPS.join(", ")
    );
    existing(apps_dir().join(name), name)
}

/// The CPU code object (`<name>.co`) of an application or kernel file: an
/// x86-64 shared object in the format of include/ditto_hsa_cpu.h.
///
/// Panics with what to do when it is unknown or not built.
pub fn code_object_path(name: &str) -> PathBuf {
    assert!(
        APPS.contains(&name) || KERNEL_FILES.contains(&name),
        "unknown code object `{name}`; known: {}, {}",
        APPS.join(", "),
        KERNEL_FILES.join(", ")
    );
    existing(apps_dir().join(format!("{name}.co")), name)
}

fn existing(path: PathBuf, name: &str) -> PathBuf {
    assert!(
        path.exists(),
        "test application `{name}` is not built: {} is missing; run `cargo build -p test-apps` \
         (or `cargo build --workspace`) first",
        path.display()
    );
    path
}
