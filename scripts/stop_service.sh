# Sourced by setup.sh: stop_by_pidfile RUN_DIR UNIT stops the system service UNIT's own
# master process, named by its pidfile under RUN_DIR (/run), and prints "stopped".
#
# Not "/etc/init.d/$unit stop": without its pidfile the script's start-stop-daemon
# matches every process of the server's executable, shrink's own testbeds included (a
# set-up run beside a prediction killed its PHP). A stale pidfile may name another
# process now: only a daemon (parent 1) running one of the three servers' executables
# is the service's.
stop_by_pidfile() {
  local run=$1 unit=$2 pidfile pid exe stat ppid
  for pidfile in "$run/$unit.pid" "$run/php/$unit.pid"; do
    # A plain file only, read bounded in time and size: /run/php is www-data's (Debian's
    # tmpfiles.d), and a FIFO put there as the pidfile hung set-up (cat waits for a
    # writer), as did a symlink to /dev/zero; the timeout covers one swapped in after
    # the check.
    if [ ! -f "$pidfile" ] || [ -L "$pidfile" ]; then continue; fi
    pid=$(timeout 5 head -c 32 -- "$pidfile" 2>/dev/null) || continue
    case "$pid" in '' | *[!0-9]*) continue ;; esac
    exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || continue
    case "$exe" in */lighttpd | */nginx | */php-fpm*) ;; *) continue ;; esac
    # Its parent from /proc, not ps: a minimal system has no procps.
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || continue
    read -r _ ppid _ <<<"${stat##*) }"
    [ "$ppid" = 1 ] || continue
    kill -TERM "$pid" 2>/dev/null && echo stopped
    return 0
  done
}
