//! Body → JSON → schema: the structural half of request checking, shared by every machine.
//!
//! Schema failures become one HTTP 400 with a stable code. When several things are wrong the
//! most useful one is reported: a body that is not an object, then a field we do not accept
//! (named by the manifest's `unsupported[]` when it lists it), then a missing field, then a
//! wrong type, then value rules.

use jsonschema::error::ValidationErrorKind;
use serde_json::{Map, Value};

use crate::catalog::manifest::{Machine, compile_schema_for};
use crate::http::error::ApiError;
use crate::support::json_doc::{Doc, DocJson};

const ADDRESS_PATTERN: &str = "^0x[0-9a-fA-F]{40}$";
const UINT_PATTERN: &str = "^(0|[1-9][0-9]*)$";
const SHA256_PATTERN: &str = "^[0-9a-f]{64}$";
const HEX_PATTERN: &str = "^0x(?:[0-9a-fA-F]{2})*$";
const MAX_MESSAGE_CHARS: usize = 240;

/// A machine's input schema that does not compile: a manifest bug, found at start-up.
#[derive(Debug, thiserror::Error)]
#[error("{machine}.input_schema: {message}")]
pub(crate) struct SchemaError {
    machine: String,
    message: String,
}

/// A machine's compiled input validator.
pub(crate) struct RequestValidator {
    validator: jsonschema::Validator<DocJson>,
    /// The same schema with only its structural rules (see [`structural_rules`]); `None` when
    /// the schema uses a keyword those rules do not classify.
    structure: Option<jsonschema::Validator<DocJson>>,
    unsupported: Vec<(String, String)>,
}

impl RequestValidator {
    /// Compiles the machine's input schema.
    pub(crate) fn new(machine: &Machine) -> Result<RequestValidator, SchemaError> {
        let validator = compile_schema_for(&machine.input_schema).map_err(|error| SchemaError {
            machine: machine.machine.clone(),
            message: error.to_string(),
        })?;
        let structure = match structural_rules(&machine.input_schema) {
            Some(rules) => Some(compile_schema_for(&rules).map_err(|error| SchemaError {
                machine: machine.machine.clone(),
                message: format!("its structural rules: {error}"),
            })?),
            None => None,
        };
        let unsupported = machine
            .unsupported
            .iter()
            .map(|u| (u.field.clone(), u.code.clone()))
            .collect();
        Ok(RequestValidator {
            validator,
            structure,
            unsupported,
        })
    }

    /// Checks a parsed request against the machine's input schema. A request that breaks
    /// only rules the schema states as combinations (`oneOf`, `anyOf`, `not`, `const`: an
    /// asset kind's fields, a chain's symbols, the zero address, a baseline's methodology)
    /// gives `Ok(Some(error))`: the machine's checks name those rules precisely, so the caller
    /// runs them first and reports this error only when they pass.
    pub(crate) fn validate(&self, request: &Doc<'_>) -> Result<Option<ApiError>, ApiError> {
        let Some(members) = request.as_object() else {
            return Err(ApiError::bad_request(
                "invalid_body",
                "the request body must be a JSON object",
            ));
        };
        if members.is_empty() {
            return Err(ApiError::bad_request(
                "empty_request",
                "the request object is empty; see the machine's input_example in /v1/catalog",
            ));
        }
        // A valid request takes the validator's fast path: no error value is built (its
        // `validate` costs more on a valid request). An invalid one builds its first error,
        // and all of them are built and ranked unless that one is known to be the answer.
        if self.validator.is_valid(request) {
            return Ok(None);
        }
        let Err(first) = self.validator.validate(request) else {
            return Ok(None);
        };
        let best = if self.is_most_useful(&first, request) {
            Some(first)
        } else {
            self.most_useful_error(request)
        };
        match best {
            Some(error) if rank(error.kind()) == DEFERRED_RANK => {
                Ok(Some(self.to_api_error(&error)))
            }
            Some(error) => Err(self.to_api_error(&error)),
            None => Ok(None),
        }
    }

