//! The storefront for people: plain HTML pages rendered from the manifest at build time — an
//! index of the machines by family and one page per machine — with one stylesheet and one
//! small script (the "see the payment terms" button). No framework, no third-party asset; every
//! page reads fully with JavaScript off.
//!
//! Compiled by `build.rs` (beside `manifest` and `render`) and by the library (the server serves
//! the renders, the catalog links them).

use minijinja::value::Serde;
use minijinja::{Environment, context};
use serde::Serialize;
use serde_json::{Map, Value};

use super::manifest::{Family, Machine, Manifest};
use super::render::{
    BASE_URL_TOKEN, Render, RenderError, STOREFRONT_PREFIX as PREFIX, environment_of,
    storefront_page as page_path,
};
/// Where its renders are committed.
pub const RENDER_DIR: &str = "generated/storefront";
/// The content security policy of every storefront page: nothing but this origin.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const HTML: &str = "text/html; charset=utf-8";
const GENERATED_NOTE: &str =
    "Generated from machines.yaml by build.rs; do not edit. Refresh with: cargo run -- generate";

const LAYOUT: &str = include_str!("../../templates/storefront/layout.html.j2");
const INDEX: &str = include_str!("../../templates/storefront/index.html.j2");
const MACHINE: &str = include_str!("../../templates/storefront/machine.html.j2");
/// Static assets, served as they are: (file name, content type, text).
const ASSETS: [(&str, &str, &str); 2] = [
    (
        "storefront.css",
        "text/css; charset=utf-8",
        include_str!("../../templates/storefront/storefront.css"),
    ),
    (
        "terms.js",
        "text/javascript; charset=utf-8",
        include_str!("../../templates/storefront/terms.js"),
    ),
];

/// Every storefront document: (served path, committed render path, content type).
pub fn documents(manifest: &Manifest) -> Vec<(String, String, &'static str)> {
    let index = format!("{RENDER_DIR}/index.html");
    // The index answers with and without the trailing slash; its links are root-relative.
    let mut documents = vec![
        (PREFIX.to_string(), index.clone(), HTML),
        (PREFIX.trim_end_matches('/').to_string(), index, HTML),
    ];
    for machine in &manifest.machines {
        documents.push((
            page_path(machine),
            format!("{RENDER_DIR}/{}.html", machine.machine),
            HTML,
        ));
    }
    for (name, content_type, _) in ASSETS {
        documents.push((
            format!("{PREFIX}{name}"),
            format!("{RENDER_DIR}/{name}"),
            content_type,
        ));
    }
    documents
}

/// The storefront's renders, in a stable order.
pub fn render_all(manifest: &Manifest) -> Result<Vec<Render>, RenderError> {
    let env = environment()?;
    let mut renders = vec![Render {
        path: format!("{RENDER_DIR}/index.html"),
        content: render(&env, "index.html", index_context(manifest))?,
    }];
    for machine in &manifest.machines {
        renders.push(Render {
            path: format!("{RENDER_DIR}/{}.html", machine.machine),
            content: render(&env, "machine.html", machine_context(manifest, machine))?,
        });
    }
    for (name, _, text) in ASSETS {
        renders.push(Render {
            path: format!("{RENDER_DIR}/{name}"),
            content: text.to_string(),
        });
    }
    Ok(renders)
}

fn environment() -> Result<Environment<'static>, RenderError> {
    // Names ending in .html turn on minijinja's HTML auto-escaping.
    environment_of(&[
        ("layout.html", LAYOUT),
        ("index.html", INDEX),
        ("machine.html", MACHINE),
    ])
}

fn render(env: &Environment<'_>, name: &str, ctx: minijinja::Value) -> Result<String, RenderError> {
    env.get_template(name)
        .and_then(|t| t.render(ctx))
        .map_err(|source| RenderError::template(&format!("storefront {name}"), source))
}

fn common_context(manifest: &Manifest) -> minijinja::Value {
    context! {
        note => GENERATED_NOTE,
        base_url => BASE_URL_TOKEN,
        prefix => PREFIX,
        service => Serde(&manifest.service),
        payment => Serde(&manifest.payment),
    }
}

#[derive(Serialize)]
struct FamilyEntry<'a> {
    family: &'a Family,
    machines: Vec<&'a Machine>,
}

