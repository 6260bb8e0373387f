//! How quantities read in ditto's messages: a count with its noun
//! ("1 dispatch", "3 dispatches") and a byte size ("3.0 MiB"). A leaf
//! module: it imports nothing of the crate, so the commands, the kernel
//! listing and the progress line all take these from here.

/// "1 dispatch", "2 dispatches".
pub fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Bytes in the largest binary unit that leaves at least 1: "512 bytes",
/// "1.5 KiB", "3.0 MiB", "1.0 GiB".
pub fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_take_the_singular_only_for_one() {
        assert_eq!(plural(0, "dispatch", "dispatches"), "0 dispatches");
        assert_eq!(plural(1, "dispatch", "dispatches"), "1 dispatch");
        assert_eq!(plural(2, "array", "arrays"), "2 arrays");
    }

    #[test]
    fn byte_sizes_use_the_largest_unit_of_at_least_one() {
        assert_eq!(human_bytes(512), "512 bytes");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 20), "3.0 MiB");
        assert_eq!(human_bytes(1 << 30), "1.0 GiB");
    }
}
