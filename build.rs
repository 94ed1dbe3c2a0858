//! Checks machines.yaml and renders every published document into OUT_DIR.
//!
//! A manifest that contradicts itself fails the build with one line per problem, each naming
//! the machine and field. The engine embeds the renders (see `engine/catalog/embedded.rs`); the same
//! renders are committed under generated/ and docs/ and a test catches drift.
// The library lints these shared modules; the build script only includes them.
#![allow(missing_docs, unreachable_pub)]

#[allow(dead_code)] // the library uses the rest
#[path = "engine/catalog/manifest.rs"]
mod manifest;
#[allow(dead_code, unused_imports)]
#[path = "engine/catalog/render/mod.rs"]
mod render;
#[allow(dead_code)]
#[path = "engine/catalog/storefront.rs"]
mod storefront;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::{env, fs, process};

fn main() {
    for watched in [
        "machines.yaml",
        "templates",
        "engine/catalog/manifest.rs",
        "engine/catalog/render",
        "engine/catalog/storefront.rs",
    ] {
        println!("cargo::rerun-if-changed={watched}");
    }
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").unwrap_or_else(|| fail("OUT_DIR unset")));
    let text = fs::read_to_string("machines.yaml")
        .unwrap_or_else(|e| fail(&format!("machines.yaml: cannot read: {e}")));
    let manifest = match manifest::Manifest::load(&text) {
        Ok(manifest) => manifest,
        Err(errors) => {
            for error in &errors {
                eprintln!("error: {error}");
            }
            fail(&format!(
                "machines.yaml has {} problem(s); see above",
                errors.len()
            ));
        }
    };
    let mut renders =
        render::render_all(&manifest).unwrap_or_else(|e| fail(&format!("render: {e}")));
    renders.extend(
        storefront::render_all(&manifest).unwrap_or_else(|e| fail(&format!("storefront: {e}"))),
    );
    let mut index = String::from(
        "/// Every committed render, by repository path.\npub static RENDERS: &[(&str, &str)] = &[\n",
    );
    for r in &renders {
        write_file(&out_dir.join(&r.path), &r.content);
        let _ = writeln!(
            index,
            "    ({:?}, include_str!(concat!(env!(\"OUT_DIR\"), {:?}))),",
            r.path,
            format!("/{}", r.path)
        );
    }
    index.push_str("];\n");
    write_file(&out_dir.join("renders.rs"), &index);
    let compact =
        serde_json::to_string(&manifest).unwrap_or_else(|e| fail(&format!("manifest json: {e}")));
    write_file(&out_dir.join("manifest.json"), &compact);
}

fn write_file(path: &Path, content: &str) {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).unwrap_or_else(|e| fail(&format!("{}: {e}", parent.display())));
    }
    // Leave unchanged files alone so include_str! dependents are not rebuilt needlessly.
    if fs::read_to_string(path).ok().as_deref() == Some(content) {
        return;
    }
    fs::write(path, content).unwrap_or_else(|e| fail(&format!("{}: {e}", path.display())));
}

fn fail(message: &str) -> ! {
    eprintln!("error: {message}");
    process::exit(1);
}
