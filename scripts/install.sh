#!/usr/bin/env bash
# Install spark-trident and what it needs on a Debian/Ubuntu machine.
#   bash scripts/install.sh          Java 17 (for Spark), Graphviz (for trident describe --format svg|png)
#                                    and the package
#   bash scripts/install.sh --test   also ZooKeeper and Redis servers, and the test extras
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
pkgs=()
if ! ls /usr/lib/jvm/java-17-openjdk-* >/dev/null 2>&1 && ! (command -v java >/dev/null && java -version 2>&1 | grep -q '"17\.'); then
  pkgs+=(openjdk-17-jre-headless)
fi
command -v dot >/dev/null || pkgs+=(graphviz)   # `trident describe --format svg|png` runs Graphviz's dot
if [ "${1:-}" = "--test" ]; then
  [ -f /usr/share/java/zookeeper.jar ] || pkgs+=(zookeeper)
  command -v redis-server >/dev/null || pkgs+=(redis-server)
  command -v openssl >/dev/null || pkgs+=(openssl)
  [ -x /usr/bin/chromium ] || pkgs+=(chromium)   # tests/test_status_page.py: the status page in a real headless browser
fi
if [ ${#pkgs[@]} -gt 0 ]; then
  echo "installing Debian packages: ${pkgs[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
fi

extras="kafka"
[ "${1:-}" = "--test" ] && extras="test"
python3 -m pip install -q -e ".[$extras]"
