// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

// AuthorizationBatch: executes two EIP-3009 authorizations of one token in ONE transaction, in
// order (first, then second), through transferWithAuthorization(..., bytes signature). Both run
// or the transaction reverts. The payment tests use it to burn one payment's nonce with a value-0
// self-transfer and execute another payment's authorization in the same transaction, so the
// receipt holds two AuthorizationUsed/Transfer pairs. Deployed normally
// (chain.mjs batch-authorizations deploys it on first use).
interface IEIP3009 {
    function transferWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) external;
}

contract AuthorizationBatch {
    struct Authorization {
        address from;
        address to;
        uint256 value;
        uint256 validAfter;
        uint256 validBefore;
        bytes32 nonce;
        bytes signature;
    }

    function executeTwo(address token, Authorization calldata first, Authorization calldata second) external {
        _execute(token, first);
        _execute(token, second);
    }

    function _execute(address token, Authorization calldata a) private {
        IEIP3009(token).transferWithAuthorization(
            a.from, a.to, a.value, a.validAfter, a.validBefore, a.nonce, a.signature
        );
    }
}
