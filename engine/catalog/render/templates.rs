//! Markdown machine pages, llms.txt and the generated README, from minijinja templates.

use minijinja::value::Serde;
use minijinja::{Environment, context};
use serde_json::Value;

use super::*;

const GENERATED_NOTE: &str =
    "Generated from machines.yaml by build.rs; do not edit. Refresh with: cargo run -- generate";

/// The origin's icon, served as is.
pub(super) const FAVICON: &str = include_str!("../../../templates/favicon.svg");
const MACHINE_TEMPLATE: &str = include_str!("../../../templates/machine.md.j2");
const LLMS_TEMPLATE: &str = include_str!("../../../templates/llms.txt.j2");
const GENERATED_README_TEMPLATE: &str = include_str!("../../../templates/generated-readme.md.j2");

/// A minijinja environment over these templates (name, source) with the project's block
/// whitespace rules. A name ending in `.html` turns on minijinja's HTML auto-escaping.
pub(crate) fn environment_of(
    templates: &[(&'static str, &'static str)],
) -> Result<Environment<'static>, RenderError> {
    let mut env = Environment::new();
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .keep_trailing_newline(true)
        .build()
        .map_err(|source| RenderError::template("syntax", source))?;
    env.set_syntax(syntax);
    for (name, source) in templates {
        env.add_template(name, source)
            .map_err(|error| RenderError::template(name, error))?;
    }
    Ok(env)
}

fn environment() -> Result<Environment<'static>, RenderError> {
    environment_of(&[
        ("machine.md", MACHINE_TEMPLATE),
        ("llms.txt", LLMS_TEMPLATE),
        ("generated-readme.md", GENERATED_README_TEMPLATE),
    ])
}

fn render_template(name: &str, ctx: minijinja::Value) -> Result<String, RenderError> {
    let env = environment()?;
    env.get_template(name)
        .and_then(|template| template.render(ctx))
        .map_err(|source| RenderError::template(name, source))
}

fn pretty_inline(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

pub(super) fn machine_doc(manifest: &Manifest, machine: &Machine) -> Result<String, RenderError> {
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

pub(super) fn llms_txt(manifest: &Manifest) -> Result<String, RenderError> {
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

pub(super) fn generated_readme(manifest: &Manifest) -> Result<String, RenderError> {
    render_template(
        "generated-readme.md",
        context! { note => GENERATED_NOTE, service => Serde(&manifest.service), base_url => BASE_URL_TOKEN },
    )
}

#[cfg(test)]
mod tests {
    use super::super::test_manifest;
    use super::*;

    #[test]
    fn machine_doc_names_the_machine_price_and_response_schema() {
        let manifest = test_manifest();
        for machine in &manifest.machines {
            let page = machine_doc(&manifest, machine).expect("page renders");
            assert!(page.contains(&machine.machine), "{}", machine.machine);
            assert!(page.contains(&machine.price), "{}", machine.machine);
            assert!(
                page.contains(&response_schema_name(machine)),
                "{}",
                machine.machine
            );
            assert!(!page.contains("{{"), "unrendered template syntax");
        }
    }

    #[test]
    fn llms_txt_links_every_paid_resource() {
        let manifest = test_manifest();
        let text = llms_txt(&manifest).expect("llms.txt renders");
        for machine in &manifest.machines {
            assert!(
                text.contains(&format!("{BASE_URL_TOKEN}{}", machine.path)),
                "{}",
                machine.machine
            );
        }
    }

    #[test]
    fn template_errors_name_the_template() {
        let error = render_template("missing", context! {}).expect_err("no such template");
        assert!(error.to_string().contains("missing"), "{error}");
    }
}
