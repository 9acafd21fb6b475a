#!/usr/bin/env bash
# Installs everything shrink needs on a fresh Debian or Ubuntu machine: the Debian
# packages of the built-in servers (lighttpd + php-cgi, nginx + php-fpm), the test
# oracles and Python's venv (when run as root); then a virtual environment .venv with
# the pinned dependencies of requirements-dev.lock, shrink itself (editable), the
# native replay core and the co-runner. Safe to run again. Quiet when all is well:
# one line per step that did something, and whatever went wrong in full.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv
PY=${PYTHON:-python3}  # the Python that makes the venv: the system's (Debian's python3) is fine
LOCK=requirements-dev.lock
# Refused before anything is installed: a PYTHON that names no program was found only
# at the venv step, after the Debian packages, and said as "install python3-venv".
# A minimal Debian or Ubuntu (a container image, debootstrap) has no python3 at all: as
# root it is installed with the other Debian packages; a user is told the package names.
PY_DEBS=()
if [ -z "$PY" ] || ! command -v -- "$PY" >/dev/null 2>&1; then
  if [ "$PY" = python3 ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    PY_DEBS=(python3)
  elif [ "$PY" = python3 ] && [ "$(id -u)" -eq 0 ]; then
    # (root already: "run make setup as root" would be no way out)
    echo "setup: python3 is not installed, and this system has no apt-get to install it:" \
      "install a Python 3.11+ with its venv module, or set PYTHON to one" >&2
    exit 2
  elif [ "$PY" = python3 ]; then
    echo "setup: python3 is not installed; on Debian or Ubuntu: sudo apt-get install" \
      "python3 python3-venv (or run make setup as root)" >&2
    exit 2
  else
    echo "setup: PYTHON='$PY' is not a program on PATH; set PYTHON to a Python 3.11+" \
      "(default python3)" >&2
    exit 2
  fi
fi

# Prints "$@"'s output only when it fails (apt and dpkg narrate every package).
quiet() {
  local log
  log=$(mktemp)
  if ! "$@" >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
}

DEBS=(lighttpd php-cgi nginx php-fpm tshark tcpdump wrk httperf python3-venv "${PY_DEBS[@]}")
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
    quiet apt-get update
    quiet apt-get install -y --no-install-recommends "${missing[@]}"
  else
    echo "setup: missing Debian packages: ${missing[*]}" >&2
    echo "setup: run 'sudo apt-get install ${missing[*]}' (or run make setup as root)." >&2
    # Every make target runs in the venv: without one (python3-venv brings ensurepip,
    # which makes it), going on would only fail a step later.
    if [[ " ${missing[*]} " == *" python3-venv "* ]] \
      && ! "$VENV/bin/python" -m pip --version >/dev/null 2>&1 \
      && ! "$PY" -c 'import ensurepip' 2>/dev/null; then
      echo "setup: stopping: $PY cannot make the virtual environment every make target runs in" \
        "without python3-venv (no ensurepip); install it and run make setup again." >&2
      exit 1
    fi
    echo "setup: continuing; tests that need them will be skipped with that reason." >&2
  fi
fi
# Debian starts lighttpd, nginx and php-fpm (php8.2-fpm on Debian 12, php8.3-fpm on Ubuntu
# 24.04, php8.4-fpm on Debian 13) as services on install; shrink runs its own instances,
# so stop them and keep them from starting.
if [ "$(id -u)" -eq 0 ]; then
  # shellcheck source=scripts/stop_service.sh
  . scripts/stop_service.sh
  units=(lighttpd nginx)
  for f in /lib/systemd/system/php*-fpm.service /etc/init.d/php*-fpm; do
    [ -e "$f" ] && units+=("$(basename "$f" .service)")
  done
  for unit in $(printf '%s\n' "${units[@]}" | sort -u); do
    if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
      did=()
      if systemctl is-active --quiet "$unit" 2>/dev/null; then
        systemctl stop "$unit" >/dev/null 2>&1 && did+=(stopped)
      fi
      if systemctl is-enabled --quiet "$unit" 2>/dev/null; then
        systemctl disable "$unit" >/dev/null 2>&1 && did+=(disabled)
      fi
    elif [ -x "/etc/init.d/$unit" ]; then
      did=()
      # Only the service's own master, named by its pidfile (scripts/stop_service.sh).
      [ "$(stop_by_pidfile /run "$unit")" = stopped ] && did+=(stopped)
      if compgen -G "/etc/rc[2-5].d/S[0-9][0-9]$unit" >/dev/null; then
        update-rc.d "$unit" disable >/dev/null 2>&1 && did+=(disabled)
      fi
    else
      continue
    fi
    if [ ${#did[@]} -gt 0 ]; then
      what=${did[0]}
      [ ${#did[@]} -gt 1 ] && what="$what and ${did[1]}"
      echo "setup: $what the system's $unit service (shrink runs its own servers)"
    fi
  done
fi

# As root, shrink runs the servers as an unprivileged user: www-data (Debian's), else
# shrink-www, made here once (no home, no login).
if [ "$(id -u)" -eq 0 ] && ! id -u www-data >/dev/null 2>&1 && ! id -u shrink-www >/dev/null 2>&1; then
  echo "setup: creating the unprivileged server user shrink-www"
  useradd --system --no-create-home --shell /usr/sbin/nologin shrink-www
fi

# The virtual environment: PEP 668 keeps pip out of the system's Python, and a venv
# keeps the pinned versions out of everyone else's way.
if ! "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
  rm -rf "$VENV"  # a venv made without pip (no python3-venv) is of no use
  if ! quiet "$PY" -m venv "$VENV"; then
    rm -rf "$VENV"
    echo "setup: $PY could not make a virtual environment; on Debian or Ubuntu:" \
      "sudo apt-get install python3-venv (or run make setup as root)" >&2
    exit 1
  fi
  echo "setup: made the virtual environment $VENV ($("$VENV/bin/python" --version))"
fi
VPY=$VENV/bin/python
PIP=("$VPY" -m pip install -q --disable-pip-version-check)
# Exactly the lock's versions and files (hashes); the builds below use its setuptools
# and maturin instead of fetching the newest into a build environment.
# The longest step of a first set-up (a minute or more, quiet): say what it is doing.
echo "setup: installing the pinned packages of $LOCK into $VENV (about a minute the first time)"
if ! "${PIP[@]}" --require-hashes -r "$LOCK"; then
  echo "setup: pip could not install $LOCK's packages from the package index (pip's" \
    "error above: the network, a proxy or its certificate?); fix that and run make setup again." >&2
  exit 1
fi
"${PIP[@]}" --no-deps --no-build-isolation -e .
# An editable install leaves shrink's own modules uncompiled; compile them now, so that
# the first command (and every one where PYTHONDONTWRITEBYTECODE is set) starts at once.
# -j 0 needs a process pool, whose locks need a writable /dev/shm (a chroot or container
# may have none): then one process compiles them, without a traceback.
"$VPY" -m compileall -q -j 0 shrink samplers extrapolate >/dev/null 2>&1 \
  || "$VPY" -m compileall -q shrink samplers extrapolate >/dev/null
# The native replay core (Rust, built by maturin from native/): without cargo the
# Python engine runs instead, and every run's summary says which engine ran.
if command -v cargo >/dev/null 2>&1 || [ -x "$HOME/.cargo/bin/cargo" ]; then
  # maturin's build backend runs the maturin command: the venv's, from the lock.
  PATH="$PWD/$VENV/bin:$HOME/.cargo/bin:$PATH" "${PIP[@]}" --no-build-isolation ./native \
    || echo "setup: the native replay core did not build; the Python engine will run." >&2
else
  echo "setup: no cargo (Rust); the native replay core is not built, the Python engine will run." >&2
  echo "setup: install Rust (https://rustup.rs) and run make setup again to build it." >&2
fi
# The co-runner of a CPU-time share (--enforce corunner) is a tiny C program; build it
# now (into ~/.cache/shrink) so the first run need not. Without a compiler, Python's.
"$VPY" -c 'from shrink.enforce.corunner import build_helper; print("setup: co-runner", build_helper() or "in Python (no C compiler)")'
echo "setup: done: $("$VENV/bin/shrink" --version) in $VENV;" \
  "put shrink on PATH with: . $VENV/bin/activate"
