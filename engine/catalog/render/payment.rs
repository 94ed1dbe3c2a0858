//! The x402 v2 payment requirement and bazaar discovery extension of a machine.

use serde_json::{Map, Value, json};

use super::{Machine, Manifest};

/// The x402 v2 PaymentRequirements a machine advertises. `pay_to` is configuration, so the
/// published descriptive documents leave it out; the 402 challenge always carries it.
pub fn requirement(manifest: &Manifest, machine: &Machine, pay_to: Option<&str>) -> Value {
    let p = &manifest.payment;
    let mut req = Map::new();
    req.insert("scheme".into(), json!(p.scheme));
    req.insert("network".into(), json!(p.network));
    req.insert("amount".into(), json!(machine.price_atomic));
    req.insert("asset".into(), json!(p.asset));
    if let Some(pay_to) = pay_to {
        req.insert("payTo".into(), json!(pay_to));
    }
    req.insert("maxTimeoutSeconds".into(), json!(p.max_timeout_seconds));
    req.insert(
        "extra".into(),
        json!({"name": p.eip712_name, "version": p.eip712_version}),
    );
    Value::Object(req)
}

/// The `extensions.bazaar` discovery extension of a machine's 402 challenge.
pub fn bazaar_extension(machine: &Machine) -> Value {
    json!({
        "info": {
            "input": {
                "type": "http",
                "method": machine.method,
                "bodyType": "json",
                "body": machine.input_example,
            },
            "output": {"type": "json", "example": machine.output_example},
        },
        "schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "input": {
                    "type": "object",
                    "properties": {
                        "type": {"type": "string", "const": "http"},
                        "method": {"type": "string", "enum": [machine.method]},
                        "bodyType": {"type": "string", "enum": ["json"]},
                        "body": machine.input_schema,
                    },
                    "required": ["type", "method", "bodyType", "body"],
                    "additionalProperties": false,
                },
                "output": {
                    "type": "object",
                    "properties": {
                        "type": {"type": "string"},
                        "example": {"type": "object"},
                    },
                    "required": ["type"],
                },
            },
            "required": ["input"],
        },
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_manifest;
    use super::*;

    #[test]
    fn requirement_names_pay_to_only_when_given() {
        let manifest = test_manifest();
        let machine = &manifest.machines[0];
        let descriptive = requirement(&manifest, machine, None);
        assert!(descriptive.get("payTo").is_none());
        let binding = requirement(&manifest, machine, Some("0xabc"));
        assert_eq!(binding["payTo"], json!("0xabc"));
        assert_eq!(binding["amount"], json!(machine.price_atomic));
        assert_eq!(binding["asset"], json!(manifest.payment.asset));
        assert_eq!(
            binding["extra"]["name"],
            json!(manifest.payment.eip712_name)
        );
    }

    #[test]
    fn bazaar_schema_accepts_its_own_info_for_every_machine() {
        let manifest = test_manifest();
        for machine in &manifest.machines {
            let extension = bazaar_extension(machine);
            let validator = super::super::super::manifest::compile_schema(&extension["schema"])
                .expect("bazaar schema compiles");
            let errors: Vec<String> = validator
                .iter_errors(&extension["info"])
                .map(|e| e.to_string())
                .collect();
            assert!(errors.is_empty(), "{}: {errors:?}", machine.machine);
        }
    }
}
