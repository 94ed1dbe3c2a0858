//! Request ids: every response carries `x-request-id`, every log line of the request carries
//! it (the request line as a field, a paid call's lines through the span the call runs in)
//! and a paid call's ledger row keeps it.
//!
//! A caller's id is kept when it is well formed (so a buyer's or a proxy's id follows the
//! request); anything else is replaced by a fresh one rather than echoed, so a log line
//! never carries a caller's arbitrary bytes.

use std::cell::RefCell;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue};

/// The header that carries the id, both ways (a `HeaderName` built at compile time: parsing
/// the name on every request showed in the per-request instruction count).
pub(crate) const HEADER: HeaderName = HeaderName::from_static("x-request-id");
/// The longest caller id kept.
const MAX_LEN: usize = 128;

/// A request's id: the header value sent back, readable as text for log lines and the ledger.
pub(crate) struct RequestId(HeaderValue);

impl RequestId {
    /// The id as text. Both sources are ASCII (a checked caller id or lowercase hex), so the
    /// UTF-8 check is the standard library's word-at-a-time ASCII path, not the byte loop of
    /// `HeaderValue::to_str`.
    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(self.0.as_bytes()).unwrap_or_default()
    }

    /// The header value, for the response.
    pub(crate) fn into_header(self) -> HeaderValue {
        self.0
    }
}

/// Gives an empty map the request id's slot first, for [`write`] to fill.
pub(crate) fn hold_slot(headers: &mut HeaderMap) {
    headers.insert(HEADER, HeaderValue::from_static(""));
}

/// Writes a response's request id. The prepared header maps every answer clones hold its slot
/// first ([`hold_slot`]): filling it skips hashing the name, which cost more than the rest.
pub(crate) fn write(headers: &mut HeaderMap, id: HeaderValue) {
    if let Some((name, slot)) = headers.iter_mut().next()
        && *name == HEADER
    {
        *slot = id;
        return;
    }
    headers.insert(HEADER, id);
}

/// The request's id: the caller's well-formed `x-request-id`, or a fresh one.
pub(crate) fn for_request(headers: &HeaderMap) -> RequestId {
    let kept = headers
        .get(&HEADER)
        .filter(|value| well_formed(value.as_bytes()))
        .cloned();
    RequestId(kept.unwrap_or_else(fresh))
}

/// 1–128 characters of letters, digits and `-_.:` — enough for UUIDs, trace ids and the
/// common proxy formats, nothing that needs escaping in a log line.
fn well_formed(bytes: &[u8]) -> bool {
    !bytes.is_empty()
        && bytes.len() <= MAX_LEN
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

/// What makes this process's ids differ from every other process's: 128 bits from the OS,
/// read once. The OS source only fails on a broken system; ids then still differ within the
/// process.
static PROCESS_KEY: LazyLock<[u64; 2]> = LazyLock::new(|| {
    let mut bytes = [0u8; 16];
    let _ = getrandom::fill(&mut bytes);
    let (high, low) = bytes.split_at(8);
    let word = |half: &[u8]| u64::from_le_bytes(half.try_into().unwrap_or_default());
    [word(high), word(low)]
});

/// Fresh ids numbered in this process (a batch takes `BATCH` numbers at once).
static SEQUENCE: AtomicU64 = AtomicU64::new(0);
/// Ids cut at once per runtime thread.
const BATCH: u64 = 64;
/// Hex characters in an id.
const ID_LEN: usize = 32;

thread_local! {
    /// This thread's batch of fresh ids and how many of it are handed out.
    static BATCHED: RefCell<(Bytes, usize)> = const { RefCell::new((Bytes::new(), 0)) };
}

/// A fresh id: 32 lowercase hex characters, the process key's first half, then the
/// request's sequence number offset by the second half and scrambled by a bijection, so ids
/// never repeat within a process, differ between processes and replicas, and do not show
/// how many requests came in between two of a buyer's calls. An id is a handle for support,
/// not a secret: no syscall per request (the OS random source was the largest part of its
/// cost), and ids are cut 64 at a time from one buffer, each a shared slice of it, so a
/// request allocates nothing for its id.
fn fresh() -> HeaderValue {
    let id = BATCHED.with(|batched| {
        let mut batched = batched.borrow_mut();
        let (ids, used) = &mut *batched;
        if *used == ids.len() {
            *ids = batch();
            *used = 0;
        }
        let id = ids.slice(*used..*used + ID_LEN);
        *used += ID_LEN;
        id
    });
    HeaderValue::from_maybe_shared(id).unwrap_or(HeaderValue::from_static("0"))
}

/// The next `BATCH` ids of this process, back to back.
fn batch() -> Bytes {
    let [process, offset] = *PROCESS_KEY;
    let first = SEQUENCE.fetch_add(BATCH, Ordering::Relaxed);
    let mut ids = BytesMut::zeroed(ID_LEN * BATCH as usize);
    for (slot, sequence) in ids.chunks_exact_mut(ID_LEN).zip(first..) {
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&process.to_be_bytes());
        id[8..].copy_from_slice(&scramble(sequence.wrapping_add(offset)).to_be_bytes());
        // 16 bytes always fit the 32 hex characters of a slot.
        let _ = alloy::primitives::hex::encode_to_slice(id, slot);
    }
    ids.freeze()
}

/// SplitMix64's finalizer: a bijection on `u64` (xor-shifts and odd multipliers are each
/// invertible), so distinct sequence numbers give distinct ids.
fn scramble(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    fn with(value: &[u8]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(HEADER, HeaderValue::from_bytes(value).expect("header"));
        headers
    }

    #[test]
    fn a_well_formed_caller_id_is_kept_and_others_are_replaced() {
        let kept = for_request(&with(b"buyer-7f3a:01.retry_2"));
        assert_eq!(kept.as_str(), "buyer-7f3a:01.retry_2");
        for bad in [&b"has space"[..], b"quote\"", &[b'a'; 129], b"tab\there"] {
            let replaced = for_request(&with(bad));
            assert_ne!(replaced.as_str().as_bytes(), bad);
            assert_eq!(replaced.as_str().len(), 32);
        }
        let first = for_request(&HeaderMap::new());
        let second = for_request(&HeaderMap::new());
        assert!(first.as_str().bytes().all(|b| b.is_ascii_hexdigit()));
        let text = first.as_str().to_string();
        assert_eq!(first.into_header().to_str().expect("ascii"), text);
        assert_ne!(second.as_str(), for_request(&HeaderMap::new()).as_str());
    }

    #[test]
    fn fresh_ids_share_the_process_half_and_never_repeat() {
        let ids: Vec<String> = (0..10_000)
            .map(|_| for_request(&HeaderMap::new()).as_str().to_string())
            .collect();
        assert!(
            ids.iter()
                .all(|id| id.len() == 32 && id[..16] == ids[0][..16])
        );
        let distinct: HashSet<&str> = ids.iter().map(|id| &id[16..]).collect();
        assert_eq!(distinct.len(), ids.len(), "every id differs");
        // Consecutive requests are not consecutive numbers in the id.
        let suffix = |id: &str| u64::from_str_radix(&id[16..], 16).expect("hex");
        assert!(
            ids.windows(2)
                .any(|w| suffix(&w[1]).wrapping_sub(suffix(&w[0])) != 1)
        );
    }
}
