#!/usr/bin/env bash
# Makes the development CA and certificates docker-compose.yml mounts at
# /tls in every container: a master certificate for n1..n3 (and
# baton-master-0..3 of the profile statefulset), a region server
# certificate for rs1..rs3 (and baton-rs-0..2), a client certificate for the operator
# on the host (client-operator.pem) and one for Prometheus. Existing files
# are kept, so running it again changes nothing; delete the directory to
# start over with a new CA.
#
#   scripts/compose-tls.sh [DIR]     (default: docker/tls; env BATON_TLS_DIR)
#
# Needs bin/baton (make build). The host's client then uses:
#   export BATON_TLS_CA=DIR/baton-ca.pem BATON_TLS_CERT=DIR/client-operator.pem BATON_TLS_KEY=DIR/client-operator-key.pem
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:-${BATON_TLS_DIR:-$REPO/docker/tls}}
BATON=${BATON_NODE_BIN:-$REPO/bin/baton}
[ -x "$BATON" ] || { echo "compose-tls: $BATON is missing: run 'make build' first" >&2; exit 1; }
mkdir -p "$DIR"
if [ ! -f "$DIR/baton-ca.pem" ]; then
	"$BATON" tls ca create --dir "$DIR" --name "Baton compose CA" >/dev/null
fi
cert() { # role id [hosts]
	[ -f "$DIR/$1-$2.pem" ] && return 0
	"$BATON" tls cert create --role "$1" --id "$2" --ca "$DIR/baton-ca.pem" --ca-key "$DIR/baton-ca-key.pem" \
		--dir "$DIR" ${3:+--host "$3"} >/dev/null
}
for i in 1 2 3; do
	cert master "n$i" "master$i"
	cert regionserver "rs$i" "rs$i"
done
# The compose profile "statefulset": masters and region servers named as
# a StatefulSet's pods, at their headless Service's names.
for i in 0 1 2 3; do
	cert master "baton-master-$i" "baton-master-$i,baton-master-$i.baton-master-headless"
done
for i in 0 1 2; do
	cert regionserver "baton-rs-$i" "baton-rs-$i,baton-rs-$i.baton-rs-headless"
done
cert client operator
cert client prometheus
# The containers' processes run as root, which reads the 0600 keys
# whoever made them. docker-compose.yml mounts into each container the CA
# certificate and that container's own certificate and key only: the CA
# key, and every other key, stay in this directory on the host.
echo "$DIR"
