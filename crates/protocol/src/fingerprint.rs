//! The fingerprint of a buffer's bytes: the tool computes it where the
//! buffer lies, the collector checks its copy against it (a stale or
//! foreign mapping differs with near certainty). Owns the hash, the byte
//! windows of a large buffer it reads, and the hash of those windows alone
//! (for a tool that copies only them from device memory), with the values
//! the Python package's port is pinned to. Knows nothing of messages or
//! frames.

/// Fingerprint of a buffer's bytes: a multiply-rotate hash over the length
/// and up to 64 evenly spaced 64-byte windows. Cheap for gigabyte buffers,
/// yet any stale or foreign mapping differs from the right one with near
/// certainty. The Python package checks stored buffers with a port of it
/// (`fingerprint` in python/ditto/snapshot.py); both are pinned to the same
/// values by `fingerprint_of_fixed_inputs_is_pinned_for_the_python_port`
/// and python/tests/test_snapshot_files.py: change both or neither.
pub fn fingerprint(bytes: &[u8]) -> u64 {
    fingerprint_of_windows(
        bytes.len() as u64,
        fingerprint_windows(bytes.len() as u64)
            .into_iter()
            .map(|(start, len)| &bytes[start as usize..(start + len) as usize]),
    )
}

/// The byte ranges `(start, len)` of a `len`-byte buffer that its
/// [`fingerprint`] reads, in order: the whole buffer when small, else 64
/// windows of 64 bytes. Lets a tool that cannot read the buffer in place
/// (device memory) copy only these ranges to the host.
pub fn fingerprint_windows(len: u64) -> Vec<(u64, u64)> {
    const WINDOW: u64 = 64;
    const WINDOWS: u64 = 64;
    if len <= WINDOW * WINDOWS {
        return vec![(0, len)];
    }
    let last_start = len - WINDOW;
    (0..WINDOWS)
        .map(|i| (i * last_start / (WINDOWS - 1), WINDOW))
        .collect()
}

/// [`fingerprint`] of a `len`-byte buffer from the bytes of its
/// [`fingerprint_windows`], given in the same order.
///
/// Each window is read 32 bytes at a time into four independent lanes
/// (xor a little-endian word, multiply by the 64-bit FNV prime, rotate so
/// that high bits reach the low ones), its last bytes one at a time into
/// the first lane; the lanes are folded into one at the end. About a cycle
/// per 8 bytes (the byte-at-a-time FNV-1a it replaces took about four per
/// byte: 10 µs of the tool's 45 per captured 4 KiB dispatch).
pub fn fingerprint_of_windows<'a>(len: u64, windows: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mix = |h: u64, word: u64| (h ^ word).wrapping_mul(PRIME).rotate_left(29);
    let mut lanes: [u64; 4] = [
        0xcbf2_9ce4_8422_2325,
        0x9e37_79b9_7f4a_7c15,
        0xc2b2_ae3d_27d4_eb4f,
        0x1656_67b1_9e37_79f9,
    ];
    lanes[0] = mix(lanes[0], len);
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    for w in windows {
        let mut blocks = w.chunks_exact(32);
        for block in &mut blocks {
            for (i, lane) in lanes.iter_mut().enumerate() {
                *lane = mix(*lane, word(&block[i * 8..i * 8 + 8]));
            }
        }
        for &b in blocks.remainder() {
            lanes[0] = mix(lanes[0], b as u64);
        }
        // Where one window ends and the next begins.
        lanes[1] = mix(lanes[1], w.len() as u64);
    }
    lanes[1..].iter().fold(lanes[0], |h, &l| mix(h, l))
}

