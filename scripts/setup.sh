#!/usr/bin/env bash
# Installs everything shrink needs on a fresh Debian machine: the Debian packages
# of the built-in servers (lighttpd + php-cgi, nginx + php-fpm) and the test
# oracles (when run as root), then the Python package with its dev extras. Safe to
# run again.
set -euo pipefail
cd "$(dirname "$0")/.."

DEBS=(lighttpd php-cgi nginx php-fpm tshark tcpdump wrk httperf)
missing=()
for pkg in "${DEBS[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "setup: installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # tshark asks whether non-root users may capture; answer before installing.
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
  else
    echo "setup: missing Debian packages: ${missing[*]}" >&2
    echo "setup: run 'sudo apt-get install ${missing[*]}' (or run make setup as root)." >&2
    echo "setup: continuing; tests that need them will be skipped with that reason." >&2
  fi
fi
# Debian starts lighttpd, nginx and php-fpm (php8.2-fpm on Debian 12) as services on
# install; shrink runs its own instances, so stop them and keep them from starting.
if [ "$(id -u)" -eq 0 ]; then
  units=(lighttpd nginx)
  for f in /lib/systemd/system/php*-fpm.service /etc/init.d/php*-fpm; do
    [ -e "$f" ] && units+=("$(basename "$f" .service)")
  done
  for unit in $(printf '%s\n' "${units[@]}" | sort -u); do
    if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
      systemctl stop "$unit" >/dev/null 2>&1 || true
      systemctl disable "$unit" >/dev/null 2>&1 || true
    elif [ -x "/etc/init.d/$unit" ]; then
      "/etc/init.d/$unit" stop >/dev/null 2>&1 || true
      command -v update-rc.d >/dev/null 2>&1 && update-rc.d "$unit" disable >/dev/null 2>&1 || true
    fi
  done
fi

# As root, shrink runs the servers as an unprivileged user: www-data (Debian's), else
# shrink-www, made here once (no home, no login).
if [ "$(id -u)" -eq 0 ] && ! id -u www-data >/dev/null 2>&1 && ! id -u shrink-www >/dev/null 2>&1; then
  echo "setup: creating the unprivileged server user shrink-www"
  useradd --system --no-create-home --shell /usr/sbin/nologin shrink-www
fi

PY=${PYTHON:-python3}
"$PY" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
"$PY" -m pip install -q -e ".[dev]"
# The native replay core (Rust, built by maturin from native/): without cargo the
# Python engine runs instead, and every run's summary says which engine ran.
if command -v cargo >/dev/null 2>&1 || [ -x "$HOME/.cargo/bin/cargo" ]; then
  PATH="$HOME/.cargo/bin:$PATH" "$PY" -m pip install -q ./native \
    || echo "setup: the native replay core did not build; the Python engine will run." >&2
else
  echo "setup: no cargo (Rust); the native replay core is not built, the Python engine will run." >&2
  echo "setup: install Rust (https://rustup.rs) and run make setup again to build it." >&2
fi
# The co-runner of a CPU-time share (--enforce corunner) is a tiny C program; build it
# now (into ~/.cache/shrink) so the first run need not. Without a compiler, Python's.
"$PY" -c 'from shrink.enforce.corunner import build_helper; print("setup: co-runner", build_helper() or "in Python (no C compiler)")'
echo "setup: done ($("$PY" -c 'import shrink; print("shrink", shrink.__version__)'))"
