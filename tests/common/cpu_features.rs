//! What this machine's CPU offers that tests depend on. Shared by the
//! end-to-end tests (`common`) and the CPU runtime's tests
//! (`crates/hsa-cpu/tests/runtime`, which include it with `#[path]`).

/// Whether this CPU has protection keys (`pku` and `ospke` in
/// /proc/cpuinfo, as the runtime's warning names them), which the CPU
/// runtime needs to make a CPU access to GPU memory fault as on a discrete
/// GPU.
pub fn cpu_has_protection_keys() -> bool {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags: Vec<&str> = info
        .lines()
        .find(|l| l.starts_with("flags"))
        .map(|l| l.split_whitespace().collect())
        .unwrap_or_default();
    flags.contains(&"pku") && flags.contains(&"ospke")
}
