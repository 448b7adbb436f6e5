#!/bin/sh
# Plants a bug in a copy of the checkout and runs the named tests against it: a test of a behaviour must fail there.
#
#   scripts/plant.sh BUG.patch TEST...        (a patch, as `git diff` writes it; `-` reads it from stdin)
#   scripts/plant.sh -e 'SED' FILE TEST...    (a sed expression applied to FILE, which it must change)
#
# The copy is the checkout as it is (HEAD, uncommitted changes and new files), in a temporary folder; the compiled
# kernels (git-ignored) are copied in. The tests run with $PYTHON (default: .venv/bin/python, else python3);
# tests/conftest.py makes the copy the `mlxchat` they import, whatever is installed. The copy is removed after.
# Exit status: 0 when the tests failed (the bug was caught), 1 when they passed (it was not), 2 on a usage error
# or a patch that does not apply.
set -eu

usage() { sed -n '4,5p' "$0" | sed 's/^# *//' >&2; exit 2; }
[ $# -ge 2 ] || usage
root=$(git rev-parse --show-toplevel)
python=${PYTHON:-}
[ -n "$python" ] || { [ -x "$root/.venv/bin/python" ] && python="$root/.venv/bin/python"; } || python=python3
copy=$(mktemp -d "${TMPDIR:-/tmp}/mlxchat-plant.XXXXXX")
patch=$copy.patch
trap 'rm -rf "$copy" "$patch" "$patch.before"' EXIT

mkdir "$copy/tree"
git -C "$root" archive HEAD | tar -x -C "$copy/tree"
git -C "$root" diff --binary HEAD > "$patch"
[ ! -s "$patch" ] || (cd "$copy/tree" && git apply --binary "$patch")
git -C "$root" ls-files --others --exclude-standard -z | (cd "$root" && xargs -0r cp --parents -t "$copy/tree")
for built in "$root"/engine/cpu/kernels/_ext*.so; do
    if [ -e "$built" ]; then cp "$built" "$copy/tree/engine/cpu/kernels/"; fi
done

if [ "$1" = "-e" ]; then
    [ $# -ge 4 ] || usage
    target=$copy/tree/$3
    cp "$target" "$patch.before"
    sed -i "$2" "$target"
    (cd "$copy/tree" && diff -u "$patch.before" "$3" --label "a/$3" --label "b/$3") > "$patch" && {
        echo "plant: the expression changed nothing in $3" >&2; exit 2; }
    rm "$patch.before"
    shift 3
else
    if [ "$1" = "-" ]; then cat > "$patch"; else cp "$1" "$patch"; fi
    (cd "$copy/tree" && git apply "$patch") || { echo "plant: the patch does not apply to the checkout" >&2; exit 2; }
    shift
fi
echo "plant: the bug, as planted:" >&2
cat "$patch" >&2

if (cd "$copy/tree" && nice -n 19 "$python" -m pytest -q -x -p no:cacheprovider "$@"); then
    echo "plant: NOT caught: the tests passed with the bug" >&2
    exit 1
fi
echo "plant: caught: the tests failed with the bug" >&2
exit 0
