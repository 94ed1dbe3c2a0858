//! Body → JSON → schema: the structural half of request checking, shared by every machine.
//!
//! Schema failures become one HTTP 400 with a stable code. When several things are wrong the
//! most useful one is reported: a body that is not an object, then a field we do not accept
//! (named by the manifest's `unsupported[]` when it lists it), then a missing field, then a
//! wrong type, then value rules.

use jsonschema::error::ValidationErrorKind;

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
    unsupported: Vec<(String, String)>,
}

impl RequestValidator {
    /// Compiles the machine's input schema.
    pub(crate) fn new(machine: &Machine) -> Result<RequestValidator, SchemaError> {
        let validator = compile_schema_for(&machine.input_schema).map_err(|error| SchemaError {
            machine: machine.machine.clone(),
            message: error.to_string(),
        })?;
        let unsupported = machine
            .unsupported
            .iter()
            .map(|u| (u.field.clone(), u.code.clone()))
            .collect();
        Ok(RequestValidator {
            validator,
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
        // The common case, a valid request, takes the validator's fast path: no error values
        // are built. Only an invalid request pays for ranking its errors.
        if self.validator.is_valid(request) {
            return Ok(None);
        }
        // Rank on the error kind alone; only the reported error is formatted.
        let best = self
            .validator
            .iter_errors(request)
            .min_by_key(|error| rank(error.kind()));
        match best {
            Some(error) if rank(error.kind()) == DEFERRED_RANK => {
                Ok(Some(self.to_api_error(&error)))
            }
            Some(error) => Err(self.to_api_error(&error)),
            None => Ok(None),
        }
    }

    fn to_api_error(&self, error: &jsonschema::ValidationError<'_>) -> ApiError {
        let at = error.instance_path().as_str();
        let field = if at.is_empty() { "/" } else { at }.to_string();
        let last = || at.rsplit('/').next().unwrap_or("");
        let parent_is = |name: &str| {
            let mut segments = at.rsplit('/');
            segments.next();
            segments.next() == Some(name)
        };
        // jsonschema's own wording, formatted only for the kinds that report it.
        let message = || shorten(&error.to_string());
        match error.kind() {
            ValidationErrorKind::AdditionalProperties { unexpected } => {
                let name = unexpected.first().cloned().unwrap_or_default();
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
                let last = last();
                let code = if matches!(last, "chain" | "chain_id" | "chains") || parent_is("chains")
                {
                    "unsupported_chain"
                } else if last == "symbol" {
                    "unsupported_symbol"
                } else if last == "method" {
                    "unsupported_method"
                } else {
                    "invalid_value"
                };
                ApiError::invalid_field(code, field, message())
            }
            ValidationErrorKind::Pattern { pattern } => match known_pattern(pattern) {
                Some((code, wanted)) => {
                    let message = [field.as_str(), " must be ", wanted].concat();
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
        | ValidationErrorKind::ExclusiveMaximum { .. } => 4,
        ValidationErrorKind::Constant { .. }
        | ValidationErrorKind::Not { .. }
        | ValidationErrorKind::AnyOf { .. }
        | ValidationErrorKind::OneOfNotValid { .. }
        | ValidationErrorKind::OneOfMultipleValid { .. } => DEFERRED_RANK,
        _ => 5,
    }
}

/// The rank of errors from rules stated as combinations; reported after the machine's checks.
const DEFERRED_RANK: u8 = 6;

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
