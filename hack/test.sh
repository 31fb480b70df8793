#!/usr/bin/env bash
# The test command: set up, build, run every test (as root, on the real kernel).
set -euo pipefail
cd "$(dirname "$0")/.."
bash hack/setup.sh
npx mocha "$@"