    /// Whether `first`, the first error in the validator's order, is the one ranking would
    /// report: it breaks a value rule and the request breaks no structural rule, so every
    /// other error ranks with it or after it, and ranking keeps the first of the lowest rank.
    /// (jsonschema's `validate` returns the first error `iter_errors` gives, except that an
    /// unknown field's error comes where the field is rather than after its object's other
    /// errors: the structural check rules that error out. A unit test holds this answer to
    /// the full ranking's on faulty bodies of every machine.) This spares the common invalid
    /// request, one bad value, the building and ranking of every error.
    fn is_most_useful(&self, first: &jsonschema::ValidationError<'_>, request: &Doc<'_>) -> bool {
        rank(first.kind()) == VALUE_RULE_RANK
            && self
                .structure
                .as_ref()
                .is_some_and(|structure| structure.is_valid(request))
    }

    /// The first of the errors that rank first, found by building them all. Ranking is on
    /// the error kind alone; only the reported error is formatted.
    fn most_useful_error<'i>(
        &'i self,
        request: &'i Doc<'i>,
    ) -> Option<jsonschema::ValidationError<'i>> {
        self.validator
            .iter_errors(request)
            .min_by_key(|error| rank(error.kind()))
    }

    fn to_api_error(&self, error: &jsonschema::ValidationError<'_>) -> ApiError {
        let at = error.instance_path().as_str();
        let field = if at.is_empty() { "/" } else { at }.to_string();
        let last = || at.rsplit('/').next().unwrap_or("");
        // jsonschema's own wording, formatted only for the kinds that report it.
        let message = || shorten(&error.to_string());
        match error.kind() {
            ValidationErrorKind::AdditionalProperties { unexpected } => {
                self.unexpected_field(at, unexpected.first().cloned().unwrap_or_default())
            }
            ValidationErrorKind::Required { property } => {
                let name = property.as_str().unwrap_or_default();
                ApiError::invalid_field(
                    "missing_field",
                    format!("{at}/{name}"),
                    format!("required field {name:?} is missing"),
                )
            }
            ValidationErrorKind::Type { .. } => {
                ApiError::invalid_field("invalid_type", field, message())
            }
            ValidationErrorKind::Enum { .. } | ValidationErrorKind::Constant { .. } => {
                ApiError::invalid_field(value_outside_list(at), field, message())
            }
            ValidationErrorKind::Pattern { pattern } => match known_pattern(pattern) {
                Some((code, wanted)) => {
                    let message = field_must_be(&field, wanted);
                    ApiError::invalid_field(code, field, message)
                }
                None => ApiError::invalid_field("invalid_format", field, message()),
            },
            ValidationErrorKind::MaxLength { .. } if last() == "data" => {
                ApiError::invalid_field("calldata_too_large", field, message())
            }
            ValidationErrorKind::MaxLength { .. } => {
                ApiError::invalid_field("too_long", field, message())
            }
            ValidationErrorKind::MinLength { .. } => {
                ApiError::invalid_field("too_short", field, message())
            }
            ValidationErrorKind::MaxItems { .. } => {
                ApiError::invalid_field("too_many_items", field, message())
            }
            ValidationErrorKind::MinItems { .. } => {
                ApiError::invalid_field("too_few_items", field, message())
            }
            ValidationErrorKind::UniqueItems => {
                ApiError::invalid_field("duplicate_items", field, message())
            }
            ValidationErrorKind::Minimum { .. }
            | ValidationErrorKind::Maximum { .. }
            | ValidationErrorKind::ExclusiveMinimum { .. }
            | ValidationErrorKind::ExclusiveMaximum { .. } => {
                ApiError::invalid_field("out_of_range", field, message())
            }
            _ => ApiError::invalid_field("invalid_value", field, message()),
        }
    }

    /// A field the schema does not allow: at the top level, one the machine lists as
    /// unsupported gets that entry's code; any other is unknown.
    fn unexpected_field(&self, at: &str, name: String) -> ApiError {
        let pointer = format!("{at}/{name}");
        let listed = at
            .is_empty()
            .then(|| self.unsupported.iter().find(|(f, _)| *f == name))
            .flatten();
        match listed {
            Some((_, code)) => ApiError::invalid_field(
                code.clone(),
                pointer,
                format!("field {name:?} is not supported by this machine"),
            ),
            None => ApiError::invalid_field(
                "unknown_field",
                pointer,
                format!("field {name:?} is not accepted here; no other fields are allowed"),
            ),
        }
    }
}

