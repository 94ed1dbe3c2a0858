//! VM10 payment authority snapshot. A baseline must be ours and intact
//! (baseline_sha256 = canonical sha256 of the baseline without that field). One unpaid
//! probe, the shared requirement selection (eip3009 or permit2), and same-block balance and
//! canonical Permit2 allowance reads. States and classifications: docs/vm10-payment-authority.md.

use alloy::primitives::{Address, U256, address};
use serde::Deserialize;
use serde_json::{Value, json};

use super::probe_reads::{self, ProbeRequest};
use super::{Call, CheckFailure, Need, WorkError};
use crate::catalog::manifest::Machine;
use crate::chain::token_reads::TokenReads;
use crate::machines::checks as rc;
use crate::support::canonical::canonical_sha256;
use crate::support::evm;
use crate::web::x402_probe::{self, Probe, Requirement, Selection};

/// Uniswap Permit2, the canonical token spender of the permit2 transfer method.
pub(crate) const PERMIT2: Address = address!("0x000000000022D473030F116dDEE9F6B43aC78BA3");
/// x402ExactPermit2Proxy, the contract the payer's Permit2 signature names as spender.
pub(crate) const X402_PERMIT2_PROXY: Address =
    address!("0x402085c248EeA27D92E8b30b2C58ed07f9E20001");

/// VM10 payment authority snapshot.
pub(crate) struct Vm10;

/// A VM10 request.
#[derive(Debug, Deserialize)]
pub(crate) struct Request {
    /// What to probe.
    #[serde(flatten)]
    pub probe: ProbeRequest,
    /// The payer whose balance and allowance are read.
    pub payer_address: String,
    /// The baseline of an earlier response, kept as sent: its seal covers its exact JSON.
    pub baseline: Option<Value>,
}

impl super::Machine for Vm10 {
    const ID: &'static str = "VM10";
    type Request = Request;
    type Answer = Value;
    const NEEDS: &'static [Need] = &[Need::Probe, Need::Rpc("eip155:8453")];

    fn check(machine: &Machine, request: &Request) -> Result<(), CheckFailure> {
        request.probe.check()?;
        rc::address(&request.payer_address, "/payer_address")?;
        if let Some(baseline) = &request.baseline {
            rc::baseline_methodology(baseline, &machine.methodology_version)?;
            rc::self_sealed(baseline, "baseline_sha256")?;
        }
        Ok(())
    }

    async fn observe(call: Call<'_, Request>) -> Result<Value, WorkError> {
        let (context, machine, request) = call.parts();
        let (probe, selection) =
            probe_reads::probe_and_select(context, machine, &request.probe).await?;
        let requirement = selection.requirement();
        let permit2_spender =
            |r: &Requirement| (r.asset_transfer_method() == "permit2").then_some(PERMIT2);
        let reads = probe_reads::read_payer(
            context,
            machine,
            &request.payer_address,
            requirement,
            permit2_spender,
        )
        .await?;
        Ok(response(
            machine,
            request,
            &probe,
            &selection,
            reads.as_ref(),
            &super::vm01::now(),
        ))
    }
}

fn payer_text(request: &Request) -> &str {
    &request.payer_address
}

/// State, authority path and recovery path (docs/vm10-payment-authority.md).
pub(crate) fn classify(
    selection: &Selection,
    reads: Option<&TokenReads>,
) -> (&'static str, &'static str, &'static str) {
    let requirement = match selection {
        Selection::Selected(r) => r,
        Selection::UnsupportedMethod(_) => {
            return ("UNSUPPORTED_METHOD", "none", "unsupported_method");
        }
        _ => return ("HOLD", "none", "unknown"),
    };
    let permit2 = requirement.asset_transfer_method() == "permit2";
    let path = if permit2 {
        "permit2_allowance"
    } else {
        "eip3009_authorization"
    };
    let amount = requirement
        .amount
        .as_deref()
        .and_then(|a| evm::parse_uint256(a).ok());
    let (Some(amount), Some(balance)) = (amount, reads.and_then(|r| r.balance)) else {
        return ("HOLD", path, "unknown");
    };
    if balance < amount {
        return ("INSUFFICIENT_BALANCE", path, "balance_top_up");
    }
    if permit2 {
        match reads.and_then(|r| r.allowance) {
            None => return ("HOLD", path, "unknown"),
            Some(allowance) if allowance < amount => {
                return ("ALLOWANCE_REQUIRED", path, "canonical_spender_allowance");
            }
            Some(_) => {}
        }
    }
    ("READY_EXISTING", path, "none_required")
}

fn string(v: Option<U256>) -> Value {
    v.map_or(Value::Null, |v| Value::String(v.to_string()))
}

fn block(v: Option<u64>) -> Value {
    v.map_or(Value::Null, |v| Value::String(v.to_string()))
}

