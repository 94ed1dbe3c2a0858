//! A manifest that contradicts itself fails the build with a message naming machine and
//! field. Checked through the library (the same module build.rs compiles) and through the
//! compiled build script itself.

mod common;

use std::path::PathBuf;
use std::process::Command;

use factomat::catalog::Manifest;
use serde_json::{Value, json};

fn committed() -> Value {
    common::manifest()
}

fn machine_mut<'a>(manifest: &'a mut Value, id: &str) -> &'a mut Value {
    manifest["machines"]
        .as_array_mut()
        .expect("machines")
        .iter_mut()
        .find(|m| m["machine"] == id)
        .expect("machine")
}

/// The committed manifest with one machine's `field` set to `value`.
fn with_field(machine: &str, field: &str, value: Value) -> Value {
    let mut manifest = committed();
    machine_mut(&mut manifest, machine)[field] = value;
    manifest
}

fn errors_of(manifest: &Value) -> Vec<String> {
    let yaml = serde_norway::to_string(manifest).expect("yaml");
    match Manifest::load(&yaml) {
        Ok(_) => Vec::new(),
        Err(errors) => errors.iter().map(ToString::to_string).collect(),
    }
}

fn assert_reports(manifest: &Value, expected: &str) {
    let errors = errors_of(manifest);
    assert!(
        errors.iter().any(|e| e.contains(expected)),
        "expected {expected:?} in {errors:#?}"
    );
}

#[test]
fn the_committed_manifest_is_consistent() {
    assert_eq!(errors_of(&committed()), Vec::<String>::new());
}

/// VM09's packet seals itself (`handoff_sha256` over the rest, docs/hashing.md): its example
/// is a packet a caller can check, so the seal must hold there too.
#[test]
fn the_vm09_example_packet_holds_its_own_seal() {
    let mut manifest = committed();
    let example = &machine_mut(&mut manifest, "VM09")["output_example"];
    common::assert_sealed_by(example, "handoff_sha256");
}

/// What the CDP Bazaar refuses or drops fails the build (issue 27): a description over 500
/// characters, a serviceName over 32 ASCII characters, more than 5 tags.
#[test]
fn listing_metadata_beyond_the_bazaar_limits_fails() {
    let long_description = with_field("VM02", "purpose", json!("x".repeat(501)));
    assert_reports(
        &long_description,
        "VM02.purpose: is resource.description: 501 characters",
    );

    let mut long_name = committed();
    long_name["service"]["listing"]["service_name"] = json!("n".repeat(33));
    assert_reports(&long_name, "VM01.listing.service_name");
    let not_ascii = with_field("VM04", "listing", json!({"service_name": "façade"}));
    assert_reports(&not_ascii, "VM04.listing.service_name");

    let mut six_tags = committed();
    six_tags["service"]["listing"]["tags"] = json!(["a", "b", "c", "d", "e", "f"]);
    assert_reports(&six_tags, "VM01.listing.tags: 6 tags, at most 5");
    let twice = with_field("VM03", "listing", json!({"tags": ["Web", "web"]}));
    assert_reports(&twice, "VM03.listing.tags: \"web\" appears twice");

    let mut icon = committed();
    icon["service"]["listing"]["icon"] = json!("http://insecure.example/icon.png");
    assert_reports(&icon, "listing.icon");

    let own = with_field(
        "VM05",
        "listing",
        json!({"service_name": "factomat discovery"}),
    );
    assert_eq!(
        errors_of(&own),
        Vec::<String>::new(),
        "a machine may name itself"
    );
}

