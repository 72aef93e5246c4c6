#!/usr/bin/env bash
# Downloads the wheels of tools/gpu_wheels.txt for the GPU machine (CPython 3.12, manylinux x86_64) into .whl/ and
# builds this package's wheel beside them; run it where the package index is reachable, then carry `.whl` to the
# GPU machine and run `bash tools/gpu_check.sh OUT_DIR` there.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.whl
mkdir -p "$dest"
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
pins=$(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' tools/gpu_wheels.txt)
platforms=()
for n in 17 24 27 28 31 34 35; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
# shellcheck disable=SC2086
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any \
    -d "$dest" $pins
rm -f "$dest"/plldr_hf-*.whl
python3 -m pip wheel --no-deps --no-build-isolation -q -w "$dest" . 2>/dev/null || python3 -m pip wheel --no-deps -q -w "$dest" .
echo "wheels in $dest: $(ls "$dest" | wc -l) files, $(du -sh "$dest" | cut -f1)"
