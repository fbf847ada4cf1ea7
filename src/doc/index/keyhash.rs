//! The hash of the index's item-key maps: a folded multiply over eight bytes at a time with
//! per-process random keys. Item keys are short (a partition value and an id), so SipHash's
//! fixed cost per key was a fifth of an indexed write; this mixes about a word per cycle and,
//! keyed by random values from the standard library, still does not let a client who picks
//! item ids choose colliding keys without knowing the process's keys.

use std::hash::{BuildHasher, Hasher};

/// Builds [`KeyHasher`]s with this process's keys.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyHash {
    k0: u64,
    k1: u64,
}

impl Default for KeyHash {
    fn default() -> Self {
        // Random per process: the standard library's randomly keyed SipHash of two constants.
        let rs = std::hash::RandomState::new();
        Self {
            k0: rs.hash_one(0x243F_6A88_85A3_08D3_u64) | 1,
            k1: rs.hash_one(0x1319_8A2E_0370_7344_u64),
        }
    }
}

impl BuildHasher for KeyHash {
    type Hasher = KeyHasher;

    fn build_hasher(&self) -> KeyHasher {
        KeyHasher {
            h: self.k1,
            k: self.k0,
        }
    }
}

/// One key's hash in progress.
#[derive(Debug, Clone)]
pub(crate) struct KeyHasher {
    h: u64,
    k: u64,
}

/// The high and low halves of the 128-bit product, folded.
fn fold(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

const K2: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.h = fold(self.h ^ u64::from_le_bytes(w), self.k ^ K2);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            // The length keeps "a\0" and "a" apart.
            self.h = fold(
                self.h ^ u64::from_le_bytes(w),
                self.k ^ (rest.len() as u64).wrapping_mul(K2),
            );
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.h = fold(self.h ^ n as u64, self.k.rotate_left(29) ^ K2);
    }

    fn finish(&self) -> u64 {
        fold(self.h, self.k ^ K2.rotate_left(17))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn distinct_short_keys_rarely_share_a_hash() {
        let b = KeyHash::default();
        let mut seen = HashSet::new();
        for i in 0..100_000u32 {
            let key = format!("p{:04}\u{0}item-{i:08}", i % 1000);
            seen.insert(b.hash_one(key.as_bytes()));
            seen.insert(b.hash_one(&key.as_bytes()[..key.len() - 1]));
        }
        assert!(seen.len() > 199_990, "{}", seen.len());
        // Equal keys hash equally, whichever way they are held.
        let arc: std::sync::Arc<[u8]> = std::sync::Arc::from(&b"abc"[..]);
        assert_eq!(b.hash_one(&arc), b.hash_one(&b"abc"[..]));
    }
}
