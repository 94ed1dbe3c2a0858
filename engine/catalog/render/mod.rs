//! Renders every published document from the manifest.
//!
//! Compiled by `build.rs` (renders into OUT_DIR and the committed copies are checked for
//! drift) and by the library (the x402 requirement and bazaar extension builders are shared
//! with the payment gate). Absolute URLs are written with [`BASE_URL_TOKEN`]; the engine
//! substitutes its configured base_url once at start-up.

//!
//! By concern: [`payment`] (the x402 requirement and bazaar extension, shared with the
//! challenge), [`documents`] (catalog, orientation, discovery document, sample), [`openapi`]
//! and [`templates`] (markdown docs, llms.txt).

mod documents;
mod openapi;
mod payment;
mod templates;

pub(crate) use documents::{catalog, orientation, sample, well_known};
pub(crate) use openapi::{openapi, to_openapi30};
pub(crate) use payment::{bazaar_extension, bazaar_header_extension, requirement};
pub(crate) use templates::environment_of;
use templates::{generated_readme, llms_txt, machine_doc};

use serde_json::{Value, json};

use super::manifest::{Machine, Manifest};

/// Placeholder for the configured base URL in every render.
pub(crate) const BASE_URL_TOKEN: &str = "{base_url}";

/// Paths of the free documents, shared by renders and the router.
pub(crate) const CATALOG_PATH: &str = "/v1/catalog";
pub(crate) const OPENAPI_PATH: &str = "/openapi.json";
pub(crate) const LLMS_PATH: &str = "/llms.txt";
pub(crate) const HEALTH_PATH: &str = "/health";
pub(crate) const WELL_KNOWN_PATH: &str = "/.well-known/x402";
pub(crate) const SAMPLE_PATH: &str = "/samples/productive-venue-snapshot";
pub(crate) const DOCS_PREFIX: &str = "/docs/machines/";
/// The origin's icon, where indexes look for one.
pub(crate) const FAVICON_PATH: &str = "/favicon.svg";
/// Where the storefront (`catalog::storefront`) is served.
pub(crate) const STOREFRONT_PREFIX: &str = "/storefront/";

/// The served path of a machine's storefront page.
pub(crate) fn storefront_page(machine: &Machine) -> String {
    format!("{STOREFRONT_PREFIX}{}", machine.machine)
}
/// Free documents: (served path, committed render path, content type). The service serves
/// each render from memory with the base URL substituted.
pub(crate) const FREE_DOCUMENTS: [(&str, &str, &str); 7] = [
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
    (FAVICON_PATH, "generated/favicon.svg", "image/svg+xml"),
];

/// The committed render path of a machine's documentation page.
pub(crate) fn machine_doc_path(machine: &Machine) -> String {
    format!("docs/machines/{}.md", machine.machine)
}

/// The machine of the free sample (its output example, or a stored capture of it).
pub const SAMPLE_MACHINE: &str = "VM04";

/// One rendered document and the repository path its committed copy lives at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Render {
    pub path: String,
    pub content: String,
}

pub(crate) fn url(path: &str) -> String {
    format!("{BASE_URL_TOKEN}{path}")
}

pub(crate) fn pretty(value: &Value) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_default();
    text.push('\n');
    text
}

/// Why a document could not be rendered from the manifest.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// A template did not parse or render.
    #[error("template {name}: {source:#}")]
    Template {
        /// The template's name.
        name: String,
        /// minijinja's error, with the template line.
        source: minijinja::Error,
    },
    /// The manifest lacks a machine a render is made from.
    #[error("{0} is missing from the manifest")]
    MissingMachine(&'static str),
}

impl RenderError {
    pub(crate) fn template(name: &str, source: minijinja::Error) -> RenderError {
        RenderError::Template {
            name: name.to_string(),
            source,
        }
    }
}

/// Every render, in a stable order.
pub(crate) fn render_all(manifest: &Manifest) -> Result<Vec<Render>, RenderError> {
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
            path: "generated/favicon.svg".into(),
            content: templates::FAVICON.into(),
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

pub(crate) fn related_entries(manifest: &Manifest, machine: &Machine) -> Vec<Value> {
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

pub(crate) fn docs_url(machine: &Machine) -> String {
    url(&format!("{DOCS_PREFIX}{}.md", machine.machine))
}

pub(crate) fn response_schema_name(machine: &Machine) -> String {
    format!("{}Response", machine.schema_stem())
}

pub(crate) fn request_schema_name(machine: &Machine) -> String {
    format!("{}Request", machine.schema_stem())
}

/// The committed manifest, loaded for the renderers' unit tests.
#[cfg(test)]
pub(crate) fn test_manifest() -> Manifest {
    Manifest::load(include_str!("../../../machines.yaml")).expect("machines.yaml is valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_all_writes_each_path_once_and_every_machine_page() {
        let manifest = test_manifest();
        let renders = render_all(&manifest).expect("renders");
        let mut paths: Vec<&str> = renders.iter().map(|r| r.path.as_str()).collect();
        paths.sort_unstable();
        let before = paths.len();
        paths.dedup();
        assert_eq!(before, paths.len(), "duplicate render path");
        for machine in &manifest.machines {
            assert!(paths.contains(&machine_doc_path(machine).as_str()));
        }
        for (_, committed, _) in FREE_DOCUMENTS {
            assert!(
                paths.contains(&committed),
                "{committed} is served but not rendered"
            );
        }
    }

    #[test]
    fn related_entries_skip_unknown_ids_and_point_at_the_sibling() {
        let mut manifest = test_manifest();
        let mut machine = manifest.machines[0].clone();
        let sibling = manifest.machines[1].clone();
        machine.related = vec![sibling.machine.clone(), "VM99".into()];
        manifest.machines[0] = machine.clone();
        let related = related_entries(&manifest, &machine);
        assert_eq!(related.len(), 1);
        assert_eq!(
            related[0]["resource"],
            json!(format!("{BASE_URL_TOKEN}{}", sibling.path))
        );
    }
}
