#!/usr/bin/env bash
# Real MapReduce output for the SequenceFile tests (tests/it/sequencefile.rs): the
# jobs of tests/services/mapreduce/ run by Hadoop's LocalJobRunner on the local
# filesystem, and what Hadoop's own SequenceFile.Reader reads back from them.
#
#   tests/services/mapreduce.sh OUTDIR   writes OUTDIR/mapreduce/ (OUTDIR is usually
#                                        $SLUICE_FIXTURES); does nothing when its
#                                        expected.json is of these sources already
#   tests/services/mapreduce.sh build    builds the jobs (once per version of their
#                                        sources, in $SLUICE_CACHE/mapreduce) and prints
#                                        where
#
# OUTDIR/mapreduce/ holds one directory per output (a word count as TextOutputFormat
# and as SequenceFileOutputFormat uncompressed, RECORD- and BLOCK-compressed with
# each codec Hadoop runs without its native library; one job per pair of Writable
# classes; a map-only job; MultipleOutputs; a big file for splits; an output copied
# while its job still ran; corrupt/ copies of a part file), dumps/NAME.jsonl (each
# output's records, as SequenceFile.Reader read them) and expected.json (per output:
# its classes, compression, files, record count and dump; see
# mapreduce/src/main/java/sluice/mapreduce/Main.java).
#
# Environment: SLUICE_CACHE (build cache root, default ~/.cache/sluice).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NAME=mapreduce.sh
# shellcheck source=tests/services/java.sh
source "$HERE/java.sh"
PROJECT="$HERE/mapreduce"
HASH="$(cat "$PROJECT/pom.xml" "$PROJECT"/src/main/java/sluice/mapreduce/*.java "$HERE/mapreduce.sh" |
  sha256sum | cut -c1-16)"

# Builds the jobs once per version of their sources; sets BUILD (mapreduce.jar and
# classpath.txt).
build() {
  local t0=$SECONDS
  maven_build mapreduce "$HASH" -f "$PROJECT/pom.xml" "-Dmapreduce.build.dir=@BUILD@/target" \
    package dependency:build-classpath "-Dmdep.outputFile=@BUILD@/classpath.txt" || return 0
  cp "$BUILD/target/mapreduce-1.0.jar" "$BUILD/mapreduce.jar"
  maven_built mapreduce "$HASH"
  echo "mapreduce.sh: built the jobs into $BUILD in $((SECONDS - t0))s" >&2
}

write() {
  local out="$1/mapreduce"
  if grep -qs "\"version\": \"$HASH\"" "$out/expected.json"; then
    echo "mapreduce.sh: $out/expected.json is current" >&2
    return 0
  fi
  build
  local work t0=$SECONDS
  work="$(mktemp -d "${TMPDIR:-/tmp}/sluice-mapreduce.XXXXXX")"
  rm -rf "$out" "$out.tmp"
  mkdir -p "$(dirname "$out")"
  if ! java -Xmx1g -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
    -Dorg.slf4j.simpleLogger.defaultLogLevel=error \
    -cp "$BUILD/mapreduce.jar:$(cat "$BUILD/classpath.txt")" \
    sluice.mapreduce.Main "$out.tmp" "$work" "$HASH" </dev/null >"$work/jobs.log" 2>&1; then
    tail -n 60 "$work/jobs.log" >&2
    die "the MapReduce jobs failed (log: $work/jobs.log)"
  fi
  mv "$out.tmp" "$out"
  rm -rf "$work"
  echo "mapreduce.sh: wrote $out in $((SECONDS - t0))s" >&2
}

case "${1:-}" in
  build) build && echo "$BUILD" ;;
  "" | -*) die "usage: $0 OUTDIR | build" ;;
  *) write "$1" ;;
esac
