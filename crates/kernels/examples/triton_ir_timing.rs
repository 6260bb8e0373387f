//! Times the Triton IR analysis on `scf.for` loops nested 2,000, 8,000
//! and 16,000 deep, and on 256-deep nests repeated to as many lines (the
//! deepest it follows), and reading an entry whose metadata holds 15 MiB
//! of `{}` items: prints the times and the peak memory, asserts nothing.
//! For the book's
//! measured runs: `cargo run --release -p ditto-kernels --example
//! triton_ir_timing`.

use std::time::Instant;

/// `count` nests of `depth` `scf.for` loops, each innermost copying
/// `x_ptr`'s value to `out_ptr`.
fn nested_loops(depth: usize, count: usize) -> String {
    let mut body = String::from(
        "    %c0 = arith.constant 0 : i32 loc(#loc1)\n    %c1 = arith.constant 1 : i32 loc(#loc1)\n",
    );
    for _ in 0..count {
        for d in 0..depth {
            body += &format!("    scf.for %i{d} = %c0 to %c1 step %c1 : i32 {{\n");
        }
        body += "    %v = tt.load %x_ptr : !tt.ptr<f32> loc(#loc2)\n    tt.store %out_ptr, %v : !tt.ptr<f32> loc(#loc3)\n";
        for _ in 0..depth {
            body += "    } loc(#loc4)\n";
        }
    }
    format!(
        "module {{\n  tt.func public @k(%x_ptr: !tt.ptr<f32> loc(#loc), %out_ptr: !tt.ptr<f32> \
         loc(#loc)) attributes {{noinline = false}} {{\n{body}    tt.return loc(#loc5)\n  }} \
         loc(#loc)\n}} loc(#loc)\n"
    )
}

/// The process's peak resident memory, in MiB (VmHWM).
fn peak_mib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        / 1024
}

fn main() {
    // An entry whose metadata is 15 MiB of `{}` items (under the cap).
    let cache = std::env::temp_dir().join(format!("triton-timing-{}", std::process::id()));
    let entry = cache.join("abc");
    std::fs::create_dir_all(&entry).unwrap();
    let items = vec!["{}"; (15 << 20) / 3].join(",");
    std::fs::write(
        entry.join("k.json"),
        format!(
            r#"{{"name": "k", "target": {{"backend": "hip", "arch": "gfx942"}}, "pad": [{items}]}}"#
        ),
    )
    .unwrap();
    std::fs::write(entry.join("k.ttir"), nested_loops(1, 1)).unwrap();
    let before = peak_mib();
    let start = Instant::now();
    let found = ditto_kernels::triton::find(&cache, "k").len();
    println!(
        "15 MiB of {{}} items: {:.3} s, peak {} MiB before, {} MiB after ({found} found)",
        start.elapsed().as_secs_f64(),
        before,
        peak_mib()
    );
    std::fs::remove_dir_all(&cache).unwrap();

    for (depth, count) in [
        (2_000, 1),
        (8_000, 1),
        (16_000, 1),
        (256, 8),
        (256, 32),
        (256, 64),
    ] {
        let ir = nested_loops(depth, count);
        let start = Instant::now();
        let result = ditto_kernels::triton::pointer_writes(&ir, "k");
        println!(
            "{depth:>6} deep x{count:<3} ({:>8} bytes): {:>8.3} s: {result:?}",
            ir.len(),
            start.elapsed().as_secs_f64()
        );
    }
}
