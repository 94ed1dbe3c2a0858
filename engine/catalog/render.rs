//! Renders every published document from the manifest.
//!
//! Compiled by `build.rs` (renders into OUT_DIR and the committed copies are checked for
//! drift) and by the library (the x402 requirement and bazaar extension builders are shared
//! with the payment gate). Absolute URLs are written with [`BASE_URL_TOKEN`]; the engine
//! substitutes its configured base_url once at start-up.

use minijinja::value::Serde;
use minijinja::{Environment, context};
use serde_json::{Map, Value, json};

use super::manifest::{Machine, Manifest};

/// Placeholder for the configured base URL in every render.
pub const BASE_URL_TOKEN: &str = "{base_url}";

/// Paths of the free documents, shared by renders and the router.
pub const CATALOG_PATH: &str = "/v1/catalog";
pub const OPENAPI_PATH: &str = "/openapi.json";
pub const LLMS_PATH: &str = "/llms.txt";
pub const HEALTH_PATH: &str = "/health";
pub const WELL_KNOWN_PATH: &str = "/.well-known/x402";
pub const SAMPLE_PATH: &str = "/samples/productive-venue-snapshot";
pub const DOCS_PREFIX: &str = "/docs/machines/";
/// Free documents: (served path, committed render path, content type). The service serves
/// each render from memory with the base URL substituted.
pub const FREE_DOCUMENTS: [(&str, &str, &str); 6] = [
    ("/", "generated/index.json", "application/json"),
    (CATALOG_PATH, "generated/catalog.json", "application/json"),
    (OPENAPI_PATH, "generated/openapi.json", "application/json"),
    (LLMS_PATH, "generated/llms.txt", "text/plain; charset=utf-8"),
    (
        WELL_KNOWN_PATH,
        "generated/well-known-x402.json",
        "application/json",
    ),
    (
        SAMPLE_PATH,
        "generated/samples/productive-venue-snapshot.json",
        "application/json",
    ),
];

/// The committed render path of a machine's documentation page.
pub fn machine_doc_path(machine: &Machine) -> String {
    format!("docs/machines/{}.md", machine.machine)
}

/// The machine whose output example is served as the free captured sample.
pub const SAMPLE_MACHINE: &str = "VM04";

const GENERATED_NOTE: &str =
    "Generated from machines.yaml by build.rs; do not edit. Refresh with: cargo run -- generate";

const MACHINE_TEMPLATE: &str = include_str!("../../templates/machine.md.j2");
const LLMS_TEMPLATE: &str = include_str!("../../templates/llms.txt.j2");
const GENERATED_README_TEMPLATE: &str = include_str!("../../templates/generated-readme.md.j2");

/// One rendered document and the repository path its committed copy lives at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Render {
    pub path: String,
    pub content: String,
}

fn url(path: &str) -> String {
    format!("{BASE_URL_TOKEN}{path}")
}

fn pretty(value: &Value) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_default();
    text.push('\n');
    text
}

/// Every render, in a stable order.
pub fn render_all(manifest: &Manifest) -> Result<Vec<Render>, String> {
    let mut renders = vec![
        Render {
            path: "generated/catalog.json".into(),
            content: pretty(&catalog(manifest)),
        },
        Render {
            path: "generated/openapi.json".into(),
            content: pretty(&openapi(manifest)),
        },
        Render {
            path: "generated/well-known-x402.json".into(),
            content: pretty(&well_known(manifest)),
        },
        Render {
            path: "generated/index.json".into(),
            content: pretty(&orientation(manifest)),
        },
        Render {
            path: "generated/samples/productive-venue-snapshot.json".into(),
            content: pretty(&sample(manifest)?),
        },
        Render {
            path: "generated/llms.txt".into(),
            content: llms_txt(manifest)?,
        },
        Render {
            path: "generated/README.md".into(),
            content: generated_readme(manifest)?,
        },
    ];
    for machine in &manifest.machines {
        renders.push(Render {
            path: format!("generated/schemas/{}.input.json", machine.machine),
            content: pretty(&machine.input_schema),
        });
        renders.push(Render {
            path: format!("generated/schemas/{}.output.json", machine.machine),
            content: pretty(&machine.output_schema),
        });
        renders.push(Render {
            path: machine_doc_path(machine),
            content: machine_doc(manifest, machine)?,
        });
    }
    Ok(renders)
}

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