/// The fingerprint of snapshots written before 2026-11-30 (of the same
/// format number): byte-at-a-time FNV-1a over the length's 8 little-endian
/// bytes and the same windows as [`fingerprint`]'s.
/// Readers accept it where the current one differs; the Python package's
/// `legacy_fingerprint` is the same function.
pub fn legacy_fingerprint(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |chunk: &[u8]| {
        for &b in chunk {
            h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    eat(&(bytes.len() as u64).to_le_bytes());
    for (start, len) in fingerprint_windows(bytes.len() as u64) {
        eat(&bytes[start as usize..(start + len) as usize]);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_sees_a_changed_byte_in_small_buffers_and_length_changes() {
        let a = vec![1u8; 1000];
        let mut b = a.clone();
        b[999] = 2;
        assert_ne!(fingerprint(&a), fingerprint(&b));
        assert_ne!(fingerprint(&a), fingerprint(&a[..999]));
        assert_eq!(fingerprint(&a), fingerprint(&a.clone()));
    }

    #[test]
    fn fingerprint_sees_every_single_bit_flip_and_swapped_words_of_a_4_kib_buffer() {
        let a: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let base = fingerprint(&a);
        for bit in 0..a.len() * 8 {
            let mut b = a.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert_ne!(fingerprint(&b), base, "bit {bit}");
        }
        // Two words of one lane exchanged, and two words of different lanes.
        for (x, y) in [(0usize, 32usize), (8, 16), (4088, 0)] {
            let mut b = a.clone();
            for k in 0..8 {
                b.swap(x + k, y + k);
            }
            assert_ne!(fingerprint(&b), base, "words at {x} and {y}");
        }
    }

    #[test]
    fn fingerprint_samples_large_buffers_including_both_ends() {
        let a = vec![0u8; 1 << 20];
        let mut first = a.clone();
        first[0] = 1;
        let mut last = a.clone();
        *last.last_mut().unwrap() = 1;
        assert_ne!(fingerprint(&a), fingerprint(&first));
        assert_ne!(fingerprint(&a), fingerprint(&last));
    }

    /// Bytes (7 i + 3) mod 256, as `pattern` in python/tests/test_snapshot_files.py.
    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + 3) as u8).collect()
    }

    #[test]
    fn fingerprint_of_fixed_inputs_is_pinned_for_the_python_port() {
        // The Python package checks stored buffers with its own port of
        // `fingerprint` (python/ditto/snapshot.py), pinned to these same
        // values by python/tests/test_snapshot_files.py: change both or
        // neither.
        let pinned = [
            (0, 0xB2C9_ADD9_E514_70CD),
            (1, 0x37DF_A922_FAC8_BE34),
            (100, 0x7FB6_7F77_E416_CBF2),
            (4096, 0x5175_80BA_F9B6_78F9),
            (4097, 0x5372_9E27_ABAD_B3E7),
            (10_000, 0x0516_F58F_9449_2535),
            ((1 << 20) + 13, 0x1851_224D_11E8_0442),
        ];
        for (len, expected) in pinned {
            assert_eq!(fingerprint(&pattern(len)), expected, "{len} bytes");
        }
    }

    #[test]
    fn fingerprint_from_windows_equals_fingerprint_of_the_whole_buffer() {
        for len in [0usize, 1, 4096, 4097, 1 << 20, (1 << 20) + 13] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let windows = fingerprint_windows(len as u64);
            assert!(
                windows.len() == 1 || windows.len() == 64,
                "{len}: {windows:?}"
            );
            assert_eq!(windows.last().map(|(s, l)| s + l), Some(len as u64));
            let from_windows = fingerprint_of_windows(
                len as u64,
                windows
                    .iter()
                    .map(|&(s, l)| &bytes[s as usize..(s + l) as usize]),
            );
            assert_eq!(from_windows, fingerprint(&bytes), "{len} bytes");
        }
    }

    #[test]
    fn the_fingerprint_of_older_snapshots_is_fnv_1a_over_the_length_and_windows() {
        // FNV-1a of the 8 bytes of 0u64 alone, and of 3u64 then "abc".
        assert_eq!(legacy_fingerprint(&[]), 0xa8c7_f832_281a_39c5);
        assert_eq!(legacy_fingerprint(b"abc"), 0xc11a_b6d2_519b_c2b2);
    }
}