fn index_context(manifest: &Manifest) -> minijinja::Value {
    let families: Vec<FamilyEntry<'_>> = manifest
        .families
        .iter()
        .map(|family| FamilyEntry {
            family,
            machines: family
                .machines
                .iter()
                .filter_map(|id| manifest.machine(id))
                .collect(),
        })
        .collect();
    context! {
        families => Serde(families),
        ..common_context(manifest)
    }
}

fn machine_context(manifest: &Manifest, machine: &Machine) -> minijinja::Value {
    let family = manifest
        .families
        .iter()
        .find(|f| f.family == machine.family);
    let related: Vec<&Machine> = machine
        .related
        .iter()
        .filter_map(|id| manifest.machine(id))
        .collect();
    let example = serde_json::to_string(&machine.input_example).unwrap_or_default();
    context! {
            m => Serde(machine),
            family_label => family.map(|f| f.label.clone()),
            related => Serde(related),
            limits => Serde(pairs(&machine.limits)),
            freshness => Serde(machine.freshness.as_object().map(pairs).unwrap_or_default()),
            allowlists => Serde(pairs(&machine.allowlists)),
            schema_rows => Serde(schema_rows(&machine.input_schema)),
            body_rules => Serde(sentences(combined_rules(&machine.input_schema, ""))),
            schema_note => machine.input_schema.get("description").and_then(Value::as_str),
            input_example_json => pretty(&machine.input_example),
            output_example_json => pretty(&machine.output_example),
            example_compact => example.clone(),
            example_shell => shell_quote(&example),
            example_python => example.replace('\\', "\\\\").replace('\'', "\\'"),
            ..common_context(manifest)
    }
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// `(name, value)` with strings shown bare and anything else as compact JSON.
fn pairs(map: &Map<String, Value>) -> Vec<(String, String)> {
    map.iter()
        .map(|(name, value)| (name.clone(), display(value)))
        .collect()
}

fn display(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Array(items) if items.iter().all(|i| !i.is_object() && !i.is_array()) => {
            items.iter().map(display).collect::<Vec<_>>().join(", ")
        }
        other => other.to_string(),
    }
}

/// A POSIX shell single-quoted word.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// One row of the readable request-schema table.
#[derive(Debug, Serialize, PartialEq)]
struct SchemaRow {
    field: String,
    kind: String,
    required: bool,
    description: String,
    rules: Vec<String>,
}

/// The request schema flattened into rows: nested objects as `a.b`, array items as `a[]`,
/// alternative shapes (`oneOf`/`anyOf` variants with a `type`) as `a (variant n)`. Variants
/// that only constrain the fields already listed become a sentence in the field's rules
/// ([`combined_rules`]).
fn schema_rows(schema: &Value) -> Vec<SchemaRow> {
    let mut rows = Vec::new();
    visit(schema, "", true, &mut rows);
    rows
}

fn visit(schema: &Value, field: &str, required: bool, rows: &mut Vec<SchemaRow>) {
    let Some(object) = schema.as_object() else {
        return;
    };
    if !field.is_empty() {
        rows.push(SchemaRow {
            field: field.to_string(),
            kind: kind(object),
            required,
            description: object
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            rules: rules(object)
                .into_iter()
                .chain(combined_rules(schema, field))
                .collect(),
        });
    }
    let required_names: Vec<&str> = object
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(properties) = object.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            let path = if field.is_empty() {
                name.clone()
            } else {
                format!("{field}.{name}")
            };
            visit(
                property,
                &path,
                required_names.contains(&name.as_str()),
                rows,
            );
        }
    }
    if let Some(items) = object.get("items") {
        visit(items, &format!("{field}[]"), true, rows);
    }
    for keyword in ["oneOf", "anyOf"] {
        if let Some(variants) = object.get(keyword).and_then(Value::as_array)
            && !constraints_only(variants)
        {
            for (n, variant) in variants.iter().enumerate() {
                let label = if field.is_empty() { "body" } else { field };
                visit(variant, &format!("{label} (variant {})", n + 1), true, rows);
            }
        }
    }
}

fn kind(object: &Map<String, Value>) -> String {
    let mut kind = match object.get("type") {
        Some(Value::String(name)) => name.clone(),
        Some(Value::Array(names)) => names
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" or "),
        _ if object.contains_key("oneOf") => "one of the variants below".into(),
        _ if object.contains_key("anyOf") => "any of the variants below".into(),
        _ => "any".into(),
    };
    if let Some(format) = object.get("format").and_then(Value::as_str) {
        kind.push_str(&format!(" ({format})"));
    }
    kind
}

