//! The applications of tests/hip/ and what each prints when it ran right:
//! the same under every real HIP runtime (5.2 on the host, 6.4 and 7.2 in
//! the chroots of scripts/rocm-chroot).

/// (application, arguments, its whole standard output).
pub const HIP_SUITE: &[(&str, &[&str], &str)] = &[
    // 65536 values (i % 7) * 0.5: exactly 98301.5 in any summation order.
    ("reduce_sum_baseline", &[], "sum = 98301.5\n"),
    ("reduce_sum_optimized", &[], "sum = 98301.5\n"),
    ("reduce_sum_wrong", &[], "sum = 0.0\n"),
    (
        "vector_add",
        &[],
        "vector_add: n = 10000, c[0] = 0, c[1] = 3, c[9999] = 29997, wrong = 0\n",
    ),
    (
        "scale_values",
        &["float"],
        "scale_values<float>: N = 1024, output[0..3] = 0 2 4 6, output[1023] = 2046\n",
    ),
    (
        "scale_values",
        &["double", "3000"],
        "scale_values<double>: N = 3000, output[0..3] = 0 2 4 6, output[2999] = 5998\n",
    ),
    (
        "scale_twice",
        &[],
        "scale_twice: N = 1024, middle[1] = 2, middle[1023] = 2046, output[1] = 6, output[1023] = 6138\n",
    ),
    (
        "no_dispatch",
        &[],
        "no_dispatch: launched vector_add only, c[0] = 1, c[1023] = 1024\n",
    ),
    (
        "blit_checks",
        &[],
        "memset_unaligned: ok\nmemset_d32: ok\ncopy_unaligned: ok\ncopy_aligned: ok\ncopy_2d: ok\n\
         copy_2d_aligned: ok\nmemset_2d: ok\nstream_write_wait: ok\n",
    ),
    (
        "ipc_share",
        &[],
        "ipc_share child: scaled 4096 values in the parent's buffer\n\
         ipc_share: n = 4096, data[1] = 3, data[4095] = 12285, wrong = 0\n",
    ),
];
