#!/usr/bin/env bash
# Re-splits the vLLM bundle that ../shared/gpu/build-bundle.sh laid out in DIR (default .gpu) as
# 50 MB parts into parts of SIZE bytes (default 31,000,000): a `run` call carries at most 64 MiB
# with the working tree, which (committed result databases included) is about 32 MB, so 50 MB
# parts no longer travel. Parts stay named part-NN in order (stage.sh cats part-* in order);
# the zstandard wheel goes with the last part. Then stage with one call per DIR/pN:
#   bash $HOME/stage/stage.sh add .gpu/pN
set -euo pipefail
DIR="${1:-.gpu}"
SIZE="${2:-31000000}"
cd "$DIR"
ls p*/part-* >/dev/null 2>&1 || { echo "no p*/part-* in $DIR: build the bundle first" >&2; exit 2; }
tmp=$(mktemp -d resplit.XXXXXX)
wheels=$(ls p*/*.whl 2>/dev/null || true)
for w in $wheels; do mv "$w" "$tmp/"; done
# shellcheck disable=SC2046
cat $(ls p*/part-* | sort -t- -k2 -n) | split -b "$SIZE" -d -a 2 - "$tmp/part-"
rm -rf p[0-9]*
i=0
for part in "$tmp"/part-*; do mkdir -p "p$i" && mv "$part" "p$i/"; i=$((i + 1)); done
for w in "$tmp"/*.whl; do [ -e "$w" ] && mv "$w" "p$((i - 1))/"; done
rmdir "$tmp"
du -sb p* | sed 's/^/  /'
echo "$i parts in $DIR (p0..p$((i - 1)))"
