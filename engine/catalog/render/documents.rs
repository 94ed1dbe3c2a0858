//! The JSON documents served free: catalog, orientation, discovery document, sample.

use serde_json::{Value, json};

use super::*;

fn catalog_machine(manifest: &Manifest, machine: &Machine) -> Value {
    let p = &manifest.payment;
    json!({
        "machine": machine.machine,
        "family": machine.family,
        "name": machine.name,
        "purpose": machine.purpose,
        "when_to_call": machine.when_to_call,
        "operationId": machine.operation_id,
        "method": machine.method,
        "path": machine.path,
        "resource": url(&machine.path),
        "request_content_type": "application/json",
        "input_schema": machine.input_schema,
        "input_example": machine.input_example,
        "unsupported": machine.unsupported,
        "allowlists": machine.allowlists,
        "price": machine.price,
        "price_atomic": machine.price_atomic,
        "payment": {
            "protocol": p.protocol,
            "x402Version": p.x402_version,
            "scheme": p.scheme,
            "network": p.network,
            "asset": p.asset,
            "asset_symbol": p.asset_symbol,
            "amount": machine.price_atomic,
            "max_timeout_seconds": p.max_timeout_seconds,
            "authority": "the 402 PAYMENT-REQUIRED challenge of this resource",
        },
        "output_schema_ref": url(&format!(
            "{OPENAPI_PATH}#/components/schemas/{}",
            response_schema_name(machine)
        )),
        "output_example": machine.output_example,
        "methodology_version": machine.methodology_version,
        "freshness": machine.freshness,
        "limits": machine.limits,
        "evidence": machine.evidence,
        "health": url(HEALTH_PATH),
        "docs": docs_url(machine),
        "storefront": url(&storefront_page(machine)),
        "related": related_entries(manifest, machine),
    })
}

/// The catalog of Part 2.1.
pub(crate) fn catalog(manifest: &Manifest) -> Value {
    let p = &manifest.payment;
    json!({
        "service": manifest.service.name,
        "catalog_version": manifest.service.catalog_version,
        "catalog": url(CATALOG_PATH),
        "payment": {
            "scheme": p.scheme,
            "network": p.network,
            "asset": p.asset,
            "asset_symbol": p.asset_symbol,
            "note": p.note,
        },
        "families": manifest.families,
        "family_wallet_note": manifest.service.family_wallet_note,
        "machines": manifest.machines.iter().map(|m| catalog_machine(manifest, m)).collect::<Vec<_>>(),
        "rediscovery": {
            "note": manifest.service.rediscovery_note,
            "catalog": url(CATALOG_PATH),
            "openapi": url(OPENAPI_PATH),
            "llms": url(LLMS_PATH),
            "well_known": url(WELL_KNOWN_PATH),
        },
        "openapi": url(OPENAPI_PATH),
        "documentation": url(LLMS_PATH),
        "health": url(HEALTH_PATH),
        "sample": url(SAMPLE_PATH),
        "sample_path": SAMPLE_PATH,
        "status": manifest.service.status,
        "llms": url(LLMS_PATH),
    })
}

/// The orientation object served at `/`.
pub(crate) fn orientation(manifest: &Manifest) -> Value {
    let machines: Vec<Value> = manifest
        .machines
        .iter()
        .map(|m| {
            json!({
                "machine": m.machine,
                "family": m.family,
                "name": m.name,
                "method": m.method,
                "resource": url(&m.path),
                "price": m.price,
                "docs": docs_url(m),
            })
        })
        .collect();
    json!({
        "service": manifest.service.name,
        "title": manifest.service.title,
        "description": manifest.service.description,
        "status": manifest.service.status,
        "catalog_version": manifest.service.catalog_version,
        "payment": {
            "protocol": manifest.payment.protocol,
            "x402Version": manifest.payment.x402_version,
            "scheme": manifest.payment.scheme,
            "network": manifest.payment.network,
            "asset": manifest.payment.asset,
            "asset_symbol": manifest.payment.asset_symbol,
        },
        "catalog": url(CATALOG_PATH),
        "openapi": url(OPENAPI_PATH),
        "llms": url(LLMS_PATH),
        "health": url(HEALTH_PATH),
        "well_known_x402": url(WELL_KNOWN_PATH),
        "sample": url(SAMPLE_PATH),
        "storefront": url(STOREFRONT_PREFIX),
        "machines": machines,
    })
}