/// The VM10 snapshot.
pub(crate) fn response(
    machine: &Machine,
    request: &Request,
    probe: &Probe,
    selection: &Selection,
    reads: Option<&TokenReads>,
    observed_at: &str,
) -> Value {
    let selected = selection.requirement();
    let (state, authority_path, recovery_path) = classify(selection, reads);
    let permit2 = authority_path == "permit2_allowance";
    let evidence_block = reads.and_then(|r| r.block);
    let allowance = permit2.then(|| {
        json!({
            "owner": payer_text(request),
            "spender": PERMIT2.to_checksum(None),
            "allowance_raw": string(reads.and_then(|r| r.allowance)),
            "block_number": block(evidence_block),
        })
    });
    let selected_json = selected.map(x402_probe::requirement_json);
    let current_baseline = json!({
        "methodology_version": machine.methodology_version,
        "resource_url": probe.target.url.as_str(),
        "method": probe.target.method,
        "body_sha256": probe.target.body_sha256(),
        "payer_address": payer_text(request),
        "selected_requirement": selected_json,
        "balance_raw": string(reads.and_then(|r| r.balance)),
        "allowance_raw": if permit2 { string(reads.and_then(|r| r.allowance)) } else { Value::Null },
        "authority_path": authority_path,
        "recovery_path": recovery_path,
        "evidence_block_number": block(evidence_block),
    });
    let baseline_changes = request
        .baseline
        .as_ref()
        .map(|prior| baseline_changes(prior, &current_baseline));
    // HOLD evidence never replaces the caller's baseline; without one there is none to give.
    let baseline = if state == "HOLD" {
        request.baseline.clone().unwrap_or(Value::Null)
    } else {
        seal(current_baseline)
    };
    let limitations = limitations(machine, probe, selection, reads);
    let status = if state == "HOLD" { "HOLD" } else { "OK" };
    let mut snapshot = json!({
        "status": status,
        "machine": machine.machine,
        "methodology_version": machine.methodology_version,
        "state": state,
        "signing": false,
        "payment_execution": false,
        "transaction_construction": false,
        "approval_mutation": false,
        "custody": false,
        "recommendation": false,
        "gas_sufficiency_judgment": false,
        "selected_requirement": selected_json,
        "balance": {"balance_raw": string(reads.and_then(|r| r.balance)), "block_number": block(evidence_block)},
        "allowance": allowance,
        "authority_path": authority_path,
        "recovery_path": recovery_path,
        "identities": {
            "payer": payer_text(request),
            "merchant": selected.and_then(|r| r.pay_to.clone()),
            "canonical_spender": permit2.then(|| PERMIT2.to_checksum(None)),
            "signed_proxy": permit2.then(|| X402_PERMIT2_PROXY.to_checksum(None)),
            "facilitator": null,
        },
        "baseline_changes": baseline_changes,
        "observed_at": observed_at,
        "evidence_block_number": block(evidence_block),
        "baseline": baseline,
        "limitations": limitations,
    });
    // snapshot_sha256 seals the whole snapshot except itself.
    let sha = canonical_sha256(&snapshot);
    if let Some(object) = snapshot.as_object_mut() {
        object.insert("snapshot_sha256".into(), Value::String(sha));
    }
    snapshot
}

/// The fields of the caller's baseline that differ from this observation's.
fn baseline_changes(prior: &Value, current: &Value) -> Vec<Value> {
    const COMPARED: [&str; 9] = [
        "resource_url",
        "method",
        "body_sha256",
        "payer_address",
        "selected_requirement",
        "balance_raw",
        "allowance_raw",
        "authority_path",
        "recovery_path",
    ];
    COMPARED
        .iter()
        .filter(|k| !same(prior.get(**k), current.get(**k)))
        .map(|k| json!(k))
        .collect()
}

/// What the snapshot does not say: READY_EXISTING is no authorization, the probe's own
/// limitation, an unclassified transfer method, and the token reads'.
fn limitations(
    machine: &Machine,
    probe: &Probe,
    selection: &Selection,
    reads: Option<&TokenReads>,
) -> Vec<String> {
    let first = "READY_EXISTING is not authorization to pay; native gas is not judged.";
    probe_reads::limitations(first, probe, selection, reads, |r| {
        let classified = x402_probe::allowlist_text(machine, "asset_transfer_methods", "and");
        format!(
            "The requirement uses asset transfer method {}; only {classified} authority paths are classified.",
            r.asset_transfer_method()
        )
    })
}

/// Equal values, addresses and other strings compared case-insensitively where both are
/// 0x-addresses.
fn same(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a, b) {
        (Some(Value::String(a)), Some(Value::String(b)))
            if a.starts_with("0x") && b.starts_with("0x") =>
        {
            a.eq_ignore_ascii_case(b)
        }
        (a, b) => a.unwrap_or(&Value::Null) == b.unwrap_or(&Value::Null),
    }
}

/// Adds baseline_sha256 = canonical sha256 of the baseline without that field.
fn seal(mut baseline: Value) -> Value {
    let sha = canonical_sha256(&baseline);
    if let Some(object) = baseline.as_object_mut() {
        object.insert("baseline_sha256".into(), Value::String(sha));
    }
    baseline
}
