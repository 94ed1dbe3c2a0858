//! The machines.yaml manifest: its types and the consistency checks the build runs.
//!
//! This module is compiled twice: by `build.rs` (which fails the build on any error, naming
//! the machine and field) and by the library (so tests can feed it broken manifests and the
//! engine can read the manifest the build embedded). Keep it free of engine dependencies.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The eleven machine ids, in catalog order.
pub(crate) const MACHINE_IDS: [&str; 11] = [
    "VM01", "VM02", "VM03", "VM04", "VM05", "VM06", "VM07", "VM08", "VM09", "VM10", "VM11",
];

/// The parsed machines.yaml.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The service block (name, versions, notes).
    pub service: Service,
    /// The payment terms every machine shares.
    pub payment: Payment,
    /// The machine families.
    pub families: Vec<Family>,
    /// The machines, in catalog order.
    pub machines: Vec<Machine>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Service {
    pub name: String,
    pub title: String,
    pub description: String,
    pub catalog_version: String,
    pub api_version: String,
    pub status: String,
    pub family_wallet_note: String,
    pub rediscovery_note: String,
    pub default_max_request_bytes: u64,
    /// Cache-Control max-age of the free documents (catalog, OpenAPI, llms.txt, storefront).
    pub free_document_max_age_seconds: u64,
    /// Who answers for the service (OpenAPI `info.contact`).
    pub contact: Contact,
    /// One paragraph for agents (OpenAPI `info.x-guidance`); llms.txt has the long form.
    pub guidance: String,
    /// What no machine ever does, stated to people on every storefront machine page.
    pub never: Vec<String>,
    /// How indexes (the CDP Bazaar) show the service: the default of every machine.
    pub listing: Listing,
}

/// Listing metadata on the 402's `resource` (bazaar spec, "Service Metadata on `resource`"):
/// `serviceName`, `tags`, `iconUrl`. A machine's own values replace the service's.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Listing {
    /// `resource.serviceName`: printable ASCII, at most [`MAX_SERVICE_NAME_CHARS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// `resource.tags`: at most [`MAX_TAGS`], each printable ASCII of at most
    /// [`MAX_SERVICE_NAME_CHARS`], distinct in any letter case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
    /// `resource.iconUrl`: a path the service serves as a free document (the base URL is
    /// prepended) or an absolute https URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icon: Option<String>,
}

/// CDP's `/verify` fails on a `resource.description` longer than this.
pub(crate) const MAX_DESCRIPTION_CHARS: usize = 500;
/// Longest `serviceName` (and tag) the bazaar keeps.
pub(crate) const MAX_SERVICE_NAME_CHARS: usize = 32;
/// Most tags the bazaar keeps.
pub(crate) const MAX_TAGS: usize = 5;
/// Largest output example (compact JSON bytes) the bazaar declaration carries; a larger one
/// fails the build rather than being cut into something its schema refuses.
pub(crate) const MAX_OUTPUT_EXAMPLE_BYTES: usize = 8192;