fn rules(object: &Map<String, Value>) -> Vec<String> {
    let mut rules = Vec::new();
    if let Some(value) = object.get("const") {
        rules.push(format!("always {}", display(value)));
    }
    if let Some(Value::Array(values)) = object.get("enum") {
        let values: Vec<String> = values.iter().map(display).collect();
        rules.push(format!("one of: {}", values.join(", ")));
    }
    for (keyword, label) in [
        ("minLength", "at least {} characters"),
        ("maxLength", "at most {} characters"),
        ("minimum", "at least {}"),
        ("maximum", "at most {}"),
        ("exclusiveMinimum", "more than {}"),
        ("exclusiveMaximum", "less than {}"),
        ("minItems", "at least {} items"),
        ("maxItems", "at most {} items"),
        ("minProperties", "at least {} fields"),
        ("maxProperties", "at most {} fields"),
        ("pattern", "matches {}"),
        ("default", "default {}"),
    ] {
        if let Some(value) = object.get(keyword) {
            rules.push(label.replace("{}", &display(value)));
        }
    }
    if object.get("uniqueItems") == Some(&Value::Bool(true)) {
        rules.push("no duplicates".into());
    }
    if let Some(Value::Object(not)) = object.get("not")
        && let Some(value) = not.get("const").filter(|_| not.len() == 1)
    {
        rules.push(format!("never {}", display(value)));
    }
    if object.get("additionalProperties") == Some(&Value::Bool(false)) {
        rules.push("no other fields".into());
    }
    rules
}

// ---------------------------------------------------------------------------------------
// Rules across fields (`oneOf`, `anyOf`, `not` over properties) as sentences

/// Whether alternatives only constrain fields the schema lists anyway (no shape of their own).
fn constraints_only(variants: &[Value]) -> bool {
    variants
        .iter()
        .all(|variant| variant.as_object().is_some_and(|v| !v.contains_key("type")))
}

/// An object schema's combined rules as clauses, with field names under `at`: its
/// constraint-only `oneOf`/`anyOf` and a `not` over several fields. (A `not` on one value is
/// a plain rule of that field.)
fn combined_rules(schema: &Value, at: &str) -> Vec<String> {
    let Some(object) = schema.as_object() else {
        return Vec::new();
    };
    let mut found = Vec::new();
    if let Some(variants) = object.get("oneOf").and_then(Value::as_array)
        && constraints_only(variants)
    {
        found.push(cases(variants, at, "exactly one of these holds"));
    }
    if let Some(variants) = object.get("anyOf").and_then(Value::as_array)
        && constraints_only(variants)
    {
        found.push(cases(variants, at, "at least one of these holds"));
    }
    if let Some(not) = object.get("not")
        && !not
            .as_object()
            .is_some_and(|n| n.len() == 1 && n.contains_key("const"))
    {
        found.push(negation(not, at));
    }
    found
}

/// Rules as sentences of their own (the body's rules, listed under the table).
fn sentences(rules: Vec<String>) -> Vec<String> {
    rules
        .iter()
        .map(|rule| format!("{}.", capitalized(rule)))
        .collect()
}

/// Alternatives as one clause. When every variant picks its case by one field's constant
/// (a discriminator such as `kind`), "by kind: when native, …; when erc20, …"; otherwise the
/// variants' conditions in turn.
fn cases(variants: &[Value], at: &str, otherwise: &str) -> String {
    let selectors: Vec<Option<(String, String)>> =
        variants.iter().map(|v| selector(v, at)).collect();
    let discriminator = selectors
        .first()
        .and_then(|first| first.as_ref().map(|(field, _)| field.clone()))
        .filter(|field| {
            selectors
                .iter()
                .all(|s| s.as_ref().is_some_and(|(f, _)| f == field))
        });
    match discriminator {
        Some(field) => {
            let parts: Vec<String> = variants
                .iter()
                .zip(&selectors)
                .map(|(variant, selected)| {
                    let value = selected.as_ref().map(|(_, v)| v.as_str()).unwrap_or("");
                    let rest = clauses(&without_selector(variant), at);
                    if rest.is_empty() {
                        format!("when {value}, no further rule")
                    } else {
                        format!("when {value}, {}", rest.join(" and "))
                    }
                })
                .collect();
            format!("by {field}: {}", parts.join("; "))
        }
        None => {
            let parts: Vec<String> = variants
                .iter()
                .map(|variant| clauses(variant, at).join(" and "))
                .collect();
            format!("{otherwise}: {}", parts.join("; or "))
        }
    }
}

