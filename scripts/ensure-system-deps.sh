#!/usr/bin/env bash
# Installs the Debian packages the test suite needs (PostgreSQL for the ledger tests, Chromium for
# the web-console tests) when they are missing. Java 17 (for PySpark) is expected on the machine.
set -euo pipefail
need=()
[ -x /usr/lib/postgresql/15/bin/initdb ] || need+=(postgresql)
[ -x /usr/bin/chromium ] || need+=(chromium chromium-driver)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi
command -v java >/dev/null || { echo "Java 17 is required for PySpark (apt-get install openjdk-17-jre-headless)" >&2; exit 1; }
