//! store_floor: how long this machine takes to put N MiB of memory into a
//! new file of a directory, for scripts/bench (the capture of a large
//! buffer is measured against it in the same run: whatever the collector
//! does, it must at least write the bytes into a new file of the snapshot
//! directory, and on some machines that, not the copy, is the cost).
//!
//!   store_floor --dir DIR [--mib N]
//!
//! Fills N MiB (default 1024) of its own memory, then times: create a new
//! file in DIR, write the N MiB into it from that memory (write(2), in the
//! page cache, not synced), close it. The file is removed afterwards.
//! Prints:
//!   store_floor: mib=<N> write_s=<s> bytes_per_s=<B>
//! Peak memory: N MiB, plus N MiB of page cache until the file is removed.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

fn usage() -> ! {
    eprintln!("store_floor: usage: store_floor --dir DIR [--mib N]");
    std::process::exit(2);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut dir: Option<PathBuf> = None;
    let mut mib = 1024usize;
    let mut i = 0;
    while i < args.len() {
        match (args[i].as_str(), args.get(i + 1)) {
            ("--dir", Some(d)) => dir = Some(PathBuf::from(d)),
            ("--mib", Some(n)) => match n.parse::<usize>() {
                Ok(n) if n > 0 => mib = n,
                _ => {
                    eprintln!("store_floor: --mib needs a positive integer, not {n:?}");
                    std::process::exit(2);
                }
            },
            _ => usage(),
        }
        i += 2;
    }
    let Some(dir) = dir else { usage() };
    // Written (not just allocated): the application's buffer is in memory.
    let data: Vec<u8> = (0..mib << 20).map(|i| (i % 251) as u8).collect();
    let path = dir.join(format!("store-floor-{}.bin", std::process::id()));
    let start = Instant::now();
    let written = std::fs::File::create_new(&path).and_then(|mut f| f.write_all(&data));
    let elapsed = start.elapsed().as_secs_f64();
    let removed = std::fs::remove_file(&path);
    if let Err(e) = written {
        eprintln!("store_floor: cannot write {}: {e}", path.display());
        std::process::exit(1);
    }
    if let Err(e) = removed {
        eprintln!("store_floor: cannot remove {}: {e}", path.display());
        std::process::exit(1);
    }
    println!(
        "store_floor: mib={mib} write_s={elapsed:.6} bytes_per_s={:.0}",
        data.len() as f64 / elapsed
    );
}
