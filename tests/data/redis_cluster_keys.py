# Independent reference for the cluster key layout (DESIGN §4.5, src/redis/layout.rs docs):
# regenerates tests/data/redis_cluster_keys.json (`python3 tests/data/redis_cluster_keys.py > tests/data/redis_cluster_keys.json`).
import hashlib, base64, json, unicodedata

def crc16(data: bytes) -> int:
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
            crc &= 0xFFFF
    return crc

def slot(key: str) -> int:
    k = key.encode()
    s = k.find(b'{')
    if s != -1:
        e = k.find(b'}', s + 1)
        if e != -1 and e != s + 1:
            k = k[s + 1:e]
    return crc16(k) % 16384

def h(prefixed: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(prefixed.encode()).digest()[:16]).decode().rstrip('=')

LIMIT, RESERVE = 1000, 26
def tag(prefix, key):
    key = unicodedata.normalize('NFC', key)
    prefixed = f"{prefix}:{key}"
    if len(prefixed.encode()) + RESERVE <= LIMIT and '{' not in key and '}' not in key:
        return key
    return h(prefixed)

def norm_prefix(p):
    return p[:-1] if p.endswith(':') else p

locks = []
cases = [
    ("syncguard", "job"), ("syncguard", "resource:123"), ("syncguard", "payment:42"),
    ("myapp", "job"), ("myapp:", "job"), ("syncguard", "été"), ("syncguard", "e\u0301te\u0301"),
    ("syncguard", "日本語のキー"), ("syncguard", "emoji 🔒 key"), ("syncguard", "with space"),
    ("syncguard", "a{b}c"), ("syncguard", "{user1000}"), ("syncguard", "}leading"), ("syncguard", "{}"),
    ("syncguard", "trailing{"), ("syncguard", "fence:syncguard:job"), ("syncguard", "id:AAAAAAAAAAAAAAAAAAAAAA"),
    ("syncguard", "nul\u0000inside"), ("syncguard", "k" * 512), ("p" * 900, "z" * 73), ("p" * 900, "z" * 74),
    ("p" * 900, "short"), ("p" * 900, "y" * 80), ("a:b", "nested:prefix"),
]
for prefix, key in cases:
    p = norm_prefix(prefix)
    t = tag(p, key)
    lock_key = f"{p}:{{{t}}}"
    fence_key = f"{p}:fence:{{{t}}}"
    assert slot(lock_key) == slot(fence_key) == crc16(t.encode()) % 16384
    locks.append({"prefix": prefix, "key": key, "lock_key": lock_key, "fence_key": fence_key, "slot": slot(lock_key)})

ids = []
for prefix, lid in [("syncguard", "AAAAAAAAAAAAAAAAAAAAAA"), ("syncguard", "abcdefghijklmnopqrstuv"),
                    ("myapp", "0123456789-_ABCDEFGHIJ"), ("syncguard", "zzzzzzzzzzzzzzzzzzzzzz"),
                    ("p" * 900, "Q2hlY2tzVGhlU2xvdE1hcA")]:
    p = norm_prefix(prefix)
    ik = f"{p}:id:{{{lid}}}"
    ids.append({"prefix": prefix, "lock_id": lid, "index_key": ik, "slot": slot(ik)})

errors = [
    {"prefix": "a{b", "key": "job", "error": "InvalidArgument"},
    {"prefix": "a}b", "key": "job", "error": "InvalidArgument"},
    {"prefix": "syncguard", "key": "", "error": "InvalidArgument"},
    {"prefix": "syncguard", "key": "k" * 513, "error": "InvalidArgument"},
    {"prefix": "app:fence", "key": "job", "error": "InvalidArgument"},
    {"prefix": "", "key": "job", "error": "InvalidArgument"},
]
out = {
 "about": "Expected keys of the Redis cluster layout (KeyLayout::Cluster, DESIGN §4.5), computed by an independent Python implementation: lock_key = P:{T}, fence_key = P:fence:{T}, index_key = P:id:{lockId}, where P is the prefix without trailing ':' and T is the NFC key when P:K stays unhashed under make_storage_key(P, K, 1000, 26) and K has no '{' or '}', else base64url(sha256(P:K)[0..16]) without padding. 'slot' is the Redis Cluster hash slot (CRC16-XMODEM of the hash tag mod 16384) of every key of the entry: for 'locks' the record's and the counter's, for 'lock_ids' the index entry's, which is the lock id's own slot (lock ids are plain 16-byte CSPRNG ids, 128 bits, chosen by nobody, so an index entry generally lies in another slot than its lock); the tests also ask a real Cluster (CLUSTER KEYSLOT). 'errors' are inputs the layout refuses, with the error code.",
 "locks": locks, "lock_ids": ids, "errors": errors,
}
print(json.dumps(out, indent=1, ensure_ascii=False))