/// The operator's contact, as OpenAPI's Contact object.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contact {
    pub name: String,
    pub email: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Payment {
    pub protocol: String,
    pub x402_version: u8,
    pub scheme: String,
    pub network: String,
    pub asset: String,
    pub asset_symbol: String,
    pub decimals: u32,
    pub eip712_name: String,
    pub eip712_version: String,
    pub max_timeout_seconds: u64,
    pub request_header: String,
    pub challenge_header: String,
    pub response_header: String,
    pub note: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Family {
    pub family: String,
    pub label: String,
    pub machines: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Unsupported {
    pub field: String,
    pub code: String,
    pub reason: String,
}

/// One machine of the manifest.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Machine {
    /// The machine id (`VM01`).
    pub machine: String,
    /// Its family id.
    pub family: String,
    /// Its name.
    pub name: String,
    /// What it observes, in one sentence.
    pub purpose: String,
    /// When an agent should call it.
    pub when_to_call: String,
    /// The OpenAPI operationId.
    #[serde(rename = "operationId")]
    pub operation_id: String,
    /// The HTTP method of its route.
    pub method: String,
    /// Its route.
    pub path: String,
    /// Its price in USDC.
    pub price: String,
    /// Its price in atomic units.
    pub price_atomic: String,
    /// The methodology version its responses carry.
    pub methodology_version: String,
    /// Related machine ids.
    pub related: Vec<String>,
    /// Fields callers may try that it does not support, with their codes.
    pub unsupported: Vec<Unsupported>,
    /// Frozen value sets (symbols, venues, contracts).
    pub allowlists: serde_json::Map<String, Value>,
    /// Numeric limits (sizes, timeouts, counts).
    pub limits: serde_json::Map<String, Value>,
    /// Its freshness statement.
    pub freshness: Value,
    /// What evidence its responses carry.
    pub evidence: Vec<String>,
    /// The request's JSON Schema.
    pub input_schema: Value,
    /// A valid request.
    pub input_example: Value,
    /// The response's JSON Schema.
    pub output_schema: Value,
    /// A response.
    pub output_example: Value,
    /// Listing metadata of this machine, replacing the service's field by field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listing: Option<Listing>,
}

/// The longest paid work a machine may take: with `/verify`'s 10 s and a 10 s settle margin
/// it fits the official clients' 60 s authorization window (docs/payment.md).
pub(crate) const MAX_OVERALL_TIMEOUT_MS: u64 = 20_000;

impl Machine {
    /// An integer limit from `limits`, if the manifest sets it.
    pub fn limit(&self, name: &str) -> Option<u64> {
        self.limits.get(name).and_then(Value::as_u64)
    }

    /// The machine's `overall_timeout_ms`: its paid work's budget, which the payment window
    /// must hold (the manifest check requires it on every machine, at most 20 s).
    pub fn overall_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(
            self.limit("overall_timeout_ms")
                .unwrap_or(MAX_OVERALL_TIMEOUT_MS),
        )
    }

    /// The schema component name stem, e.g. `Vm01UrlContext` for `postVm01UrlContext`.
    pub fn schema_stem(&self) -> String {
        let stem = self
            .operation_id
            .strip_prefix("post")
            .unwrap_or(&self.operation_id);
        stem.to_string()
    }
}

impl Manifest {
    /// Parses YAML text. Parse errors are reported against the file as a whole.
    pub fn from_yaml(text: &str) -> Result<Manifest, ManifestError> {
        serde_norway::from_str(text).map_err(|err| ManifestError::file(err.to_string()))
    }

    /// Parses and checks; every inconsistency is returned, not only the first.
    pub fn load(text: &str) -> Result<Manifest, Vec<ManifestError>> {
        let manifest = Manifest::from_yaml(text).map_err(|e| vec![e])?;
        let errors = manifest.check();
        if errors.is_empty() {
            Ok(manifest)
        } else {
            Err(errors)
        }
    }

    /// The machine of an id.
    pub fn machine(&self, id: &str) -> Option<&Machine> {
        self.machines.iter().find(|m| m.machine == id)
    }

    /// A machine's listing metadata: its own fields, else the service's.
    pub fn listing(&self, machine: &Machine) -> Listing {
        let own = machine.listing.clone().unwrap_or_default();
        let service = &self.service.listing;
        Listing {
            service_name: own.service_name.or_else(|| service.service_name.clone()),
            tags: own.tags.or_else(|| service.tags.clone()),
            icon: own.icon.or_else(|| service.icon.clone()),
        }
    }

    /// A machine's request size limit (its own, or the service default).
    pub fn max_request_bytes(&self, machine: &Machine) -> u64 {
        machine
            .limit("max_request_bytes")
            .unwrap_or(self.service.default_max_request_bytes)
    }

    /// All consistency checks. An empty vector means the manifest is usable.
    pub fn check(&self) -> Vec<ManifestError> {
        let mut errors = Vec::new();
        self.check_machine_set(&mut errors);
        self.check_unique("path", |m| &m.path, &mut errors);
        self.check_unique("operationId", |m| &m.operation_id, &mut errors);
        self.check_families(&mut errors);
        for machine in &self.machines {
            self.check_machine(machine, &mut errors);
            for (field, problem) in listing_problems(machine, &self.listing(machine)) {
                errors.push(ManifestError::at(&machine.machine, field, problem));
            }
        }
        errors
    }

