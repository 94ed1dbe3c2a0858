// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

// Aave v3 stand-ins for VM04 tests, with the real ABI of the two calls factomat makes.
// MockPoolAddressesProvider is placed with anvil_setCode at the real PoolAddressesProvider
// address of the chain, so it keeps no constructor state: setPool() is called afterwards.
// MockAavePool is deployed normally; setReserve() chooses the ray rates a reserve reports.

contract MockPoolAddressesProvider {
    address private _pool;

    function setPool(address pool) external {
        _pool = pool;
    }

    function getPool() external view returns (address) {
        return _pool;
    }
}

contract MockAavePool {
    struct ReserveConfigurationMap {
        uint256 data;
    }

    // Field order and types of Aave v3's ReserveDataLegacy (IPool.getReserveData).
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

    mapping(address => ReserveDataLegacy) private _reserves;

    function setReserve(address asset, uint128 liquidityRate, uint128 variableBorrowRate, address aToken) external {
        ReserveDataLegacy storage r = _reserves[asset];
        r.liquidityIndex = 1e27;
        r.variableBorrowIndex = 1e27;
        r.currentLiquidityRate = liquidityRate;
        r.currentVariableBorrowRate = variableBorrowRate;
        r.lastUpdateTimestamp = uint40(block.timestamp);
        r.aTokenAddress = aToken;
    }

    function getReserveData(address asset) external view returns (ReserveDataLegacy memory) {
        return _reserves[asset];
    }
}