fn related_entries(manifest: &Manifest, machine: &Machine) -> Vec<Value> {
    machine
        .related
        .iter()
        .filter_map(|id| manifest.machine(id))
        .map(|sibling| {
            json!({
                "machine": sibling.machine,
                "family": sibling.family,
                "name": sibling.name,
                "path": sibling.path,
                "resource": url(&sibling.path),
                "purpose": sibling.purpose,
            })
        })
        .collect()
}

fn docs_url(machine: &Machine) -> String {
    url(&format!("{DOCS_PREFIX}{}.md", machine.machine))
}

fn response_schema_name(machine: &Machine) -> String {
    format!("{}Response", machine.schema_stem())
}

fn request_schema_name(machine: &Machine) -> String {
    format!("{}Request", machine.schema_stem())
}

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
        "storefront": url("/"),
        "related": related_entries(manifest, machine),
    })
}

/// The catalog of Part 2.1.
pub fn catalog(manifest: &Manifest) -> Value {
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
pub fn orientation(manifest: &Manifest) -> Value {
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
        "machines": machines,
    })
}

/// The `/.well-known/x402` discovery document. Descriptive only: payTo and the binding
/// terms come from each resource's 402 challenge.
pub fn well_known(manifest: &Manifest) -> Value {
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
        "x402Version": manifest.payment.x402_version,
        "service": manifest.service.name,
        "description": manifest.service.description,
        "resources": resources,
        "items": items,
        "catalog": url(CATALOG_PATH),
        "openapi": url(OPENAPI_PATH),
        "llms": url(LLMS_PATH),
        "note": "Descriptive only. Each resource's unpaid 402 PAYMENT-REQUIRED challenge is the payment authority and names payTo.",
    })
}

/// The free captured sample of the VM04 output, marked as not a current observation.
pub fn sample(manifest: &Manifest) -> Result<Value, String> {
    let machine = manifest
        .machine(SAMPLE_MACHINE)
        .ok_or_else(|| format!("{SAMPLE_MACHINE} missing for the sample"))?;
    Ok(json!({
        "sample": true,
        "not_a_current_observation": true,
        "notice": "Captured sample of a VM04 response from the manifest's output example. It is not a current paid observation; call the paid resource for current data.",
        "machine": machine.machine,
        "resource": url(&machine.path),
        "methodology_version": machine.methodology_version,
        "response": machine.output_example,
    }))
}

/// Converts a JSON Schema 2020-12 value of the manifest dialect to the OpenAPI 3.0 dialect:
/// `type: [T, "null"]` becomes `type: T, nullable: true`, `const` becomes a one-value enum.
pub fn to_openapi30(schema: &Value) -> Value {
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
        "properties": {
            "error": {
                "type": "object",
                "additionalProperties": false,
                "required": ["code", "message"],
                "properties": {
                    "code": {"type": "string", "description": "Stable machine-readable code."},
                    "message": {"type": "string", "description": "Human-readable explanation."},
                    "field": {"type": "string", "description": "JSON pointer or name of the offending field, when one is at fault."},
                },
            },
        },
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
                    "description": {"type": "string"},
                    "mimeType": {"type": "string"},
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
                "503": json_response("Service disabled, provider not configured, or payment rail unavailable.", schema_ref("Error")),
            },
            "x-payment-info": {
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

fn free_operation(operation_id: &str, summary: &str, content_type: &str, schema: Value) -> Value {
    json!({
        "get": {
            "operationId": operation_id,
            "summary": summary,
            "tags": ["FREE"],
            "responses": {
                "200": {"description": summary, "content": {content_type: {"schema": schema}}},
            },
        }
    })
}

/// The OpenAPI 3.0.3 document.
pub fn openapi(manifest: &Manifest) -> Value {
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
    let object = json!({"type": "object"});
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
            "Catalog of VM01 to VM11",
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
            "Captured VM04 sample; not a current observation",
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
        json!({"get": {
            "operationId": "getMachineDoc",
            "summary": "Markdown documentation page of one machine",
            "tags": ["FREE"],
            "parameters": [{"name": "machine", "in": "path", "required": true, "schema": {"type": "string", "pattern": "^VM(0[1-9]|1[01])$"}}],
            "responses": {
                "200": {"description": "Markdown page", "content": {"text/markdown": {"schema": {"type": "string"}}}},
                "404": json_response("Unknown machine", schema_ref("Error")),
            },
        }}),
    );
    schemas.insert("Error".into(), error_schema());
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
            "description": format!("{}\n\nPayment: x402 v2, scheme {}, network {}, asset {} ({}). x-payment-info entries are descriptive; the 402 challenge is the authority.", manifest.service.description, manifest.payment.scheme, manifest.payment.network, manifest.payment.asset_symbol, manifest.payment.asset),
            "x-generated-from": "machines.yaml",
            "x-catalog-version": manifest.service.catalog_version,
        },
        "servers": [{"url": BASE_URL_TOKEN}],
        "tags": tags,
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

