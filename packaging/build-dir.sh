#!/usr/bin/env bash
# Prints the build folder of the build that MEMLEDGER_TORCH selects (see build.sh).
set -euo pipefail
if [ "${MEMLEDGER_TORCH:-}" = debian ]; then echo build-debian; else echo build; fi
