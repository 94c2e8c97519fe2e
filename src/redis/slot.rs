//! Redis Cluster hash slots.
//!
//! A Cluster stores a key on the node that serves its *hash slot*: CRC16 (XMODEM) of the key,
//! or of its *hash tag* — the text between the first `{` and the first `}` after it, when that
//! text is not empty — modulo 16384. A script may only touch keys of one slot.

/// How many hash slots a Cluster has.
pub(crate) const SLOT_COUNT: u16 = 16384;

const TABLE: [u16; 256] = crc16_table();

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0, no reflection), as Redis uses.
const fn crc16_table() -> [u16; 256] {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

fn crc16_update(mut crc: u16, bytes: &[u8]) -> u16 {
    for &byte in bytes {
        crc = (crc << 8) ^ TABLE[usize::from((crc >> 8) as u8 ^ byte)];
    }
    crc
}

/// The part of `key` its slot is computed from: the hash tag, else the whole key.
pub(crate) fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        let rest = &key[open + 1..];
        if let Some(close) = rest.iter().position(|&b| b == b'}')
            && close > 0
        {
            return &rest[..close];
        }
    }
    key
}

/// The hash slot of a Redis key (what `CLUSTER KEYSLOT` answers).
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    crc16_update(0, hash_tag(key)) & (SLOT_COUNT - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
    #[test]
    fn slots_match_redis() {
        assert_eq!(crc16_update(0, b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
        assert_eq!(hash_tag(b"no tag"), b"no tag");
        assert_eq!(hash_tag(b"{open"), b"{open");
    }
}
