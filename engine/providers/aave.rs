//! Aave v3 reserve rates read on chain at one block: `eth_blockNumber`, then at that block
//! `PoolAddressesProvider.getPool()` and `Pool.getReserveData(asset)`.
//!
//! `currentLiquidityRate` (supply) and `currentVariableBorrowRate` are APRs in ray (1e27);
//! they are returned raw so the caller states them exactly.

use alloy::eips::BlockId;
use alloy::primitives::{Address, U256};
use alloy::providers::{Provider, RootProvider};
use alloy::sol;
use serde::{Deserialize, Serialize};

use crate::chain::rpc::{describe_contract_error, describe_error};

sol! {
    #[sol(rpc)]
    interface IPoolAddressesProvider {
        function getPool() external view returns (address);
    }

    #[sol(rpc)]
    interface IPool {
        struct ReserveConfigurationMap {
            uint256 data;
        }

        // Aave v3's ReserveDataLegacy, the return type of getReserveData in v3.0 to v3.3.
        struct ReserveDataLegacy {
            ReserveConfigurationMap configuration;
            uint128 liquidityIndex;
            uint128 currentLiquidityRate;
            uint128 variableBorrowIndex;
            uint128 currentVariableBorrowRate;
            uint128 currentStableBorrowRate;
            uint40 lastUpdateTimestamp;
            uint16 id;
            address aTokenAddress;
            address stableDebtTokenAddress;
            address variableDebtTokenAddress;
            address interestRateStrategyAddress;
            uint128 accruedToTreasury;
            uint128 unbacked;
            uint128 isolationModeTotalDebt;
        }

        function getReserveData(address asset) external view returns (ReserveDataLegacy memory);
    }
}

/// One reserve's rates at one block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ReserveObservation {
    pub block_number: u64,
    pub pool_addresses_provider: Address,
    pub pool: Address,
    pub a_token: Address,
    pub liquidity_rate_ray: U256,
    pub variable_borrow_rate_ray: U256,
    pub last_update_timestamp: u64,
    pub retrieved_at: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AaveError {
    #[error("the RPC endpoint could not be read ({0})")]
    Rpc(String),
    #[error("PoolAddressesProvider.getPool() could not be read at block {block} ({why})")]
    PoolUnreadable { block: u64, why: String },
    #[error("PoolAddressesProvider.getPool() returned the zero address at block {0}")]
    NoPool(u64),
    #[error("Pool.getReserveData could not be read at block {block} ({why})")]
    ReserveUnreadable { block: u64, why: String },
    #[error("the Pool lists no reserve for {asset} at block {block} (aTokenAddress is zero)")]
    NotListed { asset: Address, block: u64 },
}

impl AaveError {
    pub(crate) fn code(&self) -> &'static str {
        match self {
            AaveError::Rpc(_) | AaveError::ReserveUnreadable { .. } => "upstream_unavailable",
            AaveError::PoolUnreadable { .. } | AaveError::NoPool(_) => "pool_not_resolved",
            AaveError::NotListed { .. } => "reserve_not_listed",
        }
    }
}

/// Reads one reserve at the latest block, resolving the Pool through the provider at that
/// same block (3 RPC requests).
pub(crate) async fn read_reserve(
    rpc: &RootProvider,
    addresses_provider: Address,
    asset: Address,
) -> Result<ReserveObservation, AaveError> {
    let block = rpc
        .get_block_number()
        .await
        .map_err(|e| AaveError::Rpc(describe_error(&e)))?;
    let at = BlockId::number(block);
    let pool = IPoolAddressesProvider::new(addresses_provider, rpc)
        .getPool()
        .block(at)
        .call()
        .await
        .map_err(|e| AaveError::PoolUnreadable {
            block,
            why: describe_contract_error(&e),
        })?;
    if pool.is_zero() {
        return Err(AaveError::NoPool(block));
    }
    let reserve = IPool::new(pool, rpc)
        .getReserveData(asset)
        .block(at)
        .call()
        .await
        .map_err(|e| AaveError::ReserveUnreadable {
            block,
            why: describe_contract_error(&e),
        })?;
    if reserve.aTokenAddress.is_zero() {
        return Err(AaveError::NotListed { asset, block });
    }
    Ok(ReserveObservation {
        block_number: block,
        pool_addresses_provider: addresses_provider,
        pool,
        a_token: reserve.aTokenAddress,
        liquidity_rate_ray: U256::from(reserve.currentLiquidityRate),
        variable_borrow_rate_ray: U256::from(reserve.currentVariableBorrowRate),
        last_update_timestamp: reserve.lastUpdateTimestamp.to::<u64>(),
        retrieved_at: crate::support::timestamp::now_millis(),
    })
}
