# shellcheck shell=bash
# The progress display of scripts/run.sh (sourced; needs bash).
#
# The trainer appends one rounded line per finished step (and validation)
# to <out>/progress.log and keeps the running step's live line (rollouts
# done / total, failed, tokens sampled, ETA) in <out>/progress.now, which
# it replaces whole and removes when the step ends (trn_progress). On a
# terminal the live line is redrawn in place with \r and replaced by the
# step line when the step ends; elsewhere (a pipe, a log file) only plain
# lines appear: the step lines, and the live line at most once a minute.
#
#   progress_init DIR   # the trainer's output folder
#   progress            # call every few seconds: prints what is new
#   progress_end        # clears the live line

progress_init() {
  _pg_log=$1/progress.log
  _pg_now=$1/progress.now
  _pg_seen=0
  _pg_live=""
  _pg_plain=0
  _pg_tty=0
  if [ -t 1 ]; then _pg_tty=1; fi
}

progress() {
  local n now cols
  if [ -f "$_pg_log" ]; then
    n=$(wc -l <"$_pg_log")
    if [ "$_pg_seen" -lt "$n" ]; then
      if [ "$_pg_tty" = 1 ] && [ -n "$_pg_live" ]; then printf '\r\033[K'; fi
      _pg_live=""
      sed -n "$((_pg_seen + 1)),${n}p" "$_pg_log"
      _pg_seen=$n
    fi
  fi
  now=""
  if [ -f "$_pg_now" ]; then
    now=$(head -c 400 "$_pg_now" 2>/dev/null | head -n 1) || true
  fi
  if [ "$_pg_tty" = 1 ]; then
    if [ -n "$now" ]; then
      # one screen row, or \r cannot take it back
      cols=$(tput cols 2>/dev/null) || cols=100
      printf '\r\033[K%s' "${now:0:$((cols - 1))}"
      _pg_live=$now
    elif [ -n "$_pg_live" ]; then
      printf '\r\033[K'
      _pg_live=""
    fi
  elif [ -n "$now" ] && [ "$now" != "$_pg_live" ] &&
    [ $(($(date +%s) - _pg_plain)) -ge 60 ]; then
    printf '%s\n' "$now"
    _pg_live=$now
    _pg_plain=$(date +%s)
  fi
  return 0
}

progress_end() {
  if [ "$_pg_tty" = 1 ] && [ -n "$_pg_live" ]; then printf '\r\033[K'; fi
  _pg_live=""
  return 0
}