    fn check_machine_set(&self, errors: &mut Vec<ManifestError>) {
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        for machine in &self.machines {
            *seen.entry(machine.machine.as_str()).or_default() += 1;
            if !MACHINE_IDS.contains(&machine.machine.as_str()) {
                errors.push(ManifestError::at(
                    &machine.machine,
                    "machine",
                    "is not one of VM01..VM11",
                ));
            }
        }
        for id in MACHINE_IDS {
            match seen.get(id).copied().unwrap_or(0) {
                0 => errors.push(ManifestError::at(id, "machine", "is missing")),
                1 => {}
                n => errors.push(ManifestError::at(
                    id,
                    "machine",
                    format!("appears {n} times; each machine must appear once"),
                )),
            }
        }
        let order: Vec<&str> = self.machines.iter().map(|m| m.machine.as_str()).collect();
        if errors.is_empty() && order != MACHINE_IDS {
            errors.push(ManifestError::file(format!(
                "machines must be listed in order VM01..VM11, found {}",
                order.join(", ")
            )));
        }
    }

    fn check_unique(
        &self,
        field: &str,
        key: impl Fn(&Machine) -> &String,
        errors: &mut Vec<ManifestError>,
    ) {
        let mut owners: BTreeMap<&str, &str> = BTreeMap::new();
        for machine in &self.machines {
            let value = key(machine).as_str();
            if let Some(first) = owners.insert(value, &machine.machine) {
                errors.push(ManifestError::at(
                    &machine.machine,
                    field,
                    format!("{value:?} collides with {first}"),
                ));
            }
        }
    }

    fn check_families(&self, errors: &mut Vec<ManifestError>) {
        let mut family_of: BTreeMap<&str, &str> = BTreeMap::new();
        for family in &self.families {
            for member in &family.machines {
                match self.machine(member) {
                    None => errors.push(ManifestError::family(
                        &family.family,
                        format!("names {member}, which is not in the manifest"),
                    )),
                    Some(machine) if machine.family != family.family => {
                        errors.push(ManifestError::family(
                            &family.family,
                            format!("names {member}, whose family is {}", machine.family),
                        ))
                    }
                    Some(_) => {}
                }
                if let Some(other) = family_of.insert(member, &family.family) {
                    errors.push(ManifestError::family(
                        &family.family,
                        format!("names {member}, already a member of {other}"),
                    ));
                }
            }
        }
        for machine in &self.machines {
            if !family_of.contains_key(machine.machine.as_str()) {
                errors.push(ManifestError::at(
                    &machine.machine,
                    "family",
                    format!("{} does not list this machine", machine.family),
                ));
            }
        }
    }

    fn check_machine(&self, machine: &Machine, errors: &mut Vec<ManifestError>) {
        let id = machine.machine.as_str();
        let mut push = |field: &str, message: String| {
            errors.push(ManifestError::at(id, field, message));
        };
        let baseline_version = machine
            .input_schema
            .pointer("/properties/baseline/properties/methodology_version");
        if let Some(field) = baseline_version
            && field.get("const").and_then(Value::as_str) != Some(&machine.methodology_version)
        {
            push(
                "input_schema.baseline.methodology_version",
                format!(
                    "must be const {:?}: a baseline is accepted only from this methodology",
                    machine.methodology_version
                ),
            );
        }
        for problem in symbols_per_chain_problems(machine) {
            push("allowlists.symbols", problem);
        }
        match machine.limit("overall_timeout_ms") {
            Some(ms) if (1..=MAX_OVERALL_TIMEOUT_MS).contains(&ms) => {}
            _ => push(
                "limits.overall_timeout_ms",
                format!("is required, from 1 to {MAX_OVERALL_TIMEOUT_MS} ms"),
            ),
        }
        if let Some(limit) = machine.limits.get("max_request_bytes")
            && limit.as_u64().is_none_or(|n| n == 0)
        {
            push(
                "limits.max_request_bytes",
                "must be a positive integer".into(),
            );
        }
        self.check_route_and_price(machine, &mut push);
        self.check_related(machine, &mut push);
        check_examples(machine, &mut push);
    }

