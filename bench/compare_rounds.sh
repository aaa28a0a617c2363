# shellcheck shell=bash disable=SC2154
# Sourced by bench/*/compare.sh: the rounds of a two-build comparison and
# the medians of their figures. The sourcing script defines one NAME DIR,
# which runs one round against build DIR and appends its figures (one
# line of space-separated numbers) to $out/NAME, and sets base, new and
# out.

# $1 rounds of one base and one new, the order alternating between rounds
compare_rounds() {
  local r
  for ((r = 0; r < $1; r++)); do
    if ((r % 2 == 0)); then
      one base "$base"
      one new "$new"
    else
      one new "$new"
      one base "$base"
    fi
  done
}

# the median of column $2 of file $1
median() {
  cut -d' ' -f"$2" "$1" | sort -g | awk '{v[NR] = $1} END {
    print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