/// The one property a variant pins with `const`, as (field, value).
fn selector(variant: &Value, at: &str) -> Option<(String, String)> {
    let properties = variant.get("properties")?.as_object()?;
    let mut pinned = properties.iter().filter_map(|(name, property)| {
        let property = property.as_object()?;
        let value = property.get("const").filter(|_| property.len() == 1)?;
        Some((joined(at, name), display(value)))
    });
    let first = pinned.next()?;
    pinned.next().is_none().then_some(first)
}

/// The variant without its discriminating `const` property.
fn without_selector(variant: &Value) -> Value {
    let mut variant = variant.clone();
    if let Some(properties) = variant.get_mut("properties").and_then(Value::as_object_mut) {
        properties.retain(|_, property| {
            property
                .as_object()
                .is_none_or(|p| !(p.len() == 1 && p.contains_key("const")))
        });
    }
    variant
}

/// What a constraint schema requires of the fields under `at`, clause by clause.
fn clauses(schema: &Value, at: &str) -> Vec<String> {
    let Some(object) = schema.as_object() else {
        return Vec::new();
    };
    let mut found = Vec::new();
    if let Some(value) = object.get("const") {
        found.push(format!("{} is {}", subject(at), display(value)));
    }
    if let Some(Value::Array(values)) = object.get("enum") {
        let values: Vec<String> = values.iter().map(display).collect();
        found.push(format!("{} is one of {}", subject(at), values.join(", ")));
    }
    if let Some(properties) = object.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            found.extend(clauses_of_field(property, &joined(at, name)));
        }
    }
    if let Some(names) = object.get("required").and_then(Value::as_array) {
        let names: Vec<String> = names
            .iter()
            .filter_map(Value::as_str)
            .map(|name| joined(at, name))
            .collect();
        match names.as_slice() {
            [] => {}
            [one] => found.push(format!("{one} is given")),
            many => found.push(format!("{} are given", and_list(many))),
        }
    }
    if let Some(not) = object.get("not") {
        found.push(negation(not, at));
    }
    for (keyword, joiner) in [("anyOf", " or "), ("oneOf", " or else ")] {
        if let Some(variants) = object.get(keyword).and_then(Value::as_array) {
            let parts: Vec<String> = variants
                .iter()
                .map(|variant| clauses(variant, at).join(" and "))
                .collect();
            found.push(format!("({})", parts.join(joiner)));
        }
    }
    found
}