    /// The route, the methodology and the price: POST under /v1/, a named methodology, and
    /// an atomic price that is the price at the payment's decimals.
    fn check_route_and_price(&self, machine: &Machine, push: &mut impl FnMut(&str, String)) {
        if machine.method != "POST" {
            push(
                "method",
                format!("{:?}: paid machines are POST", machine.method),
            );
        }
        if !machine.path.starts_with("/v1/") {
            push("path", format!("{:?} must start with /v1/", machine.path));
        }
        if machine.methodology_version.trim().is_empty() {
            push("methodology_version", "is empty".into());
        }
        match price_to_atomic(&machine.price, self.payment.decimals) {
            Ok(atomic) if atomic.to_string() == machine.price_atomic => {}
            Ok(atomic) => push(
                "price_atomic",
                format!(
                    "{:?} disagrees with price {:?} (= {atomic} atomic units at {} decimals)",
                    machine.price_atomic, machine.price, self.payment.decimals
                ),
            ),
            Err(why) => push("price", format!("{:?}: {why}", machine.price)),
        }
    }

    /// `related` names other machines of the same family only.
    fn check_related(&self, machine: &Machine, push: &mut impl FnMut(&str, String)) {
        for related in &machine.related {
            match self.machine(related) {
                None => push(
                    "related",
                    format!("names {related}, which is not in the manifest"),
                ),
                Some(_) if *related == machine.machine => {
                    push("related", "names the machine itself".into())
                }
                Some(other) if other.family != machine.family => push(
                    "related",
                    format!("names {related} of family {}; only siblings", other.family),
                ),
                Some(_) => {}
            }
        }
    }
}

/// Each schema is a valid JSON Schema in our dialect, and each example passes its schema.
fn check_examples(machine: &Machine, push: &mut impl FnMut(&str, String)) {
    for (schema_field, example_field) in [
        ("input_schema", "input_example"),
        ("output_schema", "output_example"),
    ] {
        let (schema, example) = match schema_field {
            "input_schema" => (&machine.input_schema, &machine.input_example),
            _ => (&machine.output_schema, &machine.output_example),
        };
        for problem in dialect_problems(schema, "") {
            push(schema_field, problem);
        }
        match compile_schema(schema) {
            Err(why) => push(schema_field, format!("is not a valid JSON Schema: {why}")),
            Ok(validator) => {
                for error in validator.iter_errors(example) {
                    let at = error.instance_path().as_str().to_string();
                    push(
                        example_field,
                        format!("fails its own schema at {:?}: {error}", display_path(&at)),
                    );
                }
            }
        }
    }
}

