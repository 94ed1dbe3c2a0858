// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

// RevertProbe: a target for gas-estimate tests (VM06). One call that succeeds and changes
// state, and three ways to revert: with a reason string, with no data at all, and with a
// custom error. Deployed normally (chain.mjs deploy RevertProbe).
contract RevertProbe {
    uint256 public counter;

    error ProbeRefused(uint256 code);

    function bump() external payable {
        counter += 1;
    }

    function failWithReason() external pure {
        revert("RevertProbe: refused on purpose");
    }

    function failBare() external pure {
        revert();
    }

    function failCustom() external pure {
        revert ProbeRefused(42);
    }
}
