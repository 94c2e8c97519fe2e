//! Redis Cluster hash slots, and lock ids whose index entry lands in a chosen slot.
//!
//! A Cluster stores a key on the node that serves its *hash slot*: CRC16 (XMODEM) of the key,
//! or of its *hash tag* — the text between the first `{` and the first `}` after it, when that
//! text is not empty — modulo 16384. A script may only touch keys of one slot.
//!
//! The cluster layout ([`KeyLayout::Cluster`](super::KeyLayout::Cluster)) needs a lock id to
//! lead to its lock's slot by itself (`release --lock-id` knows nothing else), so the lock id
//! is made to hash to that slot: its first 19 characters come from the CSPRNG (114 random
//! bits), the last three are chosen among the many that complete the CRC to the wanted slot.
//! CRC16 is linear over GF(2), so the choice is a few hundred table lookups, not a search over
//! random ids.

use std::sync::LazyLock;

use crate::driver::{LockId, generate_lock_id};

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

/// The characters of a lock id, in base64url order.
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// The last character's contribution to the CRC (`TABLE[c]`, low 14 bits) → that character,
/// sorted for binary search.
static LAST_CHARACTER: LazyLock<Vec<(u16, u8)>> = LazyLock::new(|| {
    let mut entries: Vec<(u16, u8)> = ALPHABET
        .iter()
        .map(|&c| (crc16_update(0, &[0, 0, c]) & (SLOT_COUNT - 1), c))
        .collect();
    entries.sort_unstable();
    entries
});

fn alphabet_index(c: u8) -> usize {
    ALPHABET.iter().position(|&a| a == c).unwrap_or(0)
}

/// A fresh lock id whose own hash slot is `slot`: so that `prefix:id:{lockId}` is stored in
/// the same slot as the lock it indexes.
pub(crate) fn lock_id_in_slot(slot: u16) -> LockId {
    let slot = slot & (SLOT_COUNT - 1);
    for _ in 0..4 {
        let random = generate_lock_id();
        let bytes = random.as_bytes();
        let head = &bytes[..19];
        // CRC(head ‖ a b c) = CRC(head ‖ 0 0 0) ^ CRC(a 0 0) ^ CRC(0 b 0) ^ CRC(0 0 c).
        let base = crc16_update(crc16_update(0, head), &[0, 0, 0]);
        // Where to start among the 4096 pairs (a, b): from the random characters 19 and 20.
        let start = (alphabet_index(bytes[19]) << 6) | alphabet_index(bytes[20]);
        for step in 0..4096 {
            let pair = (start + step) % 4096;
            let (a, b) = (ALPHABET[pair >> 6], ALPHABET[pair & 63]);
            let wanted = (slot ^ base ^ crc16_update(0, &[a, 0, 0]) ^ crc16_update(0, &[0, b, 0]))
                & (SLOT_COUNT - 1);
            let table = &*LAST_CHARACTER;
            let Ok(found) = table.binary_search_by_key(&wanted, |&(low, _)| low) else {
                continue;
            };
            let c = table[found].1;
            let mut id = head.to_vec();
            id.extend_from_slice(&[a, b, c]);
            let id = String::from_utf8(id).unwrap_or_default();
            if key_slot(id.as_bytes()) == slot
                && let Ok(id) = LockId::new(&id)
            {
                return id;
            }
        }
        // No pair completes this head (about one head in ten million): draw another.
    }
    // Never reached in practice; plain rejection sampling (about 16384 draws) always ends.
    loop {
        let id = LockId::generate();
        if key_slot(id.as_str().as_bytes()) == slot {
            return id;
        }
    }
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

    #[test]
    fn lock_ids_land_in_the_slot_asked_for() {
        for slot in [0, 1, 5061, 12182, 16383] {
            for _ in 0..20 {
                let id = lock_id_in_slot(slot);
                assert_eq!(key_slot(id.as_str().as_bytes()), slot);
                assert_eq!(
                    key_slot(format!("p:id:{{{}}}", id.as_str()).as_bytes()),
                    slot
                );
            }
        }
    }

    #[test]
    fn lock_ids_in_one_slot_differ() {
        let ids: std::collections::HashSet<String> = (0..200)
            .map(|_| lock_id_in_slot(42).into_string())
            .collect();
        assert_eq!(ids.len(), 200);
    }
}
