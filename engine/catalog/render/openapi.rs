//! The OpenAPI 3.0.3 document and the conversion of manifest schemas to its dialect.

use serde_json::{Map, Value, json};

use super::*;

/// Converts a JSON Schema 2020-12 value of the manifest dialect to the OpenAPI 3.0 dialect:
/// `type: [T, "null"]` becomes `type: T, nullable: true`, `const` becomes a one-value enum.
pub(crate) fn to_openapi30(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => {
            let mut out = Map::new();
            for (key, value) in map {
                match key.as_str() {
                    "$schema" | "$id" => {}
                    "type" => match value {
                        Value::Array(types) => {
                            let concrete = types.iter().find(|t| t.as_str() != Some("null"));
                            if let Some(concrete) = concrete {
                                out.insert("type".into(), concrete.clone());
                            }
                            out.insert("nullable".into(), Value::Bool(true));
                        }
                        other => {
                            out.insert("type".into(), other.clone());
                        }
                    },
                    "const" => {
                        out.insert("enum".into(), Value::Array(vec![value.clone()]));
                    }
                    "properties" => {
                        let props = value
                            .as_object()
                            .map(|p| {
                                p.iter()
                                    .map(|(k, v)| (k.clone(), to_openapi30(v)))
                                    .collect::<Map<_, _>>()
                            })
                            .unwrap_or_default();
                        out.insert(key.clone(), Value::Object(props));
                    }
                    "items" | "additionalProperties" | "not" => {
                        out.insert(key.clone(), to_openapi30(value));
                    }
                    "oneOf" | "anyOf" | "allOf" => {
                        let subs = value
                            .as_array()
                            .map(|a| a.iter().map(to_openapi30).collect())
                            .unwrap_or_default();
                        out.insert(key.clone(), Value::Array(subs));
                    }
                    _ => {
                        out.insert(key.clone(), value.clone());
                    }
                }
            }
            // A nullable enum must list null to accept it (OpenAPI 3.0.3 clarification).
            let nullable = out.get("nullable") == Some(&Value::Bool(true));
            if let (true, Some(Value::Array(values))) = (nullable, out.get_mut("enum"))
                && !values.contains(&Value::Null)
            {
                values.push(Value::Null);
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

fn error_schema() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["error"],
        "properties": {"error": error_object_schema()},
    })
}

/// The `error` object every error body carries.
fn error_object_schema() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["code", "message"],
        "properties": {
            "code": {"type": "string", "description": "Stable machine-readable code."},
            "message": {"type": "string", "description": "Human-readable explanation."},
            "field": {"type": "string", "description": "JSON pointer or name of the offending field, when one is at fault."},
        },
    })
}

/// The 503 of a paid call whose settlement's outcome is not known yet.
fn settlement_pending_schema() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["error", "transaction", "retry_after_seconds"],
        "properties": {
            "error": error_object_schema(),
            "transaction": {"type": "string", "nullable": true, "description": "The settlement's transaction hash, when one is known."},
            "retry_after_seconds": {"type": "integer", "minimum": 1, "description": "As Retry-After: when to send the identical request again."},
        },
    })
}

/// A paid operation's 503: an error, or a payment whose settlement is still pending.
fn paid_unavailable_response() -> Value {
    json!({
        "description": "Service disabled, provider not configured, or payment rail unavailable (Error); or settlement_pending (SettlementPending): the payment's outcome is not known yet. Do not pay again: after Retry-After, send the identical request (the same PAYMENT-SIGNATURE and body) to collect the result.",
        "headers": {
            "Retry-After": {"description": "Seconds to wait before the identical request (settlement_pending).", "schema": {"type": "integer"}},
            "PAYMENT-RESPONSE": {"description": "base64 of the x402 v2 SettleResponse JSON, errorReason settlement_pending (settlement_pending).", "schema": {"type": "string"}},
        },
        "content": {"application/json": {"schema": {"oneOf": [schema_ref("Error"), schema_ref("SettlementPending")]}}},
    })
}

