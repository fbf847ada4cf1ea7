//! LEB128 varints, shared by the record header and the hint file.
//!
//! At most 10 bytes for a `u64`; the tenth byte may carry only the top bit, and a trailing zero
//! byte (an overlong form) is refused, so every value has exactly one encoding. That makes an
//! encoded length a function of the values alone: re-encoding a decoded record or hint entry
//! reproduces its bytes, and a length can be computed without encoding ([`len`]).

use super::DecodeError;

/// Appends `v` as a LEB128 varint.
pub fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Bytes [`put`] writes for `v` (1 to 10).
#[must_use]
pub fn len(v: u64) -> usize {
    // 7 bits per byte; 0 still takes one byte.
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Reads a varint at `*pos`, advancing it.
///
/// Inlined for its one-byte form (values below 128: most fields of a header or hint entry),
/// the rest in [`get_long`]: a record header or hint entry holds six or seven varints, and a
/// call for each was 6 % of an open's samples.
///
/// # Errors
/// `Truncated` when `b` ends inside the varint, `BadField` for an overlong form or a value
/// past `u64::MAX`.
#[inline]
pub fn get(b: &[u8], pos: &mut usize) -> Result<u64, DecodeError> {
    match b.get(*pos) {
        Some(&byte) if byte < 0x80 => {
            *pos += 1;
            Ok(u64::from(byte))
        }
        _ => get_long(b, pos),
    }
}

/// [`get`] for any form (and the errors).
#[inline(never)]
fn get_long(b: &[u8], pos: &mut usize) -> Result<u64, DecodeError> {
    let mut v = 0u64;
    for i in 0..10u32 {
        let byte = *b.get(*pos).ok_or(DecodeError::Truncated)?;
        *pos += 1;
        if i == 9 && byte > 1 {
            return Err(DecodeError::BadField);
        }
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            if i > 0 && byte == 0 {
                return Err(DecodeError::BadField);
            }
            return Ok(v);
        }
    }
    Err(DecodeError::BadField)
}

/// An `i32` mapped to an unsigned value so small magnitudes of either sign stay short.
#[must_use]
pub fn zigzag(v: i32) -> u64 {
    u64::from(((v << 1) ^ (v >> 31)) as u32)
}

/// The inverse of [`zigzag`].
///
/// # Errors
/// `BadField` for a value that no `i32` maps to.
pub fn unzigzag(v: u64) -> Result<i32, DecodeError> {
    let v = u32::try_from(v).map_err(|_| DecodeError::BadField)?;
    Ok(((v >> 1) as i32) ^ -((v & 1) as i32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_length_at_every_boundary() {
        let mut values = vec![0, 1, u64::MAX, u64::MAX - 1];
        for shift in 1..64 {
            let edge = 1u64 << shift;
            values.extend([edge - 1, edge, edge + 1]);
        }
        for v in values {
            let mut b = Vec::new();
            put(&mut b, v);
            assert_eq!(b.len(), len(v), "length of {v}");
            let mut pos = 0;
            assert_eq!(get(&b, &mut pos), Ok(v));
            assert_eq!(pos, b.len());
            for cut in 0..b.len() {
                let mut pos = 0;
                assert_eq!(get(&b[..cut], &mut pos), Err(DecodeError::Truncated));
            }
        }
    }

    #[test]
    fn overlong_and_oversized_forms_are_refused() {
        // 0 written in two bytes.
        assert_eq!(get(&[0x80, 0x00], &mut 0), Err(DecodeError::BadField));
        // 1 with a trailing zero continuation.
        assert_eq!(get(&[0x81, 0x80, 0x00], &mut 0), Err(DecodeError::BadField));
        // A tenth byte carrying more than the top bit.
        let mut b = vec![0xff; 9];
        b.push(0x02);
        assert_eq!(get(&b, &mut 0), Err(DecodeError::BadField));
        // Eleven bytes.
        assert_eq!(get(&[0xff; 11], &mut 0), Err(DecodeError::BadField));
    }

    #[test]
    fn zigzag_round_trips_and_keeps_small_values_short() {
        for v in [0, 1, -1, 2, -2, 63, -64, i32::MAX, i32::MIN] {
            assert_eq!(unzigzag(zigzag(v)), Ok(v));
        }
        assert_eq!(len(zigzag(-1)), 1);
        assert_eq!(len(zigzag(63)), 1);
        assert_eq!(
            unzigzag(u64::from(u32::MAX) + 1),
            Err(DecodeError::BadField)
        );
    }
}
