//! A hasher for map keys that are addresses the runtime chose (kernel
//! descriptors, allocation bases): one folded 128-bit multiplication, which
//! spreads page- or cache-line-aligned values over every bit. Not for keys
//! an adversary picks; std's SipHash would double the cost of the hot-path
//! lookups that use it.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

#[derive(Default)]
pub struct AddressHasher(u64);

fn fold_mul(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    (product as u64) ^ ((product >> 64) as u64)
}

impl Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = fold_mul(self.0 ^ value, MULTIPLIER);
    }
}

/// A map keyed by addresses.
pub type AddressMap<V> = HashMap<u64, V, BuildHasherDefault<AddressHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn page_aligned_addresses_spread_over_the_low_bits() {
        // hashbrown picks buckets with the low bits: aligned keys must not
        // all land in the same few.
        let build = BuildHasherDefault::<AddressHasher>::default();
        let mut buckets = std::collections::HashSet::new();
        for page in 0..256u64 {
            buckets.insert(build.hash_one(0x7f00_0000_0000 + page * 4096) & 0xff);
        }
        assert!(buckets.len() > 128, "{} of 256 buckets used", buckets.len());
    }
}
