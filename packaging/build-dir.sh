#!/usr/bin/env bash
# Prints the build folder of the build that MEMLEDGER_TORCH selects (see build.sh).
set -euo pipefail
if [ "${MEMLEDGER_TORCH:-}" = pip ]; then echo build-torch2; else echo build; fi
