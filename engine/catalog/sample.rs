//! The free VM04 sample. Without a capture it is the manifest's output example, labelled an
//! illustrative example (render::sample). `factomat sample capture` stores one real VM04
//! answer in a file; the service then serves that capture, labelled with its capture time and
//! block, and still does no provider work when serving it.

use std::path::Path;

use serde_json::{Value, json};

use super::manifest::{Machine, compile_schema};

/// Why a stored capture cannot be served (the service then falls back to the illustrative
/// example and says why in its log).
#[derive(Debug, thiserror::Error)]
pub enum SampleError {
    /// The file exists but cannot be read.
    #[error("cannot read the captured sample {path}: {detail}")]
    Read {
        /// The file.
        path: String,
        /// What went wrong.
        detail: String,
    },
    /// The capture cannot be stored.
    #[error("cannot write the captured sample {path}: {detail}")]
    Write {
        /// The file.
        path: String,
        /// What went wrong.
        detail: String,
    },
    /// The stored capture does not check out.
    #[error("the captured sample {path} is not usable: {detail}")]
    Invalid {
        /// The file.
        path: String,
        /// What went wrong.
        detail: String,
    },
}

/// The stored form of a capture: what was asked, what was answered, when and at which block.
pub fn stored_capture(
    machine: &Machine,
    request: &Value,
    response: &Value,
    captured_at: &str,
) -> Value {
    json!({
        "machine": machine.machine,
        "methodology_version": machine.methodology_version,
        "captured_at": captured_at,
        "block_number": response.get("block_number").cloned().unwrap_or(Value::Null),
        "request": request,
        "response": response,
    })
}

/// Checks that a stored capture is a VM04 answer of this methodology that fits the output
/// schema; an answer of an older methodology is not served as this one's sample.
pub fn check_capture(machine: &Machine, stored: &Value) -> Result<(), CaptureMismatch> {
    if stored.get("machine").and_then(Value::as_str) != Some(machine.machine.as_str()) {
        return Err(CaptureMismatch::OtherMachine(machine.machine.clone()));
    }
    let methodology = stored.get("methodology_version").and_then(Value::as_str);
    if methodology != Some(machine.methodology_version.as_str()) {
        return Err(CaptureMismatch::Methodology {
            found: methodology.map(str::to_string),
            runs: machine.methodology_version.clone(),
        });
    }
    if !stored.get("captured_at").is_some_and(Value::is_string) {
        return Err(CaptureMismatch::NoCapturedAt);
    }
    let response = stored.get("response").unwrap_or(&Value::Null);
    let validator = compile_schema(&machine.output_schema).map_err(CaptureMismatch::Schema)?;
    if let Some(error) = validator.iter_errors(response).next() {
        return Err(CaptureMismatch::Shape {
            at: error.instance_path().to_string(),
            detail: error.to_string(),
        });
    }
    Ok(())
}

/// Why a stored capture is not served as the sample.
#[derive(Debug, thiserror::Error)]
pub enum CaptureMismatch {
    /// It is another machine's answer.
    #[error("it is not a {0} capture")]
    OtherMachine(String),
    /// It was captured under another methodology.
    #[error("it was captured under methodology {found:?}; this service runs {runs:?}")]
    Methodology {
        /// The capture's methodology, if it names one.
        found: Option<String>,
        /// This service's.
        runs: String,
    },
    /// It does not say when it was captured.
    #[error("it has no captured_at")]
    NoCapturedAt,
    /// The output schema does not compile (a manifest defect).
    #[error("the output schema does not compile: {0}")]
    Schema(jsonschema::ValidationError<'static>),
    /// The stored answer does not fit the output schema.
    #[error("its response does not fit the output schema at {at}: {detail}")]
    Shape {
        /// Where, as a JSON pointer.
        at: String,
        /// The schema's complaint.
        detail: String,
    },
}

/// The served document of a stored capture (`{base_url}` is substituted by the server).
pub fn captured_document(machine: &Machine, stored: &Value) -> Value {
    let captured_at = stored["captured_at"].as_str().unwrap_or_default();
    json!({
        "sample": true,
        "kind": "captured",
        "not_a_current_observation": true,
        "captured_at": captured_at,
        "block_number": stored["block_number"],
        "notice": format!(
            "Captured sample: a real {} answer from the configured providers at {captured_at}. It is not a current paid observation; call the paid resource for current data.",
            machine.machine
        ),
        "machine": machine.machine,
        "resource": format!("{{base_url}}{}", machine.path),
        "methodology_version": machine.methodology_version,
        "request": stored["request"],
        "response": stored["response"],
    })
}

/// Reads a stored capture; None when there is none at `path`.
pub fn load(machine: &Machine, path: &Path) -> Result<Option<Value>, SampleError> {
    let shown = path.display().to_string();
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(SampleError::Read {
                path: shown,
                detail: e.to_string(),
            });
        }
    };
    let stored: Value = serde_json::from_slice(&bytes).map_err(|e| SampleError::Invalid {
        path: shown.clone(),
        detail: e.to_string(),
    })?;
    check_capture(machine, &stored).map_err(|mismatch| SampleError::Invalid {
        path: shown,
        detail: mismatch.to_string(),
    })?;
    Ok(Some(stored))
}

/// Writes a stored capture next to its final place, then renames it there, so a reader never
/// sees half a file.
pub fn store(path: &Path, stored: &Value) -> Result<(), SampleError> {
    let shown = path.display().to_string();
    let write_error = |e: std::io::Error| SampleError::Write {
        path: shown.clone(),
        detail: e.to_string(),
    };
    let mut text = serde_json::to_string_pretty(stored).map_err(|e| SampleError::Write {
        path: shown.clone(),
        detail: e.to_string(),
    })?;
    text.push('\n');
    let partial = path.with_extension("partial");
    std::fs::write(&partial, text).map_err(write_error)?;
    std::fs::rename(&partial, path).map_err(write_error)
}