/// What the CDP Bazaar would refuse or drop in a machine's listing: a description over
/// [`MAX_DESCRIPTION_CHARS`] (its `/verify` fails), a serviceName or tag that is not short
/// printable ASCII, more than [`MAX_TAGS`] tags, an icon that is neither a served path nor an
/// https URL, an output example over [`MAX_OUTPUT_EXAMPLE_BYTES`].
fn listing_problems(machine: &Machine, listing: &Listing) -> Vec<(&'static str, String)> {
    let mut problems = Vec::new();
    let chars = machine.purpose.chars().count();
    if chars > MAX_DESCRIPTION_CHARS {
        problems.push((
            "purpose",
            format!("is resource.description: {chars} characters, at most {MAX_DESCRIPTION_CHARS}"),
        ));
    }
    let short_ascii = |text: &str| {
        !text.is_empty()
            && text.len() <= MAX_SERVICE_NAME_CHARS
            && text.bytes().all(|b| (0x20..=0x7e).contains(&b))
    };
    if let Some(name) = &listing.service_name
        && !short_ascii(name)
    {
        problems.push((
            "listing.service_name",
            format!("{name:?} must be 1 to {MAX_SERVICE_NAME_CHARS} printable ASCII characters"),
        ));
    }
    let tags = listing.tags.as_deref().unwrap_or_default();
    if tags.len() > MAX_TAGS {
        problems.push((
            "listing.tags",
            format!("{} tags, at most {MAX_TAGS}", tags.len()),
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for tag in tags {
        if !short_ascii(tag) {
            problems.push((
                "listing.tags",
                format!("{tag:?} must be 1 to {MAX_SERVICE_NAME_CHARS} printable ASCII characters"),
            ));
        }
        if !seen.insert(tag.to_ascii_lowercase()) {
            problems.push(("listing.tags", format!("{tag:?} appears twice")));
        }
    }
    if let Some(icon) = &listing.icon
        && !(icon.starts_with('/') || icon.starts_with("https://"))
    {
        problems.push((
            "listing.icon",
            format!("{icon:?} must be a served path (/…) or an https URL"),
        ));
    }
    let example = serde_json::to_vec(&machine.output_example).map_or(0, |v| v.len());
    if example > MAX_OUTPUT_EXAMPLE_BYTES {
        problems.push((
            "output_example",
            format!("is {example} bytes of JSON; the bazaar declaration carries at most {MAX_OUTPUT_EXAMPLE_BYTES}"),
        ));
    }
    problems
}

/// A machine that allowlists symbols per chain (`allowlists.symbols`, VM04) states the same
/// lists in its request schema — a top-level `oneOf` case per `chain_id` narrowing
/// `asset.symbol`, the field's own enum being their union — and names a contract (or null
/// for the native asset) for each in `allowlists.assets`. The server checks the allowlist;
/// the published schema must not drift from it.
fn symbols_per_chain_problems(machine: &Machine) -> Vec<String> {
    let Some(allowed) = machine.allowlists.get("symbols") else {
        return Vec::new();
    };
    let Some(allowed) = allowed.as_object() else {
        return vec!["must map each chain id to its symbols".into()];
    };
    let schema = &machine.input_schema;
    let Some(all) = symbol_enum(schema) else {
        return vec!["is set but input_schema has no asset.symbol enum".into()];
    };
    let cases = schema
        .get("oneOf")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut problems = Vec::new();
    let mut union = Vec::new();
    for (chain, symbols) in allowed {
        let listed = strings(symbols);
        problems.extend(one_chains_problems(machine, cases, &all, chain, &listed));
        union.extend(listed);
    }
    if sorted_set(all.clone()) != sorted_set(union) {
        problems.push(format!(
            "input_schema's asset.symbol enum {all:?} is not the union of the per-chain lists"
        ));
    }
    problems
}

/// One chain's symbols against its `oneOf` case (whose enum, when it states none, is the
/// field's own `all`) and against the contracts `allowlists.assets` names for it.
fn one_chains_problems(
    machine: &Machine,
    cases: &[Value],
    all: &[String],
    chain: &str,
    listed: &[String],
) -> Vec<String> {
    let case = cases.iter().find(|case| {
        case.pointer("/properties/chain_id/const")
            .map(Value::to_string)
            .is_some_and(|id| id.trim_matches('"') == chain)
    });
    let Some(case) = case else {
        return vec![format!(
            "chain {chain}: input_schema has no oneOf case with chain_id const {chain}"
        )];
    };
    let mut problems = Vec::new();
    let stated = symbol_enum(case).unwrap_or_else(|| all.to_vec());
    if sorted_set(stated.clone()) != sorted_set(listed.to_vec()) {
        problems.push(format!(
            "chain {chain}: lists {listed:?} but input_schema's chain_id {chain} case states {stated:?}"
        ));
    }
    let contracts = machine
        .allowlists
        .get("assets")
        .and_then(|assets| assets.get(chain))
        .and_then(Value::as_object);
    if let Some(contracts) = contracts {
        let named: Vec<String> = contracts.keys().cloned().collect();
        if sorted_set(named.clone()) != sorted_set(listed.to_vec()) {
            problems.push(format!(
                "chain {chain}: lists {listed:?} but allowlists.assets names {named:?}"
            ));
        }
    }
    problems
}

/// The `asset.symbol` enum a schema (or one of its `oneOf` cases) states.
fn symbol_enum(at: &Value) -> Option<Vec<String>> {
    Some(strings(
        at.pointer("/properties/asset/properties/symbol/enum")?,
    ))
}

/// The strings of a JSON array; nothing for anything else.
fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|item| item.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn sorted_set(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names.dedup();
    names
}

fn display_path(pointer: &str) -> &str {
    if pointer.is_empty() { "/" } else { pointer }
}

/// Compiles a schema with the dialect the engine validates with (2020-12, formats as
/// annotations only — URL rules are enforced in code).
pub fn compile_schema(
    schema: &Value,
) -> Result<jsonschema::Validator, jsonschema::ValidationError<'static>> {
    compile_schema_for(schema)
}

/// [`compile_schema`] for instances held in another representation than `serde_json::Value`.
pub(crate) fn compile_schema_for<F: jsonschema::json::Json>(
    schema: &Value,
) -> Result<jsonschema::Validator<F>, jsonschema::ValidationError<'static>> {
    jsonschema::options_for::<F>()
        .with_draft(jsonschema::Draft::Draft202012)
        .should_validate_formats(false)
        .build(schema)
}

/// Keywords that have no OpenAPI 3.0 equivalent; the renderer could not convert them.
const FORBIDDEN_KEYWORDS: [&str; 11] = [
    "$ref",
    "prefixItems",
    "patternProperties",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "unevaluatedProperties",
    "unevaluatedItems",
    "examples",
];

/// Reports schema constructs outside the OpenAPI-3.0-convertible subset.
fn dialect_problems(schema: &Value, at: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let Value::Object(map) = schema else {
        return problems;
    };
    for keyword in FORBIDDEN_KEYWORDS {
        if map.contains_key(keyword) {
            problems.push(format!("uses {keyword:?} at {:?}", display_path(at)));
        }
    }
    if let Some(Value::Array(types)) = map.get("type") {
        let nullable_pair = types.len() == 2
            && types.iter().filter(|t| t.as_str() == Some("null")).count() == 1
            && types.iter().all(Value::is_string);
        if !nullable_pair {
            problems.push(format!(
                "type list at {:?} must be [T, \"null\"]",
                display_path(at)
            ));
        }
    }
    for (key, child) in map {
        match key.as_str() {
            "properties" => {
                if let Value::Object(props) = child {
                    for (name, sub) in props {
                        problems.extend(dialect_problems(sub, &format!("{at}/properties/{name}")));
                    }
                }
            }
            "items" | "additionalProperties" | "not" => {
                problems.extend(dialect_problems(child, &format!("{at}/{key}")));
            }
            "oneOf" | "anyOf" | "allOf" => {
                if let Value::Array(subs) = child {
                    for (i, sub) in subs.iter().enumerate() {
                        problems.extend(dialect_problems(sub, &format!("{at}/{key}/{i}")));
                    }
                }
            }
            _ => {}
        }
    }
    problems
}

/// Converts a `$0.01`-style USD price to atomic units at `decimals`, exactly (no floats).
pub(crate) fn price_to_atomic(price: &str, decimals: u32) -> Result<u128, PriceError> {
    let digits = price.strip_prefix('$').ok_or(PriceError::NoDollarSign)?;
    let (whole, frac) = digits.split_once('.').unwrap_or((digits, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !all_digits(whole) || !all_digits(frac) {
        return Err(PriceError::NotDecimal);
    }
    if frac.len() > decimals as usize {
        return Err(PriceError::TooPrecise(decimals));
    }
    let scale = 10u128.pow(decimals);
    let whole: u128 = whole.parse().map_err(|_| PriceError::TooLarge)?;
    let padded = format!("{frac:0<width$}", width = decimals as usize);
    let frac: u128 = if padded.is_empty() {
        0
    } else {
        padded.parse().map_err(|_| PriceError::NotDecimal)?
    };
    whole
        .checked_mul(scale)
        .and_then(|w| w.checked_add(frac))
        .ok_or(PriceError::TooLarge)
}

/// Why a manifest price is not a USD amount the payment asset can carry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PriceError {
    #[error("must start with '$'")]
    NoDollarSign,
    #[error("must be a decimal number such as $0.01")]
    NotDecimal,
    #[error("has more than {0} decimal places")]
    TooPrecise(u32),
    #[error("is too large")]
    TooLarge,
}

/// One manifest inconsistency, located by machine (or family) and field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ManifestError {
    /// The machine (or family) the problem is in.
    pub machine: Option<String>,
    /// The field.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl ManifestError {
    /// A problem at a machine's field.
    pub fn at(machine: &str, field: &str, message: impl Into<String>) -> Self {
        ManifestError {
            machine: Some(machine.to_string()),
            field: field.to_string(),
            message: message.into(),
        }
    }

    fn family(family: &str, message: impl Into<String>) -> Self {
        ManifestError {
            machine: None,
            field: format!("families.{family}"),
            message: message.into(),
        }
    }

    fn file(message: impl Into<String>) -> Self {
        ManifestError {
            machine: None,
            field: String::new(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.machine, self.field.is_empty()) {
            (Some(machine), _) => write!(
                f,
                "machines.yaml: {machine}.{}: {}",
                self.field, self.message
            ),
            (None, false) => write!(f, "machines.yaml: {}: {}", self.field, self.message),
            (None, true) => write!(f, "machines.yaml: {}", self.message),
        }
    }
}