fn payment_required_schema() -> Value {
    json!({
        "type": "object",
        "description": "x402 v2 PaymentRequired; the same object travels base64-encoded in the PAYMENT-REQUIRED header.",
        "required": ["x402Version", "resource", "accepts"],
        "properties": {
            "x402Version": {"type": "integer", "enum": [2]},
            "error": {"type": "string"},
            "resource": {
                "type": "object",
                "required": ["url"],
                "properties": {
                    "url": {"type": "string"},
                    "description": {"type": "string", "maxLength": 500},
                    "mimeType": {"type": "string"},
                    "serviceName": {"type": "string", "maxLength": 32},
                    "tags": {"type": "array", "maxItems": 5, "items": {"type": "string", "maxLength": 32}},
                    "iconUrl": {"type": "string"},
                },
            },
            "accepts": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "required": ["scheme", "network", "amount", "asset", "payTo", "maxTimeoutSeconds", "extra"],
                    "properties": {
                        "scheme": {"type": "string"},
                        "network": {"type": "string"},
                        "amount": {"type": "string"},
                        "asset": {"type": "string"},
                        "payTo": {"type": "string"},
                        "maxTimeoutSeconds": {"type": "integer"},
                        "extra": {"type": "object"},
                    },
                },
            },
            "extensions": {"type": "object"},
        },
    })
}

fn health_schema() -> Value {
    json!({
        "type": "object",
        "required": ["status", "service", "catalog_version", "api_version", "machines", "payment"],
        "properties": {
            "status": {"type": "string", "enum": ["ok", "degraded"]},
            "service": {"type": "string"},
            "catalog_version": {"type": "string"},
            "api_version": {"type": "string"},
            "machines": {"type": "integer"},
            "machine_readiness": {
                "type": "array",
                "description": "Whether this deployment sells each machine, from its configuration alone (no provider is contacted). A machine that is not ready answers its valid requests with this 503 code before any payment is asked.",
                "items": {
                    "type": "object",
                    "required": ["machine", "path", "ready"],
                    "properties": {
                        "machine": {"type": "string"},
                        "path": {"type": "string"},
                        "ready": {"type": "boolean"},
                        "code": {"type": "string"},
                        "message": {"type": "string"},
                    },
                },
            },
            "payment": {
                "type": "object",
                "properties": {
                    "network": {"type": "string"},
                    "scheme": {"type": "string"},
                    "asset": {"type": "string"},
                    "pay_to_configured": {"type": "boolean"},
                    "facilitator_configured": {"type": "boolean"},
                    "rail": {"type": "string"},
                    "unpaid_empty_body": {
                        "type": "string",
                        "enum": ["reject", "challenge"],
                        "description": "What an unpaid POST with no body or {} and an unpaid GET/HEAD of a paid path get: reject = 400/405 (SPEC §7), challenge = the machine's 402 (what the CDP Bazaar's crawler needs).",
                    },
                },
            },
            "evidence": {
                "type": "object",
                "description": "Whether offers, receipts and answers are signed (docs/evidence-signatures.md): signing on names our DID, the key new signatures carry as kid, and where the DID document is served.",
                "required": ["signing"],
                "properties": {
                    "signing": {"type": "string", "enum": ["on", "off"]},
                    "did": {"type": "string"},
                    "kid": {"type": "string"},
                    "did_document": {"type": "string"},
                },
            },
        },
    })
}

fn json_response(description: &str, schema: Value) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": schema}}})
}

fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn paid_operation(manifest: &Manifest, machine: &Machine) -> Value {
    let p = &manifest.payment;
    json!({
        "post": {
            "operationId": machine.operation_id,
            "summary": format!("{} {}", machine.machine, machine.name),
            "description": format!("{}\n\nWhen to call: {}\n\nPrice {} ({} atomic USDC) per call, paid over x402 v2. Methodology {}.", machine.purpose, machine.when_to_call, machine.price, machine.price_atomic, machine.methodology_version),
            "tags": [machine.family],
            "requestBody": {
                "required": true,
                "content": {"application/json": {
                    "schema": schema_ref(&request_schema_name(machine)),
                    "example": machine.input_example,
                }},
            },
            "responses": {
                "200": {
                    "description": "Paid observation. The product status inside the body may still be PARTIAL or HOLD.",
                    "headers": {"PAYMENT-RESPONSE": {
                        "description": "base64 (standard, padded) of the x402 v2 SettleResponse JSON.",
                        "schema": {"type": "string"},
                    }},
                    "content": {"application/json": {
                        "schema": schema_ref(&response_schema_name(machine)),
                        "example": machine.output_example,
                    }},
                },
                "400": json_response("Invalid request; no payment contract is issued.", schema_ref("Error")),
                "402": {
                    "description": "Payment required: the PAYMENT-REQUIRED header carries the binding terms.",
                    "headers": {"PAYMENT-REQUIRED": {
                        "description": "base64 (standard, padded) of the x402 v2 PaymentRequired JSON.",
                        "schema": {"type": "string"},
                    }},
                    "content": {"application/json": {"schema": schema_ref("PaymentRequired")}},
                },
                "503": paid_unavailable_response(),
            },
            "security": [],
            "x-payment-info": payment_info(machine),
            "x-factomat-payment": {
                "descriptive_only": true,
                "authority": "the unpaid 402 PAYMENT-REQUIRED challenge",
                "protocol": p.protocol,
                "x402Version": p.x402_version,
                "scheme": p.scheme,
                "network": p.network,
                "asset": p.asset,
                "asset_symbol": p.asset_symbol,
                "price": machine.price,
                "amount": machine.price_atomic,
            },
        }
    })
}

