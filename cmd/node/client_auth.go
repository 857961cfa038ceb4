package main

import (
	"strings"

	"github.com/baton-dev/baton/cluster/client"
)

// unauthenticatedAdvice is what the CLI adds to an UNAUTHENTICATED
// answer: which flags would have let the call in.
func unauthenticatedAdvice(msg string) string {
	if strings.HasPrefix(msg, client.ErrCertificateRequired) {
		// The masters run --client-auth cert (the default): a token alone
		// does not get through their TLS handshake.
		return "this cluster takes clients by certificate (its agents run --client-auth cert, the default): give --tls-cert and --tls-key " +
			"(env BATON_TLS_CERT, BATON_TLS_KEY), a client certificate of the cluster's CA ('baton tls cert create --role client --id NAME'), with --tls-ca; " +
			"a token (--token) then decides what you may do. For --token with --tls-ca alone, the agents must run --client-auth either (or token)"
	}
	return "the cluster enforces access control: present a client certificate (--tls-ca, --tls-cert, --tls-key) bound to a permission, or a token (--token, env BATON_TOKEN) over TLS (--tls-ca)"
}
