//! Fixed-width and variable-width integer encodings shared by every on-disk format.
//!
//! All fixed-width integers are little-endian. Varints are LEB128 (7 bits per byte, high bit
//! set on every byte but the last), as in LevelDB and protobuf. Decoders never trust their
//! input: they return `None` when the bytes run out or a varint is over-long, and the caller
//! turns that into [`crate::Error::Corruption`] with the file and offset it knows.

/// Appends `v` as a LEB128 varint.
pub fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// Appends a length-prefixed byte string.
pub fn put_bytes(buf: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(buf, bytes.len() as u64);
    buf.extend_from_slice(bytes);
}

/// Appends `v` little-endian.
pub fn put_u32(buf: &mut Vec<u8>, v: u32) {
    buf.extend_from_slice(&v.to_le_bytes());
}

/// Appends `v` little-endian.
pub fn put_u64(buf: &mut Vec<u8>, v: u64) {
    buf.extend_from_slice(&v.to_le_bytes());
}

/// Reads a little-endian `u32` at `pos`.
pub fn get_u32(buf: &[u8], pos: usize) -> Option<u32> {
    let b = buf.get(pos..pos.checked_add(4)?)?;
    Some(u32::from_le_bytes(b.try_into().ok()?))
}

/// Reads a little-endian `u64` at `pos`.
pub fn get_u64(buf: &[u8], pos: usize) -> Option<u64> {
    let b = buf.get(pos..pos.checked_add(8)?)?;
    Some(u64::from_le_bytes(b.try_into().ok()?))
}

/// A cursor over a byte slice for decoding; every read is bounds-checked.
#[derive(Debug, Clone)]
pub struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Decoder<'a> {
    /// Starts decoding at the beginning of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Decoder { buf, pos: 0 }
    }

    /// Current position in the slice.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// True when every byte has been consumed.
    pub fn is_empty(&self) -> bool {
        self.pos == self.buf.len()
    }

    /// Reads a LEB128 varint of at most 10 bytes.
    #[inline]
    pub fn varint(&mut self) -> Option<u64> {
        // Lengths in blocks and batches are almost always below 128: one byte, decoded inline.
        match self.buf.get(self.pos) {
            Some(&b) if b < 0x80 => {
                self.pos += 1;
                Some(u64::from(b))
            }
            _ => self.varint_multi_byte(),
        }
    }

    #[inline(never)]
    fn varint_multi_byte(&mut self) -> Option<u64> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let b = *self.buf.get(self.pos)?;
            self.pos += 1;
            if i == 9 && b > 1 {
                return None; // would overflow 64 bits
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Some(v);
            }
        }
        None
    }

    /// Reads a varint used as a length, and checks that that many bytes remain, so a
    /// corrupted length can never size an allocation.
    pub fn len_prefix(&mut self) -> Option<usize> {
        let n = usize::try_from(self.varint()?).ok()?;
        (n <= self.remaining()).then_some(n)
    }

    /// Reads `n` raw bytes.
    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let b = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(b)
    }

    /// Reads a length-prefixed byte string.
    pub fn length_prefixed(&mut self) -> Option<&'a [u8]> {
        let n = self.len_prefix()?;
        self.bytes(n)
    }

    /// Reads one byte.
    pub fn u8(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    /// Reads a little-endian `u64`.
    pub fn u64(&mut self) -> Option<u64> {
        let v = get_u64(self.buf, self.pos)?;
        self.pos += 8;
        Some(v)
    }
}

/// CRC32 (IEEE, via `crc32fast`) of the concatenation of `parts`.
pub fn crc32(parts: &[&[u8]]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for p in parts {
        h.update(p);
    }
    h.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_round_trip_and_bounds() {
        let values = [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX - 1, u64::MAX];
        let mut buf = Vec::new();
        for &v in &values {
            put_varint(&mut buf, v);
        }
        let mut d = Decoder::new(&buf);
        for &v in &values {
            assert_eq!(d.varint(), Some(v));
        }
        assert!(d.is_empty());
        assert_eq!(d.varint(), None);
        // Eleven continuation bytes never decode.
        assert_eq!(Decoder::new(&[0xff; 11]).varint(), None);
        // A length prefix larger than what remains is refused.
        let mut b = Vec::new();
        put_varint(&mut b, 1 << 40);
        b.extend_from_slice(b"abc");
        assert_eq!(Decoder::new(&b).length_prefixed(), None);
    }
}
