//! Evidence anyone can verify (docs/evidence-signatures.md): the DID document, the signed
//! offer of every 402, receipts and seals, checked by the official offer-and-receipt
//! implementation (node), by PyJWT, and by `factomat evidence verify`; tampering, a stranger's
//! key and key rotation.

mod common;

use std::process::Command;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use common::evidence::{key_file, official_verify, pyjwt_verify, signing_server, tampered};
use common::{TestServer, machine_routes, temp_path};
use factomat::evidence::{AnswerFacts, Identity, PaidEvidence};
use serde_json::{Value, json};
use warp::Filter as _;

const PAYER: &str = "0x857b06519E91e3A54538791bDbb0E22373e36b66";
const TRANSACTION: &str = "0x9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

/// The evidence of one paid VM02 answer, signed by the identity of these key files for a
/// base URL, as the payment gate makes it.
fn paid_answer(base_url: &str, keys: &[std::path::PathBuf], body: &[u8]) -> PaidEvidence {
    let identity = Identity::load(base_url, keys, &[])
        .expect("keys load")
        .expect("signing on");
    let resource_url = format!("{base_url}/v1/allowance-exposure");
    let facts = AnswerFacts {
        resource_url: &resource_url,
        machine: "VM02",
        methodology_version: "allowance-exposure-0.1.0",
        request_sha256: "5f1e1d2e3c4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeef",
        payer: PAYER,
        network: "eip155:8453",
        transaction: TRANSACTION,
        issued_at: factomat::evidence::now_seconds(),
    };
    identity.paid_evidence(&facts, body).expect("signed")
}

/// The PAYMENT-RESPONSE value of a settled payment carrying the receipt.
fn payment_response(evidence: &PaidEvidence) -> String {
    let settle = json!({
        "success": true,
        "transaction": TRANSACTION,
        "network": "eip155:8453",
        "payer": PAYER,
        "extensions": {"offer-receipt": evidence.receipt_extension},
    });
    STANDARD.encode(settle.to_string())
}

async fn did_document(server: &TestServer) -> Value {
    let response = server.get("/.well-known/did.json").await;
    assert_eq!(response.status(), 200);
    response.json().await.expect("JSON")
}

#[tokio::test]
async fn without_a_key_nothing_is_signed_and_health_says_so() {
    let server = TestServer::start().await;
    assert_eq!(server.get("/.well-known/did.json").await.status(), 404);
    let health: Value = server.get_json("/health").await;
    assert_eq!(health["evidence"], json!({"signing": "off"}));
    let (_, path, body) = &machine_routes()[0];
    let response = server.post_json(path, body).await;
    assert_eq!(response.status(), 402);
    let exposed = response.headers()["access-control-expose-headers"]
        .to_str()
        .expect("ascii");
    assert!(
        exposed.contains("Evidence-Seal") && exposed.contains("Content-Digest"),
        "{exposed}"
    );
    let header = common::payment_required(&response);
    let body: Value = response.json().await.expect("JSON");
    assert!(header["extensions"].get("offer-receipt").is_none());
    assert!(body["extensions"].get("offer-receipt").is_none());
}

