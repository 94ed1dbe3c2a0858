//! The EVM chains the on-chain machines observe, and how each is labelled in responses.
//!
//! Provider-specific identifiers (DexScreener chain ids, contract addresses) are not here:
//! they are facts of the providers and live in machines.yaml.

use crate::net::gateway::Upstream;

/// One observed chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Chain {
    /// CAIP-2 identifier, e.g. `eip155:8453`.
    pub caip2: &'static str,
    pub chain_id: u64,
    /// Human name shown in responses.
    pub name: &'static str,
    /// Short lowercase label used in provider names and evidence ids (`base-rpc`,
    /// `src-base-native`).
    pub slug: &'static str,
    /// The metrics label of the chain's JSON-RPC endpoint.
    pub rpc: Upstream,
    /// The metrics label of the chain's token-inventory provider.
    pub inventory: Upstream,
}

pub(crate) const ETHEREUM: Chain = Chain {
    caip2: "eip155:1",
    chain_id: 1,
    name: "Ethereum",
    slug: "ethereum",
    rpc: Upstream::new("rpc_ethereum", "json_rpc"),
    inventory: Upstream::new("inventory_ethereum", "get_token_balances"),
};

pub(crate) const BASE: Chain = Chain {
    caip2: "eip155:8453",
    chain_id: 8453,
    name: "Base",
    slug: "base",
    rpc: Upstream::new("rpc_base", "json_rpc"),
    inventory: Upstream::new("inventory_base", "get_token_balances"),
};

pub(crate) const ALL: [Chain; 2] = [ETHEREUM, BASE];

pub(crate) fn by_caip2(caip2: &str) -> Option<Chain> {
    ALL.into_iter().find(|c| c.caip2 == caip2)
}

pub(crate) fn by_id(chain_id: u64) -> Option<Chain> {
    ALL.into_iter().find(|c| c.chain_id == chain_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_agree() {
        for chain in ALL {
            assert_eq!(by_caip2(chain.caip2), Some(chain));
            assert_eq!(by_id(chain.chain_id), Some(chain));
            assert_eq!(chain.caip2, format!("eip155:{}", chain.chain_id));
        }
        assert_eq!(by_caip2("eip155:10"), None);
    }
}
