# Sourced by setup.sh: stop_by_pidfile RUN_DIR UNIT stops the system service UNIT's own
# master process, named by its pidfile under RUN_DIR (/run), and prints "stopped".
#
# Not "/etc/init.d/$unit stop": without its pidfile the script's start-stop-daemon
# matches every process of the server's executable, shrink's own testbeds included (a
# set-up run beside a prediction killed its PHP). A stale pidfile may name another
# process now: only a daemon (parent 1) running one of the three servers' executables,
# started before its pidfile was last written, is the service's. A testbed's server
# that `shrink testbed up` left running is a daemon of that executable too: a stale
# pidfile naming its PID stopped it, and the testbed's measurement with it.
stop_by_pidfile() {
  local run=$1 unit=$2 pidfile pid exe stat ppid hz btime key value started written
  local -a fields
  hz=$(getconf CLK_TCK 2>/dev/null) || hz=100
  btime=
  while read -r key value; do
    if [ "$key" = btime ]; then btime=$value; fi
  done </proc/stat
  for pidfile in "$run/$unit.pid" "$run/php/$unit.pid"; do
    # A plain file of this user's (root's), read bounded in time and size: /run/php is
    # www-data's (Debian's tmpfiles.d), who could name any PID there, and a FIFO put
    # there as the pidfile hung set-up (cat waits for a writer), as did a symlink to
    # /dev/zero; the timeout covers one swapped in after the check.
    if [ ! -f "$pidfile" ] || [ -L "$pidfile" ] || [ ! -O "$pidfile" ]; then continue; fi
    pid=$(timeout 5 head -c 32 -- "$pidfile" 2>/dev/null) || continue
    case "$pid" in '' | *[!0-9]*) continue ;; esac
    exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || continue
    case "$exe" in */lighttpd | */nginx | */php-fpm*) ;; *) continue ;; esac
    # Its parent and start from /proc, not ps: a minimal system has no procps.
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || continue
    read -r -a fields <<<"${stat##*) }"
    ppid=${fields[1]} # (fields 3 on: the state, the parent, ..., the start at 22)
    [ "$ppid" = 1 ] || continue
    # Started after its pidfile was written (2 s for the clocks' rounding): a PID reused.
    written=$(stat -c %Y -- "$pidfile" 2>/dev/null) || continue
    [[ $btime =~ ^[0-9]+$ && ${fields[19]} =~ ^[0-9]+$ && $written =~ ^[0-9]+$ ]] || continue
    [[ $hz =~ ^[1-9][0-9]*$ ]] || continue
    started=$((btime + fields[19] / hz))
    [ "$started" -le $((written + 2)) ] || continue
    kill -TERM "$pid" 2>/dev/null && echo stopped
    return 0
  done
}