/// The structured `x-payment-info` discovery indexes read: a fixed USD price and the
/// protocols the operation accepts.
fn payment_info(machine: &Machine) -> Value {
    json!({
        "price": {
            "mode": "fixed",
            "currency": "USD",
            "amount": machine.price.trim_start_matches('$'),
        },
        "protocols": [{"x402": {}}],
    })
}

fn free_operation(operation_id: &str, summary: &str, content_type: &str, schema: Value) -> Value {
    json!({
        "get": {
            "operationId": operation_id,
            "summary": summary,
            "tags": ["FREE"],
            "security": [],
            "responses": {
                "200": {"description": summary, "content": {content_type: {"schema": schema}}},
            },
        }
    })
}

/// The free endpoints' operations, the machines' documentation pages among them.
fn free_paths(manifest: &Manifest, paths: &mut Map<String, Value>) {
    let object = json!({"type": "object"});
    let catalog_summary = format!("Catalog of {}", machine_id_range(manifest));
    let free = [
        (
            "/",
            "getIndex",
            "Orientation object with resource and documentation URLs",
            "application/json",
            object.clone(),
        ),
        (
            HEALTH_PATH,
            "getHealth",
            "Health object",
            "application/json",
            schema_ref("Health"),
        ),
        (
            LLMS_PATH,
            "getLlmsTxt",
            "Non-normative llms.txt index",
            "text/plain",
            json!({"type": "string"}),
        ),
        (
            CATALOG_PATH,
            "getCatalog",
            catalog_summary.as_str(),
            "application/json",
            object.clone(),
        ),
        (
            OPENAPI_PATH,
            "getOpenApi",
            "This OpenAPI document",
            "application/json",
            object.clone(),
        ),
        (
            WELL_KNOWN_PATH,
            "getWellKnownX402",
            "x402 discovery document",
            "application/json",
            object.clone(),
        ),
        (
            SAMPLE_PATH,
            "getProductiveVenueSnapshotSample",
            "VM04 sample: a stored capture, or an illustrative example; never a current observation",
            "application/json",
            object,
        ),
    ];
    for (path, id, summary, content_type, schema) in free {
        paths.insert(
            path.to_string(),
            free_operation(id, summary, content_type, schema),
        );
    }
    paths.insert(
        format!("{DOCS_PREFIX}{{machine}}.md"),
        machine_doc_operation(manifest),
    );
}

/// "VM01 to VM11": the manifest's first and last machine ids.
fn machine_id_range(manifest: &Manifest) -> String {
    let ids: Vec<&str> = manifest
        .machines
        .iter()
        .map(|m| m.machine.as_str())
        .collect();
    match (ids.first(), ids.last()) {
        (Some(first), Some(last)) => format!("{first} to {last}"),
        _ => "no machines".to_string(),
    }
}

/// The documentation page of one machine, its path parameter limited to the manifest's ids.
fn machine_doc_operation(manifest: &Manifest) -> Value {
    let ids: Vec<&str> = manifest
        .machines
        .iter()
        .map(|m| m.machine.as_str())
        .collect();
    json!({"get": {
        "operationId": "getMachineDoc",
        "summary": "Markdown documentation page of one machine",
        "tags": ["FREE"],
        "security": [],
        "parameters": [{"name": "machine", "in": "path", "required": true, "schema": {"type": "string", "enum": ids}}],
        "responses": {
            "200": {"description": "Markdown page", "content": {"text/markdown": {"schema": {"type": "string"}}}},
            "404": json_response("Unknown machine", schema_ref("Error")),
        },
    }})
}

