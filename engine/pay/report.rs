//! `factomat ledger report`: unique paying wallets per family; calls, USDC and answers
//! collected again per machine.
//!
//! Only settled attempts count as paid. A wallet that buys several machines of one family
//! counts once for that family; family counts are never summed into a portfolio-wide count.

use std::collections::{BTreeMap, BTreeSet};

use alloy_primitives::U256;
use serde_json::{Value, json};

use crate::catalog::manifest::Manifest;
use crate::pay::ledger::AttemptRow;
use crate::support::units::format_units;

/// The report as JSON.
pub fn build(manifest: &Manifest, rows: &[AttemptRow]) -> Value {
    let settled: Vec<&AttemptRow> = rows.iter().filter(|r| r.state == "settled").collect();
    let families: Vec<Value> = manifest
        .families
        .iter()
        .map(|family| {
            let wallets: BTreeSet<String> = settled
                .iter()
                .filter(|r| family.machines.contains(&r.machine))
                .map(|r| r.payer.to_ascii_lowercase())
                .collect();
            json!({"family": family.family, "unique_paying_wallets": wallets.len()})
        })
        .collect();
    let mut states: BTreeMap<&str, BTreeMap<&str, u64>> = BTreeMap::new();
    for row in rows {
        *states
            .entry(&row.machine)
            .or_default()
            .entry(&row.state)
            .or_default() += 1;
    }
    let decimals = manifest.payment.decimals;
    let machines: Vec<Value> = manifest
        .machines
        .iter()
        .map(|m| {
            let paid: Vec<&&AttemptRow> =
                settled.iter().filter(|r| r.machine == m.machine).collect();
            let atomic = paid
                .iter()
                .filter_map(|r| U256::from_str_radix(&r.amount_atomic, 10).ok())
                .fold(U256::ZERO, |sum, v| sum.saturating_add(v));
            let collected_again: i64 = paid.iter().map(|r| r.collected_again).sum();
            json!({
                "machine": m.machine,
                "family": m.family,
                "paid_calls": paid.len(),
                "usdc_atomic": atomic.to_string(),
                "usdc": format_units(atomic, decimals),
                "collected_again": collected_again,
                "attempts_by_state": states.get(m.machine.as_str()).cloned().unwrap_or_default(),
            })
        })
        .collect();
    json!({
        "families": families,
        "machines": machines,
        "note": manifest.service.family_wallet_note,
    })
}

/// The report as a text table.
pub fn render_text(report: &Value) -> String {
    let mut out = String::from("unique paying wallets per family (never summed across families)\n");
    for family in report["families"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "  {:<20} {}\n",
            family["family"].as_str().unwrap_or_default(),
            family["unique_paying_wallets"]
        ));
    }
    out.push_str("\nmachine  family               paid calls  collected again  USDC\n");
    for m in report["machines"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "  {:<6} {:<20} {:>10}  {:>15}  {}\n",
            m["machine"].as_str().unwrap_or_default(),
            m["family"].as_str().unwrap_or_default(),
            m["paid_calls"],
            m["collected_again"],
            m["usdc"].as_str().unwrap_or_default()
        ));
    }
    out
}