/// The `/.well-known/x402` discovery document. Descriptive only: payTo and the binding
/// terms come from each resource's 402 challenge.
pub(crate) fn well_known(manifest: &Manifest) -> Value {
    let resources: Vec<String> = manifest.machines.iter().map(|m| url(&m.path)).collect();
    let items: Vec<Value> = manifest
        .machines
        .iter()
        .map(|m| {
            json!({
                "machine": m.machine,
                "resource": url(&m.path),
                "type": "http",
                "method": m.method,
                "operationId": m.operation_id,
                "description": m.purpose,
                "mimeType": "application/json",
                "price": m.price,
                "accepts": [requirement(manifest, m, None)],
                "docs": docs_url(m),
            })
        })
        .collect();
    json!({
        "version": 1,
        "x402Version": manifest.payment.x402_version,
        "service": manifest.service.name,
        "description": manifest.service.description,
        "resources": resources,
        "instructions": manifest.service.guidance,
        "items": items,
        "catalog": url(CATALOG_PATH),
        "openapi": url(OPENAPI_PATH),
        "llms": url(LLMS_PATH),
        "note": "Descriptive only. Each resource's unpaid 402 PAYMENT-REQUIRED challenge is the payment authority and names payTo.",
    })
}

/// The free VM04 sample when nothing was captured: the manifest's output example, labelled an
/// illustrative example (its values were never observed). A capture replaces it at start-up
/// (catalog::sample).
pub(crate) fn sample(manifest: &Manifest) -> Result<Value, RenderError> {
    let machine = manifest
        .machine(SAMPLE_MACHINE)
        .ok_or(RenderError::MissingMachine(SAMPLE_MACHINE))?;
    Ok(json!({
        "sample": true,
        "kind": "illustrative",
        "not_a_current_observation": true,
        "notice": "Illustrative example of the shape of a VM04 response (the manifest's output example): it was not captured and its block number, rates and times were never observed. Call the paid resource for current data.",
        "machine": machine.machine,
        "resource": url(&machine.path),
        "methodology_version": machine.methodology_version,
        "response": machine.output_example,
    }))
}

#[cfg(test)]
mod tests {
    use super::super::test_manifest;
    use super::*;

    #[test]
    fn catalog_lists_every_machine_with_a_tokenised_resource() {
        let manifest = test_manifest();
        let catalog = catalog(&manifest);
        let machines = catalog["machines"].as_array().expect("machines array");
        assert_eq!(machines.len(), manifest.machines.len());
        for (entry, machine) in machines.iter().zip(&manifest.machines) {
            assert_eq!(entry["machine"], json!(machine.machine));
            assert_eq!(
                entry["resource"],
                json!(format!("{BASE_URL_TOKEN}{}", machine.path))
            );
            assert_eq!(entry["payment"]["amount"], json!(machine.price_atomic));
        }
    }

    #[test]
    fn well_known_resources_are_the_paid_paths_and_never_name_pay_to() {
        let manifest = test_manifest();
        let document = well_known(&manifest);
        let expected: Vec<Value> = manifest
            .machines
            .iter()
            .map(|m| json!(format!("{BASE_URL_TOKEN}{}", m.path)))
            .collect();
        assert_eq!(document["resources"], Value::Array(expected));
        for item in document["items"].as_array().expect("items") {
            assert!(item["accepts"][0].get("payTo").is_none());
        }
    }

    #[test]
    fn sample_is_marked_and_fails_without_its_machine() {
        let mut manifest = test_manifest();
        let value = sample(&manifest).expect("sample");
        assert_eq!(value["not_a_current_observation"], json!(true));
        assert_eq!(value["machine"], json!(SAMPLE_MACHINE));
        manifest.machines.retain(|m| m.machine != SAMPLE_MACHINE);
        assert!(sample(&manifest).is_err());
    }
}