/// A field's own value rules as clauses ("asset.symbol is one of …"), its nested rules
/// under its name.
fn clauses_of_field(property: &Value, field: &str) -> Vec<String> {
    let mut found = clauses(property, field);
    if let Some(object) = property.as_object() {
        let plain: Map<String, Value> = object
            .iter()
            .filter(|(k, _)| {
                !matches!(
                    k.as_str(),
                    "const" | "enum" | "properties" | "required" | "not" | "anyOf" | "oneOf"
                )
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        found.extend(
            rules(&plain)
                .into_iter()
                .map(|rule| format!("{field}: {rule}")),
        );
    }
    found
}

/// The negation of a constraint schema as a clause.
fn negation(schema: &Value, at: &str) -> String {
    let Some(object) = schema.as_object() else {
        return String::new();
    };
    // "not required [a]" and "not anyOf [required a, required b]": fields that are absent.
    let absent = |schema: &Value| -> Option<Vec<String>> {
        let object = schema.as_object()?;
        if object.len() != 1 {
            return None;
        }
        let names = object.get("required")?.as_array()?;
        Some(
            names
                .iter()
                .filter_map(Value::as_str)
                .map(|name| joined(at, name))
                .collect(),
        )
    };
    if let Some(names) = absent(schema) {
        return match names.as_slice() {
            [one] => format!("{one} is not given"),
            many => format!("not all of {} are given", and_list(many)),
        };
    }
    if object.len() == 1
        && let Some(variants) = object.get("anyOf").and_then(Value::as_array)
        && let Some(names) = variants
            .iter()
            .map(|v| absent(v).filter(|n| n.len() == 1))
            .collect::<Option<Vec<Vec<String>>>>()
    {
        let names: Vec<String> = names.into_iter().flatten().collect();
        return match names.as_slice() {
            [one] => format!("{one} is not given"),
            [a, b] => format!("neither {a} nor {b} is given"),
            many => format!("none of {} is given", many.join(", ")),
        };
    }
    let inner = clauses(schema, at);
    match inner.as_slice() {
        [one] => format!("never {one}"),
        [a, b] => format!("never both {a} and {b}"),
        many => format!("never all of: {}", many.join(", ")),
    }
}

fn subject(at: &str) -> &str {
    if at.is_empty() { "the body" } else { at }
}

fn joined(at: &str, name: &str) -> String {
    if at.is_empty() {
        name.to_string()
    } else {
        format!("{at}.{name}")
    }
}

fn and_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nested_schemas_flatten_into_readable_rows() {
        let schema = json!({
            "type": "object",
            "required": ["url"],
            "additionalProperties": false,
            "properties": {
                "url": {"type": "string", "format": "uri", "maxLength": 2048, "description": "Page."},
                "tags": {"type": "array", "maxItems": 3, "items": {"type": "string", "enum": ["a", "b"]}},
                "asset": {"oneOf": [
                    {"type": "object", "properties": {"kind": {"const": "erc20"}}},
                    {"type": ["string", "null"]},
                ]},
            },
        });
        let rows = schema_rows(&schema);
        let fields: Vec<&str> = rows.iter().map(|r| r.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "url",
                "tags",
                "tags[]",
                "asset",
                "asset (variant 1)",
                "asset (variant 1).kind",
                "asset (variant 2)"
            ]
        );
        assert_eq!(rows[0].kind, "string (uri)");
        assert!(rows[0].required);
        assert_eq!(rows[0].rules, ["at most 2048 characters"]);
        assert!(!rows[1].required);
        assert_eq!(rows[2].rules, ["one of: a, b"]);
        assert_eq!(rows[5].rules, ["always erc20"]);
        assert_eq!(rows[6].kind, "string or null");
    }

    #[test]
    fn rules_across_fields_read_as_sentences() {
        let schema = json!({
            "type": "object",
            "properties": {
                "chain_id": {"type": "integer", "enum": [1, 8453]},
                "asset": {
                    "type": "object",
                    "properties": {
                        "kind": {"type": "string", "enum": ["native", "erc20"]},
                        "address": {"type": "string", "not": {"const": "0x00"}},
                        "symbol": {"type": "string"},
                    },
                    "oneOf": [
                        {"properties": {"kind": {"const": "native"}},
                         "not": {"anyOf": [{"required": ["address"]}, {"required": ["symbol"]}]}},
                        {"properties": {"kind": {"const": "erc20"}},
                         "required": ["address"], "not": {"required": ["symbol"]}},
                    ],
                },
                "method": {"type": "string", "enum": ["GET", "POST"]},
                "body": {"type": "object"},
            },
            "oneOf": [
                {"properties": {"chain_id": {"const": 1}}},
                {"properties": {"chain_id": {"const": 8453},
                    "asset": {"properties": {"symbol": {"enum": ["ETH", "USDC"]}}}}},
            ],
            "not": {"properties": {"method": {"const": "GET"}}, "required": ["body"]},
        });
        let rows = schema_rows(&schema);
        assert!(
            rows.iter().all(|r| !r.field.contains("variant")),
            "constraint-only variants are no rows: {rows:?}"
        );
        let asset = rows.iter().find(|r| r.field == "asset").expect("asset row");
        assert_eq!(
            asset.rules,
            [
                "by asset.kind: when native, neither asset.address nor asset.symbol is given; \
                 when erc20, asset.address is given and asset.symbol is not given"
            ]
        );
        let address = rows
            .iter()
            .find(|r| r.field == "asset.address")
            .expect("row");
        assert_eq!(address.rules, ["never 0x00"]);
        assert_eq!(
            sentences(combined_rules(&schema, "")),
            [
                "By chain_id: when 1, no further rule; when 8453, asset.symbol is one of ETH, USDC.",
                "Never both method is GET and body is given.",
            ]
        );
        for rule in rows.iter().flat_map(|r| &r.rules) {
            assert!(!rule.contains('{'), "no raw JSON: {rule}");
        }
    }

    #[test]
    fn shell_words_survive_single_quotes() {
        assert_eq!(shell_quote(r#"{"a":"it's"}"#), r#"'{"a":"it'\''s"}'"#);
    }
}
