#!/usr/bin/env bash
# lintian on the built packages: no errors and no warnings. An override
# lives in debian/*.lintian-overrides with a comment that gives its reason.
#   check-lintian.sh DEB_DIR
set -euo pipefail
dir=$1
command -v lintian >/dev/null || {
  echo "SKIPPED LOUDLY: lintian is not installed; run scripts/install-test-deps" >&2
  exit 77
}
changes=$(ls "$dir"/gpuinit_*.changes)
# --fail-on error,warning: any E: or W: fails; I: and P: are shown only.
lintian --fail-on error,warning --display-info --pedantic --no-tag-display-limit "$changes"
echo "PASS: lintian: no errors, no warnings"
