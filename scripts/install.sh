#!/usr/bin/env bash
# Install spark-trident and what it needs on a Debian/Ubuntu machine.
#   bash scripts/install.sh          Java 17 (for Spark), Graphviz (for trident describe --format svg|png)
#                                    and the package with what README's examples import (the [examples]
#                                    extra: Kafka, the local broker, PostgreSQL, Parquet, DuckDB), into a
#                                    virtual environment
#   bash scripts/install.sh --servers  also ZooKeeper, Redis and PostgreSQL (for trident dev-servers)
#   bash scripts/install.sh --test   also those servers, Chromium, and the test extras
#
# The virtual environment is the one that is active ($VIRTUAL_ENV), else ./.venv, made here
# with the python3 first on PATH (Debian's python3-venv is installed when that python3 lacks
# it). A system Python refuses `pip install` outside a virtual environment (PEP 668:
# "externally-managed-environment"), so nothing is ever installed into it. Afterwards
# .venv/bin/trident and .venv/bin/python work without activating anything: when another
# environment was active, ./.venv is made a link to it.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
PY="${PYTHON:-python3}"
command -v "$PY" >/dev/null || { echo "install.sh: no $PY on PATH; install Python 3.10 or newer (apt-get install python3)" >&2; exit 1; }

pkgs=()
if ! ls /usr/lib/jvm/java-17-openjdk-* >/dev/null 2>&1 && ! (command -v java >/dev/null && java -version 2>&1 | grep -q '"17\.'); then
  pkgs+=(openjdk-17-jre-headless)
fi
command -v dot >/dev/null || pkgs+=(graphviz)   # `trident describe --format svg|png` runs Graphviz's dot
if [ -z "${VIRTUAL_ENV:-}" ] && [ ! -x .venv/bin/python ] && ! "$PY" -c 'import ensurepip, venv' >/dev/null 2>&1; then
  # Debian and Ubuntu split venv/ensurepip out of python3: python3-venv (and the versioned one)
  ver=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
  pkgs+=(python3-venv "python${ver}-venv")
fi
if [ "${1:-}" = "--test" ] || [ "${1:-}" = "--servers" ]; then
  # the servers `trident dev-servers` and the tests start (Tansu, the Kafka broker, comes from PyPI)
  [ -f /usr/share/java/zookeeper.jar ] || pkgs+=(zookeeper)
  command -v redis-server >/dev/null || pkgs+=(redis-server)
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || pkgs+=(postgresql)
fi
if [ "${1:-}" = "--test" ]; then
  command -v openssl >/dev/null || pkgs+=(openssl)
  [ -x /usr/bin/chromium ] || pkgs+=(chromium)   # tests/transactional/ops/test_status_page.py: the status page in a real headless browser
fi
if [ ${#pkgs[@]} -gt 0 ]; then
  echo "installing Debian packages: ${pkgs[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
fi

if [ -n "${VIRTUAL_ENV:-}" ]; then
  venv="$VIRTUAL_ENV"
  if [ ! -e .venv ] && [ "$(cd "$venv" && pwd -P)" != "$(pwd -P)/.venv" ]; then
    ln -s "$venv" .venv   # .venv/bin/trident names the active environment too
  fi
else
  venv="$(pwd)/.venv"
  [ -x "$venv/bin/python" ] || { echo "creating the virtual environment .venv ($("$PY" --version))" >&2; "$PY" -m venv "$venv"; }
fi

extras="examples"   # what README's examples import (pyproject.toml's [examples] extra)
[ "${1:-}" = "--test" ] && extras="test"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -e ".[$extras]"
echo "installed into $venv: run $( [ "$venv" = "$(pwd)/.venv" ] && echo ".venv/bin/trident" || echo "$venv/bin/trident" ) (no activation needed)" >&2
