#!/usr/bin/env bash
# Downloads into .whl (git-ignored) the wheels the suite needs on a lent GPU beyond what ../shared/gpu/prepare.sh packs
# and the device's image holds, at the versions in .venv: carry ".whl" with scripts/gpu_suite.sh (13 MB).
# The list is what the image lacked on 2026-11-28 (its package list: /work/.library/device/KINDS.md).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
grep -qx "/.whl/" .git/info/exclude 2>/dev/null || echo "/.whl/" >> .git/info/exclude
names="cffi cryptography gguf httpcore2 httpx2 jiter jsonschema jsonschema-specifications mcp mcp-types mlx-vlm openai
opentelemetry-api pycparser PyJWT pytest-textual-snapshot python-multipart referencing rpds-py sniffio sse-starlette
starlette syrupy textual-image truststore tzdata uvicorn"
pins=$(.venv/bin/python -m pip list --format=freeze 2>/dev/null | awk -F== -v want="$(echo $names | tr 'A-Z ' 'a-z\n')" '
  BEGIN { n = split(want, w, "\n"); for (i = 1; i <= n; i++) keep[w[i]] = 1 } tolower($1) in keep { print $1 "==" $2 }')
rm -rf .whl && mkdir .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_35_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl $pins
ls .whl | wc -l; du -sh .whl
