#!/usr/bin/env bash
# The device tool returns at most 8 files: pack everything under $OUT into one archive.
set -u
OUT=${OUT:-/tmp/gpubench-out}
tar -C "$OUT" -czf /tmp/gpubench-results.tgz . && rm -rf "${OUT:?}"/* && mv /tmp/gpubench-results.tgz "$OUT/"
