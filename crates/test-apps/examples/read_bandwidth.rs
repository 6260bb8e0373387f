//! read_bandwidth: the machine's memory read bandwidth, for scripts/bench
//! (`ditto compare`'s throughput is measured against it in the same run).
//!
//!   read_bandwidth [--mib N] [--passes P] [--threads T]
//!
//! Fills N MiB (default 1024), then reads all of it P times (default 5) as
//! 64-bit words summed by T threads (default: every CPU, as compare's rayon
//! pool uses), each thread one contiguous slice. Prints the fastest pass:
//!   read_bandwidth: mib=<N> threads=<T> passes=<P> best_s=<s> bytes_per_s=<B>
//! Peak memory: N MiB.

use std::hint::black_box;
use std::time::Instant;

fn value_of(args: &[String], flag: &str, default: usize) -> usize {
    match args.iter().position(|a| a == flag) {
        None => default,
        Some(i) => match args.get(i + 1).and_then(|v| v.parse::<usize>().ok()) {
            Some(v) if v > 0 => v,
            _ => {
                eprintln!("read_bandwidth: {flag} needs a positive integer");
                std::process::exit(2);
            }
        },
    }
}

/// Sum of the words, four independent chains so that the loads, not the
/// additions, bound the loop.
fn sum(words: &[u64]) -> u64 {
    let mut acc = [0u64; 4];
    let chunks = words.chunks_exact(4);
    let rest: u64 = chunks.remainder().iter().fold(0, |a, w| a.wrapping_add(*w));
    for c in chunks {
        for k in 0..4 {
            acc[k] = acc[k].wrapping_add(c[k]);
        }
    }
    acc.iter().fold(rest, |a, v| a.wrapping_add(*v))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(unknown) = args
        .iter()
        .enumerate()
        .find(|(i, a)| i % 2 == 0 && !["--mib", "--passes", "--threads"].contains(&a.as_str()))
    {
        eprintln!(
            "read_bandwidth: unknown argument {:?} (usage: read_bandwidth [--mib N] [--passes P] [--threads T])",
            unknown.1
        );
        std::process::exit(2);
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mib = value_of(&args, "--mib", 1024);
    let passes = value_of(&args, "--passes", 5);
    let threads = value_of(&args, "--threads", cpus);
    let words: Vec<u64> = (0..(mib << 20) / 8).map(|i| i as u64).collect();
    let per_thread = words.len().div_ceil(threads);
    let mut best = f64::INFINITY;
    let mut total = 0u64;
    for _ in 0..passes {
        let start = Instant::now();
        let sums: Vec<u64> = std::thread::scope(|s| {
            let handles: Vec<_> = words
                .chunks(per_thread)
                .map(|slice| s.spawn(move || sum(black_box(slice))))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        best = best.min(start.elapsed().as_secs_f64());
        total = total.wrapping_add(sums.iter().fold(0, |a, v| a.wrapping_add(*v)));
    }
    let n = words.len() as u64;
    let expected = (n.wrapping_mul(n.wrapping_sub(1)) / 2).wrapping_mul(passes as u64);
    if total != expected {
        eprintln!("read_bandwidth: the sums are wrong ({total} != {expected})");
        std::process::exit(1);
    }
    let bytes = (words.len() * 8) as f64;
    println!(
        "read_bandwidth: mib={mib} threads={threads} passes={passes} best_s={best:.6} bytes_per_s={:.0}",
        bytes / best
    );
}
