//! The x402 v2 payment requirement and bazaar discovery extension of a machine.

use serde_json::{Map, Value, json};

use super::{Machine, Manifest};

/// The x402 v2 PaymentRequirements a machine advertises. `pay_to` is configuration, so the
/// published descriptive documents leave it out; the 402 challenge always carries it.
pub(crate) fn requirement(manifest: &Manifest, machine: &Machine, pay_to: Option<&str>) -> Value {
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

/// The `extensions.bazaar` discovery extension in full (bazaar spec v2): `info.input` (http,
/// the method, bodyType json, the input example), `info.output` (json, the output example,
/// at most `MAX_OUTPUT_EXAMPLE_BYTES` by the manifest check) and a `schema` of `info` with the
/// full request and response schemas. The 402's JSON body carries it and the facilitator is
/// sent it; the header carries [`bazaar_header_extension`].
pub(crate) fn bazaar_extension(machine: &Machine) -> Value {
    let output = Output {
        info: json!({"type": "json", "example": machine.output_example}),
        schema: json!({
            "type": "object",
            "properties": {
                "type": {"type": "string", "const": "json"},
                "example": machine.output_schema,
            },
            "required": ["type", "example"],
        }),
    };
    bazaar(machine, machine.input_schema.clone(), Some(output))
}

/// `info.output` and the schema that describes it.
struct Output {
    info: Value,
    schema: Value,
}

/// The bazaar extension as the `PAYMENT-REQUIRED` header carries it: the input example and
/// an outline of the request schema, small enough for every machine's header to pass a
/// proxy's default 4 KiB response-header buffer (docs/payment.md, "The 402 header budget").
pub(crate) fn bazaar_header_extension(machine: &Machine) -> Value {
    bazaar(machine, request_outline(machine), None)
}

fn bazaar(machine: &Machine, body_schema: Value, output: Option<Output>) -> Value {
    let mut info = json!({
        "input": {
            "type": "http",
            "method": machine.method,
            "bodyType": "json",
            "body": machine.input_example,
        },
    });
    let mut properties = json!({
        "input": {
            "type": "object",
            "properties": {
                "type": {"type": "string", "const": "http"},
                "method": {"type": "string", "enum": [machine.method]},
                "bodyType": {"type": "string", "enum": ["json"]},
                "body": body_schema,
            },
            "required": ["type", "method", "bodyType", "body"],
            "additionalProperties": false,
        },
    });
    if let (Some(output), Value::Object(info), Value::Object(properties)) =
        (output, &mut info, &mut properties)
    {
        info.insert("output".into(), output.info);
        properties.insert("output".into(), output.schema);
    }
    json!({
        "info": info,
        "schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": properties,
            "required": ["input"],
        },
    })
}

/// The request schema's top level: each property's type and allowed values, which fields
/// are required and whether others are refused. Every body the full schema accepts, this
/// accepts too; the nested rules live in the full schema it names.
fn request_outline(machine: &Machine) -> Value {
    let schema = &machine.input_schema;
    let mut outline = Map::new();
    outline.insert("type".into(), json!("object"));
    outline.insert(
        "description".into(),
        json!(format!(
            "Outline. Full schema: the 402 body, or /openapi.json {}Request.",
            machine.schema_stem()
        )),
    );
    for key in ["required", "additionalProperties"] {
        if let Some(value) = schema.get(key) {
            outline.insert(key.into(), value.clone());
        }
    }
    let properties: Map<String, Value> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|properties| {
            properties
                .iter()
                .map(|(name, property)| (name.clone(), property_outline(property)))
                .collect()
        })
        .unwrap_or_default();
    outline.insert("properties".into(), Value::Object(properties));
    Value::Object(outline)
}

fn property_outline(property: &Value) -> Value {
    let kept: Map<String, Value> = ["type", "const", "enum"]
        .into_iter()
        .filter_map(|key| Some((key.to_string(), property.get(key)?.clone())))
        .collect();
    Value::Object(kept)
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
        let extensions = manifest
            .machines
            .iter()
            .flat_map(|m| [(m, bazaar_extension(m)), (m, bazaar_header_extension(m))]);
        for (machine, extension) in extensions {
            let validator = super::super::super::manifest::compile_schema(&extension["schema"])
                .expect("bazaar schema compiles");
            let errors: Vec<String> = validator
                .iter_errors(&extension["info"])
                .map(|e| e.to_string())
                .collect();
            assert!(errors.is_empty(), "{}: {errors:?}", machine.machine);
        }
    }

    #[test]
    fn the_header_outline_keeps_the_top_level_and_drops_the_output() {
        let manifest = test_manifest();
        for machine in &manifest.machines {
            let extension = bazaar_header_extension(machine);
            assert!(extension["info"].get("output").is_none());
            let outline = &extension["schema"]["properties"]["input"]["properties"]["body"];
            assert_eq!(outline["required"], machine.input_schema["required"]);
            let names = |v: &Value| -> Vec<String> {
                v["properties"]
                    .as_object()
                    .map(|p| p.keys().cloned().collect())
                    .unwrap_or_default()
            };
            assert_eq!(
                names(outline),
                names(&machine.input_schema),
                "{}",
                machine.machine
            );
        }
    }
}
