"""Verifies factomat's signed evidence with PyJWT, an independent JOSE implementation.

Reads one JSON file: {"did_document": {...}, "items": [{"jws": "...", "body": "..." | null}]}.
For each JWS: its kid must be an assertion method of the DID document, the signature must
verify (EdDSA) with that method's publicKeyJwk; with a body, the claims must state the body's
sha256 and the document's DID as iss. Prints one JSON line: [{"ok", "kid", "payload", "error"}].
"""

import hashlib
import json
import sys

import jwt


def verify(document, jws, body):
    kid = jwt.get_unverified_header(jws).get("kid")
    if kid not in document.get("assertionMethod", []) or not kid.startswith(document["id"] + "#"):
        raise ValueError(f"{kid} is no assertion method of {document['id']}")
    method = next(m for m in document["verificationMethod"] if m["id"] == kid)
    key = jwt.PyJWK(method["publicKeyJwk"], "EdDSA").key
    payload = json.loads(jwt.PyJWS().decode(jws, key, algorithms=["EdDSA"]))
    if body is not None:
        digest = hashlib.sha256(body.encode("utf-8")).hexdigest()
        if payload.get("body_sha256") != digest:
            raise ValueError(f"body sha256 {digest} is not the sealed {payload.get('body_sha256')}")
        if payload.get("iss") != document["id"]:
            raise ValueError(f"iss {payload.get('iss')} is not {document['id']}")
    return kid, payload


def main():
    with open(sys.argv[1], encoding="utf-8") as handle:
        task = json.load(handle)
    results = []
    for item in task["items"]:
        try:
            kid, payload = verify(task["did_document"], item["jws"], item.get("body"))
            results.append({"ok": True, "kid": kid, "payload": payload, "error": None})
        except Exception as error:  # every failure is a result, not a crash
            results.append({"ok": False, "kid": None, "payload": None, "error": str(error)})
    print(json.dumps(results))


if __name__ == "__main__":
    main()
