//! A read that proves its endpoint's chain. An endpoint whose `eth_chainId` has not been
//! answered (start-up's check, and a read's own, met a 429 or a timeout) is read with
//! `eth_chainId` in the same JSON-RPC batch: its answer names its chain in the same round
//! trip, so a URL of another chain never answers a read unnoticed, and a lone endpoint whose
//! check met one 429 still serves reads. A provider that answers the batch without the chain
//! id (or refuses batches) has not proven its chain: the read fails over.

use alloy::rpc::json_rpc::{Id, Request, RequestPacket, ResponsePacket};

/// The id of the added `eth_chainId` request (a read's own ids are numbers).
const CHAIN_ID_REQUEST: &str = "chain-proof";

/// `packet` as a batch with an `eth_chainId` request added.
pub(crate) fn with_chain_id(packet: &RequestPacket) -> serde_json::Result<RequestPacket> {
    let id = Id::String(CHAIN_ID_REQUEST.into());
    let chain_id = Request::new("eth_chainId", id, ()).serialize()?;
    let mut requests = packet.requests().to_vec();
    requests.push(chain_id);
    Ok(RequestPacket::Batch(requests))
}

/// The answer to a batch made by [`with_chain_id`], split: the chain id it names, if it
/// answered one, and the read's own answer in the shape `sent` had (one response for a single
/// request); None when a response of the read is missing.
pub(crate) fn split(
    answer: ResponsePacket,
    sent: &RequestPacket,
) -> (Option<u64>, Option<ResponsePacket>) {
    let ResponsePacket::Batch(responses) = answer else {
        return (None, None);
    };
    let check = Id::String(CHAIN_ID_REQUEST.into());
    let (checks, reads): (Vec<_>, Vec<_>) = responses.into_iter().partition(|r| r.id == check);
    let chain_id = checks.first().and_then(|response| {
        let hex: String = serde_json::from_str(response.payload.as_success()?.get()).ok()?;
        u64::from_str_radix(hex.trim_start_matches("0x"), 16).ok()
    });
    let every_read_answered = sent
        .requests()
        .iter()
        .all(|request| reads.iter().any(|r| &r.id == request.id()));
    let read = match sent {
        _ if !every_read_answered => None,
        RequestPacket::Single(request) => reads
            .into_iter()
            .find(|r| &r.id == request.id())
            .map(ResponsePacket::Single),
        RequestPacket::Batch(_) => Some(ResponsePacket::Batch(reads)),
    };
    (chain_id, read)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_number(id: u64) -> RequestPacket {
        let request = Request::new("eth_blockNumber", Id::Number(id), ());
        RequestPacket::Single(request.serialize().expect("serializes"))
    }

    fn answer(json: &str) -> ResponsePacket {
        serde_json::from_str(json).expect("a response packet")
    }

    #[test]
    fn a_read_and_its_chain_id_travel_together_and_come_apart() {
        let sent = block_number(7);
        let batch = with_chain_id(&sent).expect("batch");
        let body = serde_json::to_value(&batch).expect("json");
        assert_eq!(body[0]["method"], "eth_blockNumber");
        assert_eq!(body[1]["method"], "eth_chainId");
        assert_eq!(body[1]["id"], CHAIN_ID_REQUEST);

        // Answers may come in any order.
        let both = answer(
            r#"[{"jsonrpc":"2.0","id":"chain-proof","result":"0x2105"},
                {"jsonrpc":"2.0","id":7,"result":"0x2a"}]"#,
        );
        let (chain_id, read) = split(both, &sent);
        assert_eq!(chain_id, Some(8453));
        let Some(ResponsePacket::Single(read)) = read else {
            panic!("the read's answer, single as sent");
        };
        assert_eq!(read.id, Id::Number(7));

        let stray = answer(
            r#"[{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request"}},
                {"jsonrpc":"2.0","id":7,"result":"0x2a"},
                {"jsonrpc":"2.0","id":"chain-proof","result":"0x2105"}]"#,
        );
        let Some(ResponsePacket::Single(read)) = split(stray, &sent).1 else {
            panic!("the read's own answer");
        };
        assert_eq!(read.id, Id::Number(7), "matched by id, not by position");

        let limited = answer(
            r#"[{"jsonrpc":"2.0","id":7,"result":"0x2a"},
                {"jsonrpc":"2.0","id":"chain-proof","error":{"code":429,"message":"rate limited"}}]"#,
        );
        assert_eq!(split(limited, &sent).0, None, "no chain named");
        let alone = answer(r#"{"jsonrpc":"2.0","id":7,"result":"0x2a"}"#);
        assert!(
            matches!(split(alone, &sent), (None, None)),
            "not an answer to the batch"
        );
        let read_lost = answer(r#"[{"jsonrpc":"2.0","id":"chain-proof","result":"0x1"}]"#);
        assert!(matches!(split(read_lost, &sent), (Some(1), None)));
    }
}
