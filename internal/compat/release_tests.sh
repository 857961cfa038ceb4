#!/usr/bin/env bash
# release_tests.sh [COMMIT]: runs testdata/release_tests/* inside the
# source tree of a release (default fa4612c, 0.1.0): each folder's test
# files are copied into the same package of the release's tree and its
# TestRelease* tests run there. They check what the release's own code
# does with what this tree writes, where a golden file cannot tell (a
# procedure tree whose children a newer leader forgot: the release's
# loader and executor must end it as this tree does; a segment directory
# this tree's WAL merges wrote, which the release's WAL must load). A
# folder's testdata/ goes into the package's testdata/. Needs git and the
# module cache the release builds with; about a minute.
set -euo pipefail

COMMIT=${1:-fa4612c4b9565f18975920e00003dffdaf67c64c}
here=$(cd "$(dirname "$0")" && pwd)
root=$(git -C "$here" rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

git -C "$root" archive "$COMMIT" | tar -x -C "$work"
pkgs=()
for dir in "$here"/testdata/release_tests/*/; do
	pkg=$(basename "$dir")
	cp "$dir"/*_test.go "$work/$pkg/"
	if [ -d "$dir/testdata" ]; then
		mkdir -p "$work/$pkg/testdata"
		cp -r "$dir/testdata/." "$work/$pkg/testdata/"
	fi
	pkgs+=("./$pkg/")
done
cd "$work"
go test -count=1 ${GOTESTFLAGS:-} -run 'TestRelease' "${pkgs[@]}"
