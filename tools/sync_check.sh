#!/usr/bin/env bash
# Fail if nbdev_export or nbdev_clean changes any tracked file: notebooks and acrb_nb/ must be in sync and clean.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
snap() { { git status --porcelain --untracked-files=no; git diff; } | sha256sum; }
before=$(snap)
# clean first: nbdev_clean assigns the cell ids that nbdev_export writes into acrb_nb/*.py
nbdev_clean
nbdev_export
after=$(snap)
if [ "$before" != "$after" ]; then
  echo "ERROR: nbdev_export / nbdev_clean changed tracked files:" >&2
  git status --porcelain --untracked-files=no >&2
  git --no-pager diff --stat >&2
  echo "Run 'nbdev_clean && nbdev_export' and commit the result (never edit acrb_nb/*.py by hand)." >&2
  exit 1
fi
echo "sync-check: notebooks, library and cleaning are in sync"