fn environment() -> Result<Environment<'static>, String> {
    let mut env = Environment::new();
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .keep_trailing_newline(true)
        .build()
        .map_err(|e| e.to_string())?;
    env.set_syntax(syntax);
    for (name, source) in [
        ("machine.md", MACHINE_TEMPLATE),
        ("llms.txt", LLMS_TEMPLATE),
        ("generated-readme.md", GENERATED_README_TEMPLATE),
    ] {
        env.add_template(name, source).map_err(|e| e.to_string())?;
    }
    Ok(env)
}

fn render_template(name: &str, ctx: minijinja::Value) -> Result<String, String> {
    let env = environment()?;
    let template = env.get_template(name).map_err(|e| e.to_string())?;
    template
        .render(ctx)
        .map_err(|e| format!("template {name}: {e:#}"))
}

fn pretty_inline(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

fn machine_doc(manifest: &Manifest, machine: &Machine) -> Result<String, String> {
    let family = manifest
        .families
        .iter()
        .find(|f| f.family == machine.family);
    render_template(
        "machine.md",
        context! {
            note => GENERATED_NOTE,
            base_url => BASE_URL_TOKEN,
            m => Serde(machine),
            family_label => family.map(|f| f.label.clone()),
            payment => Serde(&manifest.payment),
            related => Serde(related_entries(manifest, machine)),
            limits => Serde(machine.limits.iter().map(|(k, v)| (k.clone(), v.to_string())).collect::<Vec<_>>()),
            freshness_json => pretty_inline(&machine.freshness),
            allowlists_json => pretty_inline(&Value::Object(machine.allowlists.clone())),
            input_schema_json => pretty_inline(&machine.input_schema),
            input_example_json => pretty_inline(&machine.input_example),
            output_example_json => pretty_inline(&machine.output_example),
            response_schema => response_schema_name(machine),
        },
    )
}

fn llms_txt(manifest: &Manifest) -> Result<String, String> {
    render_template(
        "llms.txt",
        context! {
            note => GENERATED_NOTE,
            base_url => BASE_URL_TOKEN,
            service => Serde(&manifest.service),
            payment => Serde(&manifest.payment),
            families => Serde(&manifest.families),
            machines => Serde(&manifest.machines),
            paths => context! {
                catalog => CATALOG_PATH, openapi => OPENAPI_PATH, health => HEALTH_PATH,
                well_known => WELL_KNOWN_PATH, sample => SAMPLE_PATH, docs => DOCS_PREFIX,
            },
        },
    )
}

fn generated_readme(manifest: &Manifest) -> Result<String, String> {
    render_template(
        "generated-readme.md",
        context! { note => GENERATED_NOTE, service => Serde(&manifest.service), base_url => BASE_URL_TOKEN },
    )
}
