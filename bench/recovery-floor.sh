#!/usr/bin/env bash
# The signature recovery's floor: instructions per `secp256k1_ecdsa_recover` of the very
# libsecp256k1 sources our build links (secp256k1-sys, from Cargo.lock), compiled outside
# cargo with the build script's defines at the optimisation levels the library's own build
# uses (-O2), cargo's release profile uses (-O3), and a build tuned for this CPU
# (-O3 -march=native). callgrind counts a run of 10 and of 110 recoveries; their difference
# over 100 is one recovery, without start-up. Compare with the paid row's callgrind tree of
# `recover_signer` (bench/README.md, "The paid call's instructions"). Not part of scripts/test.
#
#   bench/recovery-floor.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
command -v gcc >/dev/null || { echo "gcc is required" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "valgrind is required (bench/run installs it)" >&2; exit 2; }

cd "$root"
manifest=$(cargo metadata --locked --format-version 1 |
  python3 -c 'import json,sys
packages = json.load(sys.stdin)["packages"]
sys_crates = [p for p in packages if p["name"] == "secp256k1-sys"]
print(max(sys_crates, key=lambda p: [int(n) for n in p["version"].split(".")])["manifest_path"])')
src="$(dirname "$manifest")/depend/secp256k1"
prefix=$(grep -o 'rustsecp256k1_v[0-9_]*_ecdsa_recover(' "$src/include/secp256k1_recovery.h" | head -1)
prefix=${prefix%ecdsa_recover(}
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

cat >"$tmp/recover.c" <<C
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "secp256k1.h"
#include "secp256k1_recovery.h"
#include "secp256k1_preallocated.h"
int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 1, recovered = 0;
  size_t size = ${prefix}context_preallocated_size(SECP256K1_CONTEXT_NONE);
  ${prefix}context *ctx = ${prefix}context_preallocated_create(malloc(size), SECP256K1_CONTEXT_NONE);
  unsigned char key[32], digest[32];
  memset(key, 7, 32);
  memset(digest, 9, 32);
  ${prefix}ecdsa_recoverable_signature signature;
  if (!${prefix}ecdsa_sign_recoverable(ctx, &signature, digest, key, NULL, NULL)) return 1;
  ${prefix}pubkey public_key;
  for (int i = 0; i < rounds; i++) {
    digest[0] = (unsigned char)i; /* another message each time: nothing is cached */
    recovered += ${prefix}ecdsa_recover(ctx, &public_key, &signature, digest);
  }
  printf("%d\n", recovered);
  return 0;
}
C

instructions() {
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$tmp/recover" "$1" 2>&1 |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}

echo "libsecp256k1 from $(basename "$(dirname "$manifest")"), instructions per recovery:"
for flags in "-O2" "-O3" "-O3 -march=native"; do
  # The defines of secp256k1-sys's build.rs (modules, 15-bit tables), but the library's own
  # default callbacks (stdio), which the recovery never calls.
  # shellcheck disable=SC2086
  gcc $flags -w -include stdio.h -include stdlib.h -DSECP256K1_API= -DENABLE_MODULE_RECOVERY=1 -DENABLE_MODULE_ECDH=1 \
    -DENABLE_MODULE_SCHNORRSIG=1 -DENABLE_MODULE_EXTRAKEYS=1 -DENABLE_MODULE_ELLSWIFT=1 \
    -DECMULT_GEN_PREC_BITS=4 -DECMULT_WINDOW_SIZE=15 -I"$src" -I"$src/include" -I"$src/src" \
    "$tmp/recover.c" "$src/src/secp256k1.c" "$src/src/precomputed_ecmult.c" \
    "$src/src/precomputed_ecmult_gen.c" -o "$tmp/recover"
  few=$(instructions 10)
  many=$(instructions 110)
  printf '  %-18s %s\n' "$flags" "$(((many - few) / 100))"
done
