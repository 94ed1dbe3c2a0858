// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

import "./EIP3009Token.sol";

// LocalUSDC: a USDC-compatible (FiatToken v2.2 surface subset) EIP-3009 token for factomat's
// offline dev stack. It is placed at Base USDC's address 0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913
// on an anvil with chain id 8453 via anvil_setCode, so the official x402 clients treat it as
// the default asset (EIP-712 domain: name "USD Coin", version "2").
// All metadata are compile-time constants: anvil_setCode never runs a constructor.
contract LocalUSDC is EIP3009Token {
    string internal constant NAME = "USD Coin";
    string internal constant SYMBOL = "USDC";
    string internal constant VERSION = "2";
    uint8 internal constant DECIMALS = 6;

    function name() public pure override returns (string memory) {
        return NAME;
    }

    function symbol() public pure override returns (string memory) {
        return SYMBOL;
    }

    function decimals() public pure override returns (uint8) {
        return DECIMALS;
    }

    function version() public pure override returns (string memory) {
        return VERSION;
    }
}