#[test]
fn broken_manifests_name_machine_and_field() {
    let mut missing = committed();
    missing["machines"]
        .as_array_mut()
        .expect("machines")
        .retain(|m| m["machine"] != "VM05");
    assert_reports(&missing, "VM05.machine: is missing");

    let mut doubled = committed();
    let copy = machine_mut(&mut doubled, "VM03").clone();
    doubled["machines"]
        .as_array_mut()
        .expect("machines")
        .push(copy);
    assert_reports(&doubled, "VM03.machine: appears 2 times");

    let path_clash = with_field("VM06", "path", json!("/v1/url-context"));
    assert_reports(
        &path_clash,
        "VM06.path: \"/v1/url-context\" collides with VM01",
    );

    // VM04's per-chain symbols: the allowlist and the published schema cannot drift apart.
    let mut symbols = committed();
    machine_mut(&mut symbols, "VM04")["allowlists"]["symbols"]["8453"] =
        json!(["ETH", "WETH", "USDC", "wstETH", "cbETH"]);
    assert_reports(
        &symbols,
        "VM04.allowlists.symbols: chain 8453: lists [\"ETH\", \"WETH\", \"USDC\", \"wstETH\", \"cbETH\"] but input_schema's chain_id 8453 case states",
    );
    assert_reports(&symbols, "allowlists.assets names");
    let mut narrowed = committed();
    machine_mut(&mut narrowed, "VM04")["input_schema"]["oneOf"][1]["properties"]["asset"]["properties"]
        ["symbol"]["enum"] = json!(["ETH", "USDC"]);
    assert_reports(&narrowed, "VM04.allowlists.symbols: chain 8453: lists");

    let op_clash = with_field(
        "VM09",
        "operationId",
        json!("postVm08X402ServiceChangeSnapshot"),
    );
    assert_reports(&op_clash, "VM09.operationId:");

    let price = with_field("VM07", "price_atomic", json!("50000"));
    assert_reports(
        &price,
        "VM07.price_atomic: \"50000\" disagrees with price \"$0.005\"",
    );

    let bad_price = with_field("VM02", "price", json!("0.01 USD"));
    assert_reports(&bad_price, "VM02.price:");

    let mut input = committed();
    machine_mut(&mut input, "VM02")["input_example"]["token"] = json!(42);
    assert_reports(
        &input,
        "VM02.input_example: fails its own schema at \"/token\"",
    );

    let mut output = committed();
    machine_mut(&mut output, "VM06")["output_example"]["status"] = json!("MAYBE");
    assert_reports(
        &output,
        "VM06.output_example: fails its own schema at \"/status\"",
    );

    let mut foreign_baseline = committed();
    machine_mut(&mut foreign_baseline, "VM08")["input_schema"]["properties"]["baseline"]["properties"]
        ["methodology_version"]["const"] = json!("x402-service-change-snapshot-9.9.9");
    assert_reports(
        &foreign_baseline,
        "VM08.input_schema.baseline.methodology_version: must be const",
    );

    let family_naming = |family: usize, machine: &str| {
        let mut manifest = committed();
        manifest["families"][family]["machines"]
            .as_array_mut()
            .expect("members")
            .push(json!(machine));
        manifest
    };
    assert_reports(
        &family_naming(0, "VM02"),
        "families.WEB_INTELLIGENCE: names VM02, whose family is ONCHAIN_PREFLIGHT",
    );
    assert_reports(
        &family_naming(1, "VM99"),
        "families.ONCHAIN_PREFLIGHT: names VM99, which is not in the manifest",
    );

    let related = with_field("VM01", "related", json!(["VM02"]));
    assert_reports(
        &related,
        "VM01.related: names VM02 of family ONCHAIN_PREFLIGHT; only siblings",
    );

    let mut dialect = committed();
    machine_mut(&mut dialect, "VM04")["input_schema"]["properties"]["limit"]["type"] =
        json!(["integer", "string"]);
    assert_reports(
        &dialect,
        "VM04.input_schema: type list at \"/properties/limit\"",
    );

    let mut forbidden = committed();
    machine_mut(&mut forbidden, "VM10")["output_schema"]["properties"]["state"]["$ref"] =
        json!("#/x");
    assert_reports(&forbidden, "VM10.output_schema: uses \"$ref\"");

    let mut limit = committed();
    machine_mut(&mut limit, "VM11")["limits"]["max_request_bytes"] = json!(0);
    assert_reports(&limit, "VM11.limits.max_request_bytes");
}

fn build_script() -> Option<PathBuf> {
    // The test binary lives in <target>/<profile>/deps; build scripts in <target>/<profile>/build.
    let exe = std::env::current_exe().ok()?;
    let build_dir = exe.parent()?.parent()?.join("build");
    let mut candidates: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(build_dir)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("factomat-"))
        .map(|e| e.path().join("build-script-build"))
        .filter(|p| p.exists())
        .filter_map(|p| Some((p.metadata().ok()?.modified().ok()?, p)))
        .collect();
    candidates.sort();
    candidates.pop().map(|(_, p)| p)
}

#[test]
fn the_build_script_fails_on_a_broken_manifest() {
    let script = build_script().expect("cargo built the build script before the tests");
    let dir = std::env::temp_dir().join(format!("factomat-broken-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("out")).expect("dir");
    let broken = with_field("VM04", "price_atomic", json!("1"));
    std::fs::write(
        dir.join("machines.yaml"),
        serde_norway::to_string(&broken).expect("yaml"),
    )
    .expect("write");
    let output = Command::new(&script)
        .current_dir(&dir)
        .env("OUT_DIR", dir.join("out"))
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "a broken manifest must fail the build"
    );
    assert!(
        stderr.contains("machines.yaml: VM04.price_atomic"),
        "{stderr}"
    );

    std::fs::write(
        dir.join("machines.yaml"),
        serde_norway::to_string(&committed()).expect("yaml"),
    )
    .expect("write");
    let output = Command::new(&script)
        .current_dir(&dir)
        .env("OUT_DIR", dir.join("out"))
        .output()
        .expect("runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(dir.join("out/generated/catalog.json").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
