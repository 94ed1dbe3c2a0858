// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

import "./EIP3009Token.sol";

// TestERC20: an ordinary, normally deployed ERC-20 (+ EIP-2612 / EIP-3009 from the shared base)
// whose name, symbol, decimals and EIP-712 version are chosen in the constructor.
// For tests that need "some other token" (inventory, allowances, non-default x402 assets).
contract TestERC20 is EIP3009Token {
    string private _name;
    string private _symbol;
    string private _version;
    uint8 private _decimals;

    constructor(string memory name_, string memory symbol_, uint8 decimals_, string memory version_) {
        _name = name_;
        _symbol = symbol_;
        _decimals = decimals_;
        _version = version_;
    }

    function name() public view override returns (string memory) {
        return _name;
    }

    function symbol() public view override returns (string memory) {
        return _symbol;
    }

    function decimals() public view override returns (uint8) {
        return _decimals;
    }

    function version() public view override returns (string memory) {
        return _version;
    }
}