#[tokio::test]
async fn the_did_document_is_free_cacheable_and_names_every_key_by_the_base_url() {
    let key = key_file("evidence.pem");
    let server = signing_server(&[&key], &[]).await;
    let response = server.get("/.well-known/did.json").await;
    assert_eq!(response.status(), 200);
    let headers = response.headers().clone();
    assert_eq!(headers["content-type"], "application/did+json");
    assert!(
        headers["cache-control"]
            .to_str()
            .expect("ascii")
            .starts_with("public, max-age=")
    );
    let etag = headers["etag"].clone();
    let document: Value = response.json().await.expect("JSON");
    let port = server.server.addr.port();
    let did = format!("did:web:127.0.0.1%3A{port}");
    assert_eq!(document["id"], did.as_str());
    let method = &document["verificationMethod"][0];
    let kid = method["id"].as_str().expect("id");
    assert!(kid.starts_with(&format!("{did}#")), "{kid}");
    assert_eq!(document["assertionMethod"], json!([kid]));
    assert_eq!(method["publicKeyJwk"]["kty"], "OKP");
    assert_eq!(method["publicKeyJwk"]["crv"], "Ed25519");
    let text = document.to_string();
    assert!(!text.contains("\"d\""), "no private part: {text}");
    let again = server
        .client
        .get(format!("{}/.well-known/did.json", server.url))
        .header("if-none-match", etag)
        .send()
        .await
        .expect("answered");
    assert_eq!(again.status(), 304);
    let health: Value = server.get_json("/health").await;
    assert_eq!(health["evidence"]["signing"], "on");
    assert_eq!(health["evidence"]["did"], did.as_str());
    assert_eq!(health["evidence"]["kid"], kid);

    // Below a base URL path, the document is where did:web resolves it.
    let below = signing_server(
        &[&key],
        &[("FACTOMAT_BASE_URL", "https://x.example/factomat")],
    )
    .await;
    assert_eq!(below.get("/.well-known/did.json").await.status(), 404);
    let document: Value = below.get_json("/did.json").await;
    assert_eq!(document["id"], "did:web:x.example:factomat");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_402_offer_and_the_receipt_verify_with_the_official_implementation() {
    let key = key_file("evidence.pem");
    let server = signing_server(&[&key], &[]).await;
    let routes = machine_routes();
    let requests: Vec<Value> = routes
        .iter()
        .map(|(_, path, body)| json!({"url": format!("{}{path}", server.url), "body": body}))
        .collect();
    let body = br#"{"machine":"VM02","status":"OK"}"#;
    let evidence = paid_answer(&server.url, std::slice::from_ref(&key), body);
    let result = official_verify(&json!({
        "requests": requests,
        "receipts": [payment_response(&evidence)],
        "seals": [evidence.seal],
        "did_document": format!("{}/.well-known/did.json", server.url),
    }));
    for ((id, path, _), checked) in routes
        .iter()
        .zip(result["offers"].as_array().expect("offers"))
    {
        assert_eq!(checked["status"], 402, "{id}: {checked}");
        // A signed offer (~1 KB) is more than its share of the header allotment: the 402 body
        // carries it (docs/decisions.md).
        assert!(
            checked["header"].as_array().is_none_or(Vec::is_empty),
            "{id}: the header leaves the offer to the body: {checked}"
        );
        {
            let place = "body";
            let offers = checked[place].as_array().expect("offers");
            assert_eq!(
                offers.len(),
                1,
                "{id} {place}: one offer per accepts[] entry: {checked}"
            );
            let offer = &offers[0];
            assert_eq!(offer["error"], Value::Null, "{id} {place}: {offer}");
            assert_eq!(offer["matches_accepts"], true, "{id} {place}");
            assert_eq!(offer["canonical"], true, "{id} {place}: JCS payload");
            assert_eq!(offer["resource_matches"], true, "{id} {place}");
            assert_eq!(
                offer["payload"]["resourceUrl"],
                format!("{}{path}", server.url)
            );
            assert_eq!(offer["payload"]["version"], 1);
            assert!(offer["payload"].get("validUntil").is_none());
        }
    }
    let receipt = &result["receipts"][0];
    assert_eq!(receipt["error"], Value::Null, "{receipt}");
    assert_eq!(receipt["canonical"], true);
    assert_eq!(receipt["payload"]["payer"], PAYER);
    assert_eq!(receipt["payload"]["transaction"], TRANSACTION);
    let seal = &result["seals"][0];
    assert_eq!(seal["error"], Value::Null, "{seal}");
    assert_eq!(seal["payload"]["machine"], "VM02");
    assert_eq!(seal["unverified_payload_agrees"], true);
}

#[tokio::test]
async fn pyjwt_verifies_offers_receipts_and_seals_and_refuses_any_tampering_or_stranger() {
    let key = key_file("evidence.pem");
    let server = signing_server(&[&key], &[]).await;
    let document = did_document(&server).await;
    let (_, path, request) = &machine_routes()[1];
    let challenge: Value = server
        .post_json(path, request)
        .await
        .json()
        .await
        .expect("JSON");
    let offer = challenge["extensions"]["offer-receipt"]["info"]["offers"][0]["signature"].clone();
    let body = r#"{"machine":"VM02","status":"OK","exposure":"12.5"}"#;
    let evidence = paid_answer(&server.url, std::slice::from_ref(&key), body.as_bytes());
    let receipt = evidence.receipt_extension["info"]["receipt"]["signature"].clone();
    let stranger = key_file("stranger.pem");
    let foreign = paid_answer(&server.url, &[stranger], body.as_bytes());
    let flipped_body = body.replace("12.5", "12.6");
    let items = [
        json!({"jws": offer}),
        json!({"jws": receipt}),
        json!({"jws": evidence.seal, "body": body}),
        json!({"jws": evidence.seal, "body": flipped_body}),
        json!({"jws": tampered(&evidence.seal, "\"VM02\"", "\"VM03\""), "body": body}),
        json!({"jws": tampered(&evidence.seal, &PAYER[..10], "0x857b06519F"), "body": body}),
        json!({"jws": foreign.seal, "body": body}),
    ];
    let results = pyjwt_verify(&document, &items);
    for (index, result) in results.iter().enumerate() {
        assert_eq!(result["ok"], index < 3, "item {index}: {result}");
    }
    assert_eq!(results[0]["payload"]["payTo"], common::PAY_TO);
    assert_eq!(results[2]["payload"]["machine"], "VM02");
    assert_eq!(
        results[2]["payload"].as_object().expect("claims").len(),
        11,
        "exactly the seal's claims"
    );
    assert!(
        results[6]["error"]
            .as_str()
            .expect("error")
            .contains("no assertion method")
    );
}

#[tokio::test]
async fn rotation_lists_both_keys_signs_with_the_first_and_old_seals_still_verify() {
    let old = key_file("old.pem");
    let new = key_file("new.pem");
    let body = r#"{"machine":"VM02"}"#;
    // One public base URL throughout, as a deployment keeps while it rotates keys.
    let base = [("FACTOMAT_BASE_URL", common::BASE_URL)];
    let old_seal = paid_answer(
        common::BASE_URL,
        std::slice::from_ref(&old),
        body.as_bytes(),
    )
    .seal;

    let rotated = signing_server(&[&new, &old], &base).await;
    let document = did_document(&rotated).await;
    let ids: Vec<&str> = document["assertionMethod"]
        .as_array()
        .expect("ids")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(ids.len(), 2);
    let new_seal = paid_answer(
        common::BASE_URL,
        &[new.clone(), old.clone()],
        body.as_bytes(),
    )
    .seal;
    let results = pyjwt_verify(
        &document,
        &[
            json!({"jws": new_seal, "body": body}),
            json!({"jws": old_seal, "body": body}),
        ],
    );
    assert_eq!(results[0]["ok"], true, "{}", results[0]);
    assert_eq!(results[0]["kid"], ids[0], "new seals use the first key");
    assert_eq!(results[1]["ok"], true, "{}", results[1]);
    assert_eq!(results[1]["kid"], ids[1], "the old key still verifies");

    // Retired to its public key alone, the old key still verifies its seals.
    let public = factomat::evidence::read_public_key(&old).expect("public");
    let retired = signing_server(
        &[&new],
        &[
            base[0],
            ("FACTOMAT_EVIDENCE_RETIRED_PUBLIC_KEYS", public.x()),
        ],
    )
    .await;
    let document = did_document(&retired).await;
    let results = pyjwt_verify(&document, &[json!({"jws": old_seal, "body": body})]);
    assert_eq!(results[0]["ok"], true, "{}", results[0]);
}

fn factomat(args: &[&str]) -> (i32, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_factomat"))
        .args(args)
        .output()
        .expect("factomat runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code().unwrap_or(-1), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn factomat_evidence_verify_prints_what_was_signed_and_exits_by_the_outcome() {
    let key = key_file("evidence.pem");
    let server = signing_server(&[&key], &[]).await;
    let body = r#"{"machine":"VM02","status":"OK"}"#;
    let evidence = paid_answer(&server.url, std::slice::from_ref(&key), body.as_bytes());
    let bundle = temp_path("bundle.json");
    let write_bundle = |body: &str| {
        let value = json!({
            "body": body,
            "seal": evidence.seal,
            "receipt": payment_response(&evidence),
            "content_digest": evidence.content_digest,
        });
        std::fs::write(&bundle, value.to_string()).expect("bundle written");
    };
    write_bundle(body);
    let did_url = format!("{}/.well-known/did.json", server.url);
    let did_file = temp_path("did.json");
    std::fs::write(&did_file, did_document(&server).await.to_string()).expect("did.json");
    let bundle_arg = bundle.display().to_string();
    let did_file_arg = did_file.display().to_string();

    let (code, text) = tokio::task::block_in_place(|| {
        factomat(&[
            "evidence",
            "verify",
            "--did",
            &did_url,
            "--bundle",
            &bundle_arg,
        ])
    });
    assert_eq!(code, 0, "{text}");
    for expected in [
        "evidence seal: signature verifies",
        "\"machine\": \"VM02\"",
        "Content-Digest: matches",
        "agrees with the seal",
        "result: VERIFIED",
    ] {
        assert!(text.contains(expected), "{expected}: {text}");
    }

    let body_file = temp_path("body.json");
    let body_file_arg = body_file.display().to_string();
    let verify_body = |body: &str, seal: &str| {
        std::fs::write(&body_file, body).expect("body");
        factomat(&[
            "evidence",
            "verify",
            "--did",
            &did_file_arg,
            "--body",
            &body_file_arg,
            "--seal",
            seal,
        ])
    };
    let (code, text) = verify_body(&body.replace("OK", "NO"), &evidence.seal);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("result: NOT VERIFIED"), "{text}");

    let stranger = key_file("stranger.pem");
    let foreign = paid_answer(&server.url, &[stranger], body.as_bytes());
    let (code, text) = verify_body(body, &foreign.seal);
    assert_eq!(code, 1, "{text}");

    let (code, text) = factomat(&[
        "evidence",
        "verify",
        "--did",
        "/nonexistent/did.json",
        "--bundle",
        &bundle_arg,
    ]);
    assert_eq!(code, 2, "{text}");

    // Another host serving our document as its own: its id is not its URL's did:web.
    let ours = did_document(&server).await;
    let elsewhere = common::onchain::serve(
        warp::path!(".well-known" / "did.json").map(move || warp::reply::json(&ours)),
    )
    .await;
    let elsewhere_url = format!("http://{elsewhere}/.well-known/did.json");
    let (code, text) = tokio::task::block_in_place(|| {
        factomat(&[
            "evidence",
            "verify",
            "--did",
            &elsewhere_url,
            "--bundle",
            &bundle_arg,
        ])
    });
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("the DID of its own URL"), "{text}");

    // A 402's signed offer is signed by us, and proves no payment.
    let (_, path, example) = machine_routes().into_iter().next().expect("a route");
    let unpaid: Value = server
        .post_json(&path, &example)
        .await
        .json()
        .await
        .expect("402 body");
    let offer = unpaid["extensions"]["offer-receipt"]["info"]["offers"][0].to_string();
    let (code, text) = tokio::task::block_in_place(|| {
        factomat(&["evidence", "verify", "--did", &did_url, "--receipt", &offer])
    });
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("no receipt"), "{text}");
}

#[test]
fn keys_generate_writes_an_owner_only_key_once() {
    let path = temp_path("generated.pem");
    let arg = path.display().to_string();
    let (code, text) = factomat(&["keys", "generate", &arg]);
    assert_eq!(code, 0, "{text}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path)
            .expect("written")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let pem = std::fs::read_to_string(&path).expect("pem");
    assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----"));
    assert!(
        !text.contains(pem.lines().nth(1).expect("base64 line")),
        "the key is never printed"
    );
    let (code, public) = factomat(&["keys", "public", &arg]);
    assert_eq!(code, 0);
    assert!(text.contains(public.trim()), "{text}");
    let (code, _) = factomat(&["keys", "generate", &arg]);
    assert_ne!(code, 0, "an existing key is never overwritten");
}
