#!/usr/bin/env bash
# wire.sh COMMIT VERSION: writes testdata/VERSION/wire.binpb beside this
# script: the release's wire schemas (every .proto under proto/ at COMMIT,
# with their imports) as a serialized google.protobuf.FileDescriptorSet.
# TestGoldenWire checks the current code's descriptors against it.
#
# The schemas come from the release commit, not from the working tree: the
# point is to keep what the release's peers send and expect, so that a
# current change that breaks them fails a test. Needs protoc (apt-get
# install -y protobuf-compiler) and git; a second or so. Run it after
# golden.sh, which replaces the whole folder.
set -euo pipefail

if [ $# -ne 2 ]; then
	echo "usage: $0 COMMIT VERSION (e.g. fa4612c v0.1.0)" >&2
	exit 2
fi
COMMIT=$1
VERSION=$2
here=$(cd "$(dirname "$0")" && pwd)
out=$here/testdata/$VERSION/wire.binpb
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

root=$(git -C "$here" rev-parse --show-toplevel)
git -C "$root" archive "$COMMIT" proto | tar -x -C "$work"
cd "$work/proto"
mapfile -t protos < <(find . -name '*.proto' | sed 's|^\./||' | LC_ALL=C sort)
if [ ${#protos[@]} -eq 0 ]; then
	echo "wire: no .proto under proto/ at $COMMIT" >&2
	exit 1
fi
# One root, proto/, for every file: imports between Baton's protos are
# written relative to it ("optionspb/options.proto"), and a file compiled
# under two names would be two files to protoc. The names in the set are
# therefore not the ones the generated Go code registers (gen.go compiles
# each from its own folder); the test matches by full name, never by file.
mkdir -p "$(dirname "$out")"
protoc -I . --include_imports --descriptor_set_out="$out" "${protos[@]}"
echo "wire: wrote $out from ${protos[*]} at $COMMIT" >&2