/// The code of a value outside its field's enum or constant, named after the field at `at`.
fn value_outside_list(at: &str) -> &'static str {
    let mut segments = at.rsplit('/');
    let last = segments.next().unwrap_or("");
    let parent = segments.next();
    if matches!(last, "chain" | "chain_id" | "chains") || parent == Some("chains") {
        "unsupported_chain"
    } else if last == "symbol" {
        "unsupported_symbol"
    } else if last == "method" {
        "unsupported_method"
    } else {
        "invalid_value"
    }
}

/// "`field` must be `wanted`", written into one allocation of its exact size (`concat`
/// measured twice the cost on the 400 path).
fn field_must_be(field: &str, wanted: &str) -> String {
    const MUST_BE: &str = " must be ";
    let mut message = String::with_capacity(field.len() + MUST_BE.len() + wanted.len());
    message.push_str(field);
    message.push_str(MUST_BE);
    message.push_str(wanted);
    message
}

/// The code and plain description of a pattern the manifest's schemas share, so that its 400
/// says what is wanted rather than quoting a regular expression.
fn known_pattern(pattern: &str) -> Option<(&'static str, &'static str)> {
    match pattern {
        ADDRESS_PATTERN => Some(("invalid_address", "0x followed by 40 hexadecimal digits")),
        UINT_PATTERN => Some((
            "invalid_integer_string",
            "a non-negative integer in decimal digits, without leading zeros",
        )),
        SHA256_PATTERN => Some(("invalid_sha256", "64 lowercase hexadecimal digits")),
        HEX_PATTERN => Some((
            "invalid_hex",
            "0x followed by an even number of hexadecimal digits",
        )),
        _ => None,
    }
}

/// How useful an error is to report, lower first: a field we do not accept, then a missing
/// field, then a wrong type, then value rules.
fn rank(kind: &ValidationErrorKind) -> u8 {
    match kind {
        ValidationErrorKind::AdditionalProperties { .. } => 1,
        ValidationErrorKind::Required { .. } => 2,
        ValidationErrorKind::Type { .. } => 3,
        ValidationErrorKind::Enum { .. }
        | ValidationErrorKind::Pattern { .. }
        | ValidationErrorKind::MaxLength { .. }
        | ValidationErrorKind::MinLength { .. }
        | ValidationErrorKind::MaxItems { .. }
        | ValidationErrorKind::MinItems { .. }
        | ValidationErrorKind::UniqueItems
        | ValidationErrorKind::Minimum { .. }
        | ValidationErrorKind::Maximum { .. }
        | ValidationErrorKind::ExclusiveMinimum { .. }
        | ValidationErrorKind::ExclusiveMaximum { .. } => VALUE_RULE_RANK,
        ValidationErrorKind::Constant { .. }
        | ValidationErrorKind::Not { .. }
        | ValidationErrorKind::AnyOf { .. }
        | ValidationErrorKind::OneOfNotValid { .. }
        | ValidationErrorKind::OneOfMultipleValid { .. } => DEFERRED_RANK,
        _ => 5,
    }
}

/// The rank of errors from rules on a value (pattern, enumeration, length, bounds): after
/// every structural error.
const VALUE_RULE_RANK: u8 = 4;

/// The rank of errors from rules stated as combinations; reported after the machine's checks.
const DEFERRED_RANK: u8 = 6;

/// The schema's structural rules alone: which fields an object accepts and requires, and
/// each value's type, through `properties`, `additionalProperties`, `items` and `allOf`.
/// A request that passes them cannot give an error that ranks before a value rule's: only
/// `additionalProperties`, `required` and `type` give the kinds that do
/// (`AdditionalProperties`, `Required`, `Type`), and these are the only paths along which
/// jsonschema reports errors one by one (`not`, `oneOf` and `anyOf` each report one error of
/// their own, ranked last). `None` for a keyword outside this list, so that such a schema
/// always ranks every error.
fn structural_rules(schema: &Value) -> Option<Value> {
    let Value::Object(keywords) = schema else {
        return Some(schema.clone());
    };
    let mut kept = Map::new();
    for (keyword, value) in keywords {
        let rules = match keyword.as_str() {
            "type" | "required" => value.clone(),
            "properties" => {
                let Value::Object(fields) = value else {
                    return None;
                };
                let fields = fields
                    .iter()
                    .map(|(name, sub)| Some((name.clone(), structural_rules(sub)?)))
                    .collect::<Option<Map<_, _>>>()?;
                Value::Object(fields)
            }
            "additionalProperties" | "items" => structural_rules(value)?,
            "allOf" => {
                let Value::Array(subs) = value else {
                    return None;
                };
                Value::Array(subs.iter().map(structural_rules).collect::<Option<_>>()?)
            }
            "pattern" | "enum" | "const" | "format" | "minLength" | "maxLength" | "minItems"
            | "maxItems" | "uniqueItems" | "minimum" | "maximum" | "exclusiveMinimum"
            | "exclusiveMaximum" | "multipleOf" | "not" | "oneOf" | "anyOf" | "description"
            | "title" | "default" => continue,
            _ => return None,
        };
        kept.insert(keyword.clone(), rules);
    }
    Some(Value::Object(kept))
}

