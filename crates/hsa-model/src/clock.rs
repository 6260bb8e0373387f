//! The model GPU's clock: the timestamps it writes into completion
//! signals and SDMA timestamp packets, in nanoseconds of CLOCK_MONOTONIC
//! (the clock ROCr's system timestamps read on Linux, so a dispatch's
//! times fall in the application's own time line).

/// Now, in ns of CLOCK_MONOTONIC.
pub fn now() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}