/// The OpenAPI 3.0.3 document.
pub(crate) fn openapi(manifest: &Manifest) -> Value {
    let mut paths = Map::new();
    let mut schemas = Map::new();
    for machine in &manifest.machines {
        paths.insert(machine.path.clone(), paid_operation(manifest, machine));
        schemas.insert(
            request_schema_name(machine),
            to_openapi30(&machine.input_schema),
        );
        schemas.insert(
            response_schema_name(machine),
            to_openapi30(&machine.output_schema),
        );
    }
    free_paths(manifest, &mut paths);
    schemas.insert("Error".into(), error_schema());
    schemas.insert("SettlementPending".into(), settlement_pending_schema());
    schemas.insert("PaymentRequired".into(), payment_required_schema());
    schemas.insert("Health".into(), health_schema());
    let tags: Vec<Value> = manifest
        .families
        .iter()
        .map(|f| json!({"name": f.family, "description": f.label}))
        .chain(std::iter::once(
            json!({"name": "FREE", "description": "Free read-only endpoints"}),
        ))
        .collect();
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": manifest.service.title,
            "version": manifest.service.api_version,
            "description": format!("{}\n\nPayment: x402 v2, scheme {}, network {}, asset {} ({}). x-payment-info and x-factomat-payment entries are descriptive; the 402 challenge is the authority.", manifest.service.description, manifest.payment.scheme, manifest.payment.network, manifest.payment.asset_symbol, manifest.payment.asset),
            "contact": manifest.service.contact,
            "x-guidance": manifest.service.guidance,
            "x-generated-from": "machines.yaml",
            "x-catalog-version": manifest.service.catalog_version,
        },
        "x-agentcash-guidance": {"llmsTxtUrl": url(LLMS_PATH)},
        "servers": [{"url": BASE_URL_TOKEN}],
        "tags": tags,
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_manifest;
    use super::*;

    #[test]
    fn to_openapi30_rewrites_nullable_types_and_consts_at_any_depth() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "a": {"type": ["string", "null"], "enum": ["x"]},
                "b": {"const": "v1"},
                "c": {"type": "array", "items": {"type": ["integer", "null"]}},
                "d": {"oneOf": [{"const": 1}, {"type": "string"}]},
            },
        });
        let converted = to_openapi30(&schema);
        assert!(converted.get("$schema").is_none());
        let props = &converted["properties"];
        assert_eq!(
            props["a"],
            json!({"type": "string", "nullable": true, "enum": ["x", null]})
        );
        assert_eq!(props["b"], json!({"enum": ["v1"]}));
        assert_eq!(
            props["c"]["items"],
            json!({"type": "integer", "nullable": true})
        );
        assert_eq!(props["d"]["oneOf"][0], json!({"enum": [1]}));
    }

    #[test]
    fn openapi_has_a_paid_operation_and_both_schemas_per_machine() {
        let manifest = test_manifest();
        let document = openapi(&manifest);
        assert_eq!(document["openapi"], json!("3.0.3"));
        let schemas = &document["components"]["schemas"];
        for machine in &manifest.machines {
            let operation = &document["paths"][machine.path.as_str()]["post"];
            assert_eq!(operation["operationId"], json!(machine.operation_id));
            assert!(operation["responses"]["402"].is_object());
            assert!(schemas[request_schema_name(machine)].is_object());
            assert!(schemas[response_schema_name(machine)].is_object());
        }
        let text = document.to_string();
        assert!(!text.contains("\"const\""), "3.0.3 has no const");
    }

    #[test]
    fn every_operation_declares_no_auth_and_paid_ones_a_structured_price() {
        let manifest = test_manifest();
        let document = openapi(&manifest);
        let paths = document["paths"].as_object().expect("paths");
        for (path, item) in paths {
            for (method, operation) in item.as_object().expect("path item") {
                assert_eq!(operation["security"], json!([]), "{method} {path}");
            }
        }
        for machine in &manifest.machines {
            let info = &document["paths"][machine.path.as_str()]["post"]["x-payment-info"];
            assert_eq!(info["price"]["mode"], json!("fixed"));
            assert_eq!(info["price"]["currency"], json!("USD"));
            let amount = info["price"]["amount"].as_str().expect("amount");
            assert_eq!(format!("${amount}"), machine.price);
            assert_eq!(info["protocols"], json!([{"x402": {}}]));
        }
        assert_eq!(
            document["info"]["contact"]["email"],
            json!(manifest.service.contact.email)
        );
        assert_eq!(
            document["x-agentcash-guidance"]["llmsTxtUrl"],
            json!(format!("{BASE_URL_TOKEN}{LLMS_PATH}"))
        );
    }
}