/// Parses a request body. An empty body and malformed JSON are distinct codes.
pub(crate) fn parse_json(body: &[u8]) -> Result<Doc<'_>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request(
            "empty_body",
            "the request body is empty; send a JSON object",
        ));
    }
    // UTF-8 checked once for the whole body, so the parser need not check each string.
    let text = std::str::from_utf8(body).map_err(|e| {
        ApiError::bad_request(
            "invalid_json",
            format!("the request body is not valid JSON: it is not UTF-8 ({e})"),
        )
    })?;
    Doc::parse(text).map_err(|e| {
        ApiError::bad_request(
            "invalid_json",
            format!("the request body is not valid JSON: {e}"),
        )
    })
}

fn shorten(message: &str) -> String {
    if message.chars().count() <= MAX_MESSAGE_CHARS {
        return message.to_string();
    }
    let mut short: String = message.chars().take(MAX_MESSAGE_CHARS).collect();
    short.push('…');
    short
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::catalog::embedded::MANIFEST;

    /// Every value's position in `value`, as a JSON pointer (the root's is "").
    fn positions(value: &Value, at: &str, found: &mut Vec<String>) {
        found.push(at.to_string());
        match value {
            Value::Object(members) => {
                for (name, member) in members {
                    positions(member, &format!("{at}/{name}"), found);
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    positions(item, &format!("{at}/{i}"), found);
                }
            }
            _ => {}
        }
    }

    /// One fault: a value replaced, a member or item removed, or an unknown member added.
    #[derive(Clone, Copy)]
    enum Fault {
        Replace(fn() -> Value),
        Remove,
        AddUnknown,
    }

    const FAULTS: [Fault; 13] = [
        Fault::Replace(|| Value::Null),
        Fault::Replace(|| json!(true)),
        Fault::Replace(|| json!(-1)),
        Fault::Replace(|| json!(1.5)),
        Fault::Replace(|| json!("")),
        Fault::Replace(|| json!("nobody")),
        Fault::Replace(|| json!(format!("0x{}", "g".repeat(40)))),
        Fault::Replace(|| json!("9".repeat(5000))),
        Fault::Replace(|| json!([])),
        Fault::Replace(|| json!({})),
        Fault::Replace(|| json!([1, 1])),
        Fault::Remove,
        Fault::AddUnknown,
    ];

    fn apply(body: &mut Value, at: &str, fault: Fault) {
        let (parent, last) = at.rsplit_once('/').unwrap_or(("", ""));
        match fault {
            Fault::Replace(value) => {
                if let Some(slot) = body.pointer_mut(at) {
                    *slot = value();
                }
            }
            Fault::Remove => match body.pointer_mut(parent) {
                Some(Value::Object(members)) => {
                    members.shift_remove(last);
                }
                Some(Value::Array(items)) => {
                    if let Some(i) = last.parse::<usize>().ok().filter(|i| *i < items.len()) {
                        items.remove(i);
                    }
                }
                _ => {}
            },
            Fault::AddUnknown => {
                if let Some(Value::Object(members)) = body.pointer_mut(at) {
                    members.insert("zz_not_a_field".to_string(), json!(1));
                }
            }
        }
    }

    /// Bodies with one fault anywhere in the example, and with two faults of a smaller set
    /// at any two positions (so that structural faults and bad values meet in either order).
    /// The examples leave optional subtrees out (VM03's `declared_holdings`, the baselines,
    /// VM08's `price_policy`); [`valid_bodies`] adds those the output example carries.
    fn faulty_bodies(example: &Value) -> Vec<Value> {
        let mut at = Vec::new();
        positions(example, "", &mut at);
        let mut bodies = Vec::new();
        for p in &at {
            for fault in FAULTS {
                let mut body = example.clone();
                apply(&mut body, p, fault);
                bodies.push(body);
            }
        }
        let pairable = [FAULTS[0], FAULTS[5], FAULTS[9], FAULTS[11], FAULTS[12]];
        for (i, first) in at.iter().enumerate() {
            for second in &at[i + 1..] {
                for a in pairable {
                    for b in pairable {
                        let mut body = example.clone();
                        apply(&mut body, second, b);
                        apply(&mut body, first, a);
                        bodies.push(body);
                    }
                }
            }
        }
        bodies
    }

    /// The input example, and the example with each optional field that the output example
    /// carries (a baseline or a price policy a caller sends back), when that is valid.
    fn valid_bodies(machine: &Machine, validator: &RequestValidator) -> Vec<Value> {
        let example = &machine.input_example;
        let mut bodies = vec![example.clone()];
        let fields = machine.input_schema["properties"]
            .as_object()
            .into_iter()
            .flatten();
        for (name, _) in fields.filter(|(name, _)| example.get(name.as_str()).is_none()) {
            let (mut body, Some(value)) = (example.clone(), machine.output_example.get(name))
            else {
                continue;
            };
            body[name.as_str()] = value.clone();
            let text = body.to_string();
            let request = Doc::parse(&text).expect("a serialized value parses");
            if validator.validator.is_valid(&request) {
                bodies.push(body);
            }
        }
        bodies
    }

    #[test]
    fn every_machine_schema_has_structural_rules() {
        for machine in &MANIFEST.machines {
            let validator = RequestValidator::new(machine).expect("the manifest's schema compiles");
            assert!(validator.structure.is_some(), "{}", machine.machine);
        }
    }

    /// The first error is reported only when ranking every error would report the same.
    #[test]
    fn the_first_error_is_taken_only_when_it_is_the_most_useful() {
        for machine in &MANIFEST.machines {
            let validator = RequestValidator::new(machine).expect("the manifest's schema compiles");
            let (mut taken, mut ranked) = (0, 0);
            let bodies = valid_bodies(machine, &validator).into_iter();
            for body in bodies.flat_map(|valid| faulty_bodies(&valid)) {
                let text = body.to_string();
                let request = Doc::parse(&text).expect("a serialized value parses");
                let first = validator.validator.validate(&request);
                let is_valid = validator.validator.is_valid(&request);
                assert_eq!(first.is_ok(), is_valid, "{}: {text}", machine.machine);
                let Err(first) = first else {
                    continue;
                };
                if validator.is_most_useful(&first, &request) {
                    taken += 1;
                    let in_full = validator.most_useful_error(&request);
                    let in_full = in_full.map(|e| validator.to_api_error(&e));
                    let first = validator.to_api_error(&first);
                    assert_eq!(Some(first), in_full, "{}: {text}", machine.machine);
                } else {
                    ranked += 1;
                }
            }
            assert!(
                taken > 0 && ranked > 0,
                "{}: {taken} taken, {ranked} ranked",
                machine.machine
            );
        }
    }

    #[test]
    fn structural_rules_keep_fields_and_types_and_drop_value_rules() {
        let schema = json!({
            "type": "object",
            "required": ["a"],
            "additionalProperties": false,
            "properties": {
                "a": {"type": "string", "pattern": "^x$", "not": {"const": "y"}},
                "b": {"type": "array", "items": {"type": "integer", "minimum": 1}, "maxItems": 2},
                "c": {"oneOf": [{"required": ["d"]}, {"required": ["e"]}]}
            }
        });
        let kept = json!({
            "type": "object",
            "required": ["a"],
            "additionalProperties": false,
            "properties": {
                "a": {"type": "string"},
                "b": {"type": "array", "items": {"type": "integer"}},
                "c": {}
            }
        });
        assert_eq!(structural_rules(&schema), Some(kept));
        assert_eq!(
            structural_rules(&json!({"properties": {"a": {"if": {}}}})),
            None
        );
    }
}
